"""Error-matrix rows that pika cannot express directly, checked over a raw socket.

Each test asserts the reply code RabbitMQ 3.10 sends (validated against it with
WARREN_TEST_BROKER=127.0.0.1:5673) and that the connection or channel is usable or
closed accordingly.
"""

import uuid

from pamqp import commands, frame

from tests.support.raw_amqp import connect_to, content_body_frame, content_header_frame


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def test_immediate_publish_is_540_connection_error(warren):
    with connect_to(warren) as client:
        client.open_channel()
        client.send_raw(frame.marshal(commands.Basic.Publish(
            exchange="", routing_key="x", immediate=True), 1)
            + content_header_frame(1, 1) + content_body_frame(1, b"x"))
        close = client.wait_for_connection_close()
        assert (close.reply_code, close.class_id, close.method_id) == (540, 60, 40)


def test_reusing_a_consumer_tag_on_a_channel_is_530(warren):
    queue = unique("q")
    with connect_to(warren) as client:
        client.open_channel()
        client.send_method(1, commands.Queue.Declare(queue=queue, exclusive=True))
        client.expect(commands.Queue.DeclareOk, channel=1)
        client.send_method(1, commands.Basic.Consume(queue=queue, consumer_tag="tag"))
        client.expect(commands.Basic.ConsumeOk, channel=1)
        client.send_method(1, commands.Basic.Consume(queue=queue, consumer_tag="tag"))
        assert client.wait_for_connection_close().reply_code == 530


def test_publishing_to_an_internal_exchange_is_403(warren):
    exchange = unique("internal")
    with connect_to(warren) as client:
        client.open_channel()
        client.send_method(1, commands.Exchange.Declare(
            exchange=exchange, exchange_type="fanout", internal=True, auto_delete=True))
        client.expect(commands.Exchange.DeclareOk, channel=1)
        client.publish(1, "", b"x", exchange=exchange)
        assert client.wait_for_close_code() == 403
        client.send_method(1, commands.Channel.CloseOk())
        client.open_channel(2)
        client.send_method(2, commands.Exchange.Delete(exchange=exchange))
        client.expect(commands.Exchange.DeleteOk, channel=2)


def channel_error_after(client, *methods) -> int:
    client.open_channel()
    for method in methods:
        client.send_method(1, method)
    return client.wait_for_close_code()


def test_tx_commit_without_select_is_406(warren):
    with connect_to(warren) as client:
        assert channel_error_after(client, commands.Tx.Commit()) == 406


def test_tx_rollback_without_select_is_406(warren):
    with connect_to(warren) as client:
        assert channel_error_after(client, commands.Tx.Rollback()) == 406


def test_confirm_select_on_a_tx_channel_is_406(warren):
    with connect_to(warren) as client:
        assert channel_error_after(client, commands.Tx.Select(),
                                   commands.Confirm.Select()) == 406


def test_tx_select_on_a_confirm_channel_is_406(warren):
    with connect_to(warren) as client:
        assert channel_error_after(client, commands.Confirm.Select(),
                                   commands.Tx.Select()) == 406
