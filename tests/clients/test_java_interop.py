"""The RabbitMQ Java client (5.0.0) against the broker: confirms, qos, basic.get counts,
transactions, large bodies over a small frame_max, heartbeats, automatic recovery across
a broker restart, and channel error codes.

Each test runs one program of interop/java/ (compiled once per session by java_support)
and asserts on the `RESULT key=value` lines it prints. With WARREN_TEST_BROKER=host:port
every test except the recovery one runs against that broker (RabbitMQ is the reference);
the recovery test restarts a dedicated Warren and so is Warren-only. The programs are
given a host and a port and log in as guest on `/` (interop/java/README.md), so the tests
take the plugin's session broker (`warren_broker`), not a `warren` vhost.
"""

import pytest

from tests.support.java_support import java_programs  # noqa: F401  (fixture)

CONFIRM_COUNT = 100_000


def test_publisher_confirms_async_sync_and_return(warren_broker, java_programs):
    run = java_programs.run("Confirms", warren_broker, CONFIRM_COUNT, timeout=90)
    # Asynchronous: every publish acked exactly once, counting multiple=true ranges.
    assert run["async_wait_for_confirms"] == "true"
    assert run.as_int("async_acked") == CONFIRM_COUNT
    assert run.as_int("async_nacked") == 0
    assert run.as_int("async_unknown_tags") == 0
    assert run.as_int("async_unconfirmed") == 0
    assert run.as_int("async_next_publish_seq_no") == CONFIRM_COUNT + 1
    assert run.as_int("async_queue_messages") == CONFIRM_COUNT
    # Synchronous: publish + waitForConfirmsOrDie, ten times.
    assert run.as_int("sync_confirmed") == 10
    assert run.as_int("sync_next_publish_seq_no") == 11
    assert run.as_int("sync_queue_messages") == 10
    # Mandatory + unroutable: basic.return (312 NO_ROUTE) first, then the ack.
    assert run["return_events"] == "return:312:NO_ROUTE:amq.direct:unroutable,ack:1"


def test_qos_prefetch_with_batched_manual_acks(warren_broker, java_programs):
    run = java_programs.run("QosConsumer", warren_broker, 2000)
    assert run.as_int("received") == 2000
    assert run.as_int("out_of_order") == 0
    assert run.as_int("redelivered") == 0
    assert 1 <= run.as_int("max_outstanding") <= run.as_int("prefetch") == 10
    assert run.as_int("queue_messages_after") == 0


def test_basic_get_message_counts(warren_broker, java_programs):
    run = java_programs.run("BasicGet", warren_broker)
    assert run["message_counts"] == "4,3,2,1,0"
    assert run["bodies"] == "m0,m1,m2,m3,m4"
    assert run["empty_response"] == "null"


def test_transactions_publish_and_ack(warren_broker, java_programs):
    run = java_programs.run("Tx", warren_broker)
    assert run.as_int("ready_after_rollback") == 0
    assert run.as_int("ready_before_commit") == 0
    assert run.as_int("ready_after_commit") == 1
    assert run["tx_get_body"] == "committed"
    # The rolled-back ack leaves the message unacked: not ready, back on channel close.
    assert run.as_int("ready_after_ack_rollback") == 0
    assert run["requeued_body"] == "committed"
    assert run["requeued_redelivered"] == "true"
    assert run.as_int("ready_after_ack_commit") == 0


def test_large_body_with_small_frame_max(warren_broker, java_programs):
    run = java_programs.run("LargeBody", warren_broker)
    assert run.as_int("frame_max") == 8192   # the lowest every RabbitMQ line takes
    assert run.as_int("received_length") == 5 * 1024 * 1024
    assert run["received_sha256"] == run["sent_sha256"]


def test_heartbeats_keep_idle_connection_open(warren_broker, java_programs):
    run = java_programs.run("Heartbeat", warren_broker)
    assert run.as_int("heartbeat") == 1
    assert run["shutdown_during_idle"] == "none"
    assert run["open_after_idle"] == "true"
    assert run["get_body"] == "still-alive"
    assert run["open_at_end"] == "true"


@pytest.mark.warren_only("restarts a Warren broker of its own (broker_factory)")
def test_automatic_recovery_across_broker_restart(broker_factory, java_programs):
    warren = broker_factory()
    program = java_programs.start("Recovery", warren)
    try:
        program.expect("READY", timeout=20)
        port = warren.port
        warren.stop(timeout=15)   # SIGTERM: clients get Connection.Close 320
        warren.start()            # same port (warren.port), same data directory
        assert warren.port == port
        program.send_line("RESTARTED")
        run = program.finish(timeout=60)
    finally:
        program.kill()
    assert run.as_int("before_received") == 20
    assert run["recovery_started"] == "true"
    assert run["recovered"] == "true"
    assert run["connection_open"] == "true"
    assert run.as_int("after_received") == 20
    assert run.as_int("stray_messages") == 0


def test_channel_error_codes(warren_broker, java_programs):
    run = java_programs.run("Errors", warren_broker)
    missing, reserved = run["passive_missing_name"], run["reserved_exchange_name"]
    expected = {   # reply code, RabbitMQ's reply text, failing class.method id
        "passive_missing": ("404", f"NOT_FOUND - no queue '{missing}' in vhost '/'", "50.10"),
        "reserved_exchange": (
            "403", f"ACCESS_REFUSED - exchange name '{reserved}' contains reserved prefix "
                   "'amq.*'", "40.10"),
        "unknown_tag": ("406", "PRECONDITION_FAILED - unknown delivery tag 12345", "60.80"),
    }
    for case, (code, text, method) in expected.items():
        assert run[f"{case}_code"] == code, case
        assert run[f"{case}_text"] == text, case
        assert run[f"{case}_method"] == method, case
        assert run[f"{case}_hard"] == "false", case   # a channel error, not a connection one
        assert run[f"{case}_by_application"] == "false", case
    assert run["connection_open"] == "true"
    assert run["new_channel_works"] == "true"


def test_rpc_client_with_direct_reply_to(warren_broker, java_programs):
    run = java_programs.run("DirectReplyRpc", warren_broker)
    assert run["answers"] == "ONE,TWO,THREE"
    assert run["reply_to_rewritten"] == "true"
