"""`warren ctl` (and `warrenctl`): a rabbitmqctl-style command line speaking to a
RabbitMQ-compatible management HTTP API. A pure client: it imports nothing of the
broker, so it works against Warren or RabbitMQ, locally or remotely."""
