"""The rabbitmq/amqp091-go client (Debian's 1.5.0) against the broker: publisher confirms
with NotifyPublish and DeferredConfirmation, mandatory returns, Qos with manual acks,
basic.get message counts, transactions, channel error codes as *amqp.Error, and
heartbeats on an idle connection.

Each test runs one scenario of the interop/go program (built once per session by
go_support) and asserts on the `RESULT key=value` lines it prints. With
WARREN_TEST_BROKER=host:port the tests run against that broker (RabbitMQ is the reference).
The program is given a host and a port and logs in as guest on `/` (interop/go/README.md),
so the tests take the plugin's session broker (`warren_broker`), not a `warren` vhost.
"""

from tests.support.go_support import go_interop  # noqa: F401  (fixture)

CONFIRM_COUNT = 10_000


def test_publisher_confirms_notify_publish_and_deferred(warren_broker, go_interop):
    run = go_interop.run("confirms", warren_broker, CONFIRM_COUNT)
    assert run.as_int("next_publish_seq_no") == CONFIRM_COUNT + 1
    assert run.as_int("deferred_tag_mismatch") == 0
    # NotifyPublish: one confirmation per publish (multiple=true acks expanded), in order.
    assert run.as_int("notify_acked") == CONFIRM_COUNT
    assert run.as_int("notify_nacked") == 0
    assert run.as_int("notify_out_of_order") == 0
    # Every DeferredConfirmation acked, but those amqp091-go 1.5.0 leaves unsettled when
    # an ack overtakes their registration (interop/go/confirms.go): a client race, seen
    # once in a CI run with a loaded machine (9,999 of 10,000), never a nack.
    assert run.as_int("deferred_nacked") == 0
    assert run.as_int("deferred_acked") + run.as_int("deferred_unsettled") == CONFIRM_COUNT
    assert run.as_int("deferred_acked") > CONFIRM_COUNT // 2
    assert run.as_int("queue_messages") == CONFIRM_COUNT


def test_mandatory_unroutable_publish_is_returned(warren_broker, go_interop):
    run = go_interop.run("return", warren_broker)
    assert run["mandatory_acked"] == "true"
    assert run.as_int("returns_before_ack") == 1   # basic.return precedes its basic.ack
    assert run.as_int("return_code") == 312
    assert run["return_text"] == "NO_ROUTE"
    assert run["return_exchange"] == "amq.direct"
    assert run["return_routing_key"] == run["unroutable_key"]
    assert run["return_body"] == "lost"
    assert run["return_message_id"] == "lost-id"
    assert run["return_content_type"] == "text/plain"
    assert run["non_mandatory_acked"] == "true"
    assert run.as_int("non_mandatory_returns") == 0
    assert run["routable_acked"] == "true"
    assert run.as_int("routable_returns") == 0
    assert run.as_int("queue_messages") == 1


def test_qos_prefetch_with_manual_acks_keeps_order(warren_broker, go_interop):
    run = go_interop.run("qos", warren_broker, 2000)
    assert run["beyond_prefetch"] == "false"   # nothing past a full window of 10 unacked
    assert run.as_int("received") == 2000
    assert run.as_int("out_of_order") == 0
    assert run.as_int("redelivered") == 0
    assert run.as_int("max_outstanding") == run.as_int("prefetch") == 10
    assert run.as_int("stray_after_cancel") == 0
    assert run.as_int("queue_messages_after") == 0
    assert run.as_int("queue_consumers_after") == 0


def test_basic_get_message_counts(warren_broker, go_interop):
    run = go_interop.run("get", warren_broker)
    assert run["message_counts"] == "4,3,2,1,0"
    assert run["delivery_tags"] == "1,2,3,4,5"
    assert run["bodies"] == "m0,m1,m2,m3,m4"
    assert run["empty_ok"] == "false"
    assert run.as_int("queue_messages_after_ack") == 0


def test_transactions_commit_and_rollback(warren_broker, go_interop):
    run = go_interop.run("tx", warren_broker)
    assert run.as_int("ready_after_rollback") == 0
    assert run.as_int("ready_before_commit") == 0
    assert run.as_int("ready_after_commit") == 1
    assert run["tx_get_body"] == "committed"
    # The rolled-back ack leaves the message unacked: not ready, back on channel close.
    assert run.as_int("ready_after_ack_rollback") == 0
    assert run["requeued_body"] == "committed"
    assert run["requeued_redelivered"] == "true"
    assert run.as_int("ready_after_ack_before_commit") == 0
    assert run.as_int("ready_after_ack_commit") == 0


def test_channel_errors_as_amqp_error(warren_broker, go_interop):
    run = go_interop.run("errors", warren_broker)
    missing, reserved = run["passive_missing_name"], run["reserved_exchange_name"]
    expected = {   # reply code and RabbitMQ's reply text
        "passive_missing": (404, f"NOT_FOUND - no queue '{missing}' in vhost '/'"),
        "reserved_exchange": (
            403, f"ACCESS_REFUSED - exchange name '{reserved}' contains reserved prefix "
                 "'amq.*'"),
        "double_ack": (406, f"PRECONDITION_FAILED - unknown delivery tag "
                            f"{run['double_ack_tag']}"),
    }
    for case, (code, reason) in expected.items():
        assert run.as_int(f"{case}_code") == code, case
        assert run[f"{case}_reason"] == reason, case
        assert run[f"{case}_server"] == "true", case    # sent by the broker
        assert run[f"{case}_recover"] == "true", case   # a soft (channel) error code
    assert run["passive_missing_channel_closed"] == "true"
    assert run["closed_channel_error_is_err_closed"] == "true"
    assert run["connection_open"] == "true"
    assert run.as_int("queue_messages_after") == 0   # the first ack stood
    assert run["new_channel_works"] == "true"


def test_heartbeat_keeps_idle_connection_open(warren_broker, go_interop):
    # The client drops a connection it reads nothing from for 1.5 s (3 x half the 1 s
    # heartbeat); the program idles 4 s, so the broker must be sending heartbeats.
    run = go_interop.run("heartbeat", warren_broker)
    assert run["heartbeat_seconds"] == "1"
    assert run["closed_during_idle"] == "none"
    assert run["open_after_idle"] == "true"
    assert run["get_body"] == "still-alive"
    assert run["open_at_end"] == "true"
