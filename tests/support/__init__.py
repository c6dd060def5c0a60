"""The test suite's helpers, imported by name from every test folder and from bench/:
`from tests.support.broker_process import BrokerProcess`. Brokers to test against
(broker_process, rabbitmq_node, broker_address, broker_admin, management_client), client
helpers and fixtures (pika_helpers, stream_helpers, raw_amqp, java_support, go_support,
spark_support, tls_support, ...), the differential runner (differential,
differential_scenarios) and the fuzzers' grammar and engines (amqp_grammar, amqp_mutation,
wire_fuzz, frame_fuzz). tests/README.md lists them all."""
