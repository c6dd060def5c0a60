"""The differential sweep's scenarios (played by test_differential.py against Warren and
RabbitMQ): the protocol edges of issue 15, written once each, through raw frames unless
a client can say it."""

import datetime

import pika
from pamqp import commands

from tests.support.differential import Difference, Scenario, Session
from tests.support.raw_amqp import RawAmqpClient, content_body_frame, content_header_frame, heartbeat_frame

Q = commands.Queue
E = commands.Exchange
B = commands.Basic


def redeclare_queue_arguments(s: Session) -> None:
    """Redeclaring with a differing argument: which ones count for equivalence."""
    client = s.raw()
    name = s.name("q")
    s.call(client, 1, Q.Declare(queue=name, arguments={"x-message-ttl": 1000}), "declare")
    s.call(client, 1, Q.Declare(queue=name, arguments={"x-message-ttl": 1000, "x-whatever": 1}),
           "redeclare with an unknown argument added")
    s.call(client, 1, Q.Declare(queue=name, arguments={"x-message-ttl": 1000,
                                                       "x-dead-letter-exchange": "dlx"}),
           "redeclare with x-dead-letter-exchange added")
    client.open_channel(2)
    s.call(client, 2, Q.Declare(queue=name, arguments={"x-message-ttl": 2000}),
           "redeclare with another ttl")
    client.open_channel(3)
    s.call(client, 3, Q.Declare(queue=name, arguments={"x-message-ttl": 1000}, durable=True),
           "redeclare durable")
    client.open_channel(4)
    s.call(client, 4, Q.Declare(queue=name), "redeclare without arguments")
    client.open_channel(5)
    s.call(client, 5, Q.Declare(queue=name, passive=True, arguments={"x-message-ttl": 5}),
           "passive with other arguments")


def redeclare_exchange(s: Session) -> None:
    client = s.raw()
    name = s.name("x")
    s.call(client, 1, E.Declare(exchange=name, exchange_type="direct"), "declare")
    s.call(client, 1, E.Declare(exchange=name, exchange_type="direct", arguments={"x-foo": 1}),
           "redeclare with an unknown argument")
    s.call(client, 1, E.Declare(exchange=name, exchange_type="topic"), "redeclare as topic")
    client.open_channel(2)
    s.call(client, 2, E.Declare(exchange=name, exchange_type="direct", durable=True),
           "redeclare durable")
    client.open_channel(3)
    s.call(client, 3, E.Declare(exchange=name, exchange_type="fanout", passive=True),
           "passive with another type")


def reserved_names(s: Session) -> None:
    """Passive and active declares of amq.* names."""
    client = s.raw()
    s.call(client, 1, E.Declare(exchange="amq.direct", exchange_type="direct", passive=True),
           "passive amq.direct")
    s.call(client, 1, E.Declare(exchange="amq.topic", exchange_type="direct", passive=True),
           "passive amq.topic with the wrong type")
    s.call(client, 1, E.Declare(exchange="amq.direct", exchange_type="direct", durable=True),
           "active amq.direct as declared")
    s.call(client, 1, E.Declare(exchange="amq.nothing", exchange_type="direct", passive=True),
           "passive amq.nothing")
    client.open_channel(2)
    s.call(client, 2, E.Declare(exchange="amq.new", exchange_type="direct"), "active amq.new")
    client.open_channel(3)
    s.call(client, 3, Q.Declare(queue="amq.nothing", passive=True), "passive queue amq.nothing")
    client.open_channel(4)
    s.call(client, 4, Q.Declare(queue="amq.new"), "active queue amq.new")
    client.open_channel(5)
    s.call(client, 5, E.Declare(exchange="", passive=True), "passive default exchange")
    client.open_channel(6)
    s.call(client, 6, E.Delete(exchange="amq.fanout"), "delete amq.fanout")


def direct_reply_to_passive(s: Session) -> None:
    client = s.raw()
    s.call(client, 1, Q.Declare(queue="amq.rabbitmq.reply-to", passive=True),
           "passive amq.rabbitmq.reply-to")
    s.call(client, 1, Q.Declare(queue="amq.rabbitmq.reply-to"), "active amq.rabbitmq.reply-to")
    s.call(client, 1, Q.Declare(queue="amq.rabbitmq.reply-to.abc", passive=True),
           "passive amq.rabbitmq.reply-to.abc")


def last_declared_queue(s: Session) -> None:
    """An empty queue name means the channel's last declared queue."""
    client = s.raw()
    s.call(client, 1, Q.Declare(queue="", exclusive=True), "declare server-named")
    s.call(client, 1, Q.Bind(queue="", exchange="amq.direct", routing_key="k"), "bind ''")
    client.publish(1, "k", b"one", exchange="amq.direct")
    s.call(client, 1, B.Get(queue=""), "get ''")
    s.read(client, "get '' header")
    s.read(client, "get '' body")
    s.call(client, 1, Q.Purge(queue=""), "purge ''")
    s.call(client, 1, B.Consume(queue="", consumer_tag="c1"), "consume ''")
    s.call(client, 1, B.Cancel(consumer_tag="c1"), "cancel")
    s.call(client, 1, Q.Unbind(queue="", exchange="amq.direct", routing_key="k"), "unbind ''")
    s.call(client, 1, Q.Delete(queue=""), "delete ''")
    client.open_channel(2)
    s.call(client, 2, B.Get(queue=""), "get '' with nothing declared")
    client.open_channel(3)
    s.call(client, 3, Q.Bind(queue="", exchange="amq.direct", routing_key="k"),
           "bind '' with nothing declared")
    client.open_channel(4)
    s.call(client, 4, B.Consume(queue=""), "consume '' with nothing declared")
    client.open_channel(5)
    s.call(client, 5, Q.Delete(queue=""), "delete '' with nothing declared")


def delete_a_consumed_queue(s: Session) -> None:
    """A channel deletes the queue it consumes from: Queue.DeleteOk comes first, then
    the Basic.Cancel for its consumer (py-amqp, under kombu, raises ConsumerCancelled if
    the Cancel arrives while it waits for the DeleteOk)."""
    client = s.raw()
    name = s.name("consumed")
    s.call(client, 1, Q.Declare(queue=name), "declare")
    s.call(client, 1, B.Consume(queue=name, consumer_tag="c1"), "consume")
    s.call(client, 1, Q.Delete(queue=name), "delete")
    s.read(client, "after the delete")


def crossing_channel_close(s: Session) -> None:
    """The broker closes a channel (an error) while the client's own Channel.Close is on
    its way: the client sent its Close, then sees the broker's."""
    client = s.raw()
    client.send_method(1, B.Get(queue=s.name("missing")))
    client.send_method(1, commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    s.read(client, "first reply")
    s.read(client, "second reply", timeout=2.0)
    client.send_method(1, commands.Channel.CloseOk())
    s.call(client, 1, commands.Channel.Open(), "reopen")
    s.call(client, 1, commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), "clean close")


def close_ok_on_forgotten_channel(s: Session) -> None:
    """A Close-Ok on a channel never opened, and a second one on a channel the client
    closed. RabbitMQ answers them from a new channel process, so its Connection.Close may
    come after replies on other channels: each is read before anything else is sent."""
    client = s.raw(channel=None)
    s.call(client, 7, commands.Channel.CloseOk(), "Close-Ok on channel 7")
    other = s.raw()
    s.call(other, 1, commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0,
                                            method_id=0), "close")
    s.call(other, 1, commands.Channel.CloseOk(), "second Close-Ok on channel 1")


def uncommitted_acks(s: Session) -> None:
    """Acks inside a transaction that the channel's close rolls back."""
    client = s.raw(channel=None)
    name = s.name("tx")
    client.open_channel(1)
    s.call(client, 1, Q.Declare(queue=name), "declare")
    for body in (b"a", b"b", b"c"):
        client.publish(1, name, body)
    client.open_channel(2)
    s.call(client, 2, commands.Tx.Select(), "tx.select")
    for step in ("get a", "get b"):
        s.call(client, 2, B.Get(queue=name), step)
        s.read(client, step + " header")
        s.read(client, step + " body")
    client.send_method(2, B.Ack(delivery_tag=1))
    client.send_method(2, B.Ack(delivery_tag=2))
    s.call(client, 2, commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), "close tx channel")
    for step in ("get again 1", "get again 2", "get again 3"):
        s.call(client, 1, B.Get(queue=name, no_ack=True), step)
        s.read(client, step + " header")
        s.read(client, step + " body")
    s.call(client, 1, B.Get(queue=name), "get on empty queue")


def frame_max_after_tune(s: Session) -> None:
    """A body frame larger than the frame_max agreed (8192, the lowest every line
    takes)."""
    client = s.raw(frame_max=8192)
    name = s.name("big")
    s.call(client, 1, Q.Declare(queue=name), "declare")
    client.send_method(1, B.Publish(routing_key=name))
    client.send_raw(content_header_frame(1, 9000) + content_body_frame(1, b"x" * 9000))
    s.read(client, "body larger than frame_max")
    s.read(client, "then")


def frame_max_before_tune(s: Session) -> None:
    """A Start-Ok larger than 8192 octets (the largest frame before Tune since RabbitMQ
    4.1, and in Warren's every line) before Tune."""
    client = RawAmqpClient(s.broker.host, s.broker.port, 10.0)
    s.clients.append(client)
    client.start_handshake()
    client.send_start_ok(client_properties={"padding": "p" * 8000})
    s.read(client, "reply to a large Start-Ok")
    s.read(client, "then")


def heartbeat_on_a_channel(s: Session) -> None:
    client = s.raw()
    client.send_raw(heartbeat_frame(1))
    s.read(client, "heartbeat on channel 1")
    s.read(client, "then", timeout=2.0)


def publishes_after_close_ok(s: Session) -> None:
    """The client closes and keeps writing: RabbitMQ reads and discards what follows."""
    client = s.raw()
    name = s.name("after-close")
    s.call(client, 1, Q.Declare(queue=name), "declare")
    client.send_method(0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    burst = b"".join(content for _ in range(200) for content in (
        _publish_frames(name, b"x" * 1000)))
    client.send_raw(burst)
    s.read(client, "close-ok")
    s.read(client, "then", timeout=2.0)
    other = s.raw()
    s.call(other, 1, Q.Declare(queue=name, passive=True), "messages that arrived after close")


def _publish_frames(routing_key: str, data: bytes) -> tuple:
    from pamqp import frame
    return (frame.marshal(B.Publish(routing_key=routing_key), 1),
            content_header_frame(1, len(data)), content_body_frame(1, data))


def x_death_headers(s: Session) -> None:
    """A message rejected back and forth between two queues that dead-letter into each
    other: the x-death entries, their field types, order and counts."""
    client = s.raw()
    work, dead = s.name("work"), s.name("dead")
    for label, queue, target in (("work", work, dead), ("dead", dead, work)):
        s.call(client, 1, Q.Declare(queue=queue, arguments={
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": target}),
            f"declare {label}")
        s.call(client, 1, B.Consume(queue=queue, consumer_tag=label), f"consume {label}")
    client.publish(1, work, b"m", properties=B.Properties(headers={"h": 1}))
    for tag in range(1, 5):
        s.read_message(client, f"delivery {tag}")
        client.send_method(1, B.Reject(delivery_tag=tag, requeue=False))
    s.read_message(client, "delivery 5")


def x_death_from_older_versions(s: Session) -> None:
    """A message that already carries x-death entries as older brokers wrote them (count
    as a signed 32-bit int, an entry without count) is dead-lettered again."""
    client = s.raw()
    work, dead = s.name("work"), s.name("dead")
    s.call(client, 1, Q.Declare(queue=dead), "declare dead")
    s.call(client, 1, Q.Declare(queue=work, arguments={"x-dead-letter-exchange": "",
                                                       "x-dead-letter-routing-key": dead}),
           "declare work")
    s.call(client, 1, B.Consume(queue=dead, consumer_tag="dead"), "consume dead")
    old = [{"queue": work, "reason": "rejected", "count": 3, "exchange": "",
            "routing-keys": [work]},
           {"queue": "elsewhere", "reason": "expired", "exchange": "", "routing-keys": ["r"]}]
    client.publish(1, work, b"m", properties=B.Properties(headers={"x-death": old}))
    s.call(client, 1, B.Get(queue=work), "get work")
    s.read(client, "get work header")
    s.read(client, "get work body")
    client.send_method(1, B.Reject(delivery_tag=1, requeue=False))
    s.read_message(client, "dead-lettered")


def x_death_histories(s: Session) -> None:
    """Dead-lettering messages published with x-death histories RabbitMQ regroups or
    replaces: duplicates, counts of other types, a merged entry's old fields, a header
    that is not an array, x-first-death-* already present."""
    client = s.raw()
    then = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    histories = (
        ("one entry without count", lambda work: [
            {"queue": work, "reason": "rejected", "exchange": "old", "routing-keys": ["k"],
             "time": then}], {}),
        ("duplicates without count", lambda work: [
            {"queue": work, "reason": "rejected", "exchange": "a"},
            {"queue": "other", "reason": "expired"},
            {"queue": work, "reason": "rejected", "exchange": "b"},
            {"queue": "other", "reason": "expired", "count": 5}], {}),
        ("duplicates with counts", lambda work: [
            {"queue": work, "reason": "rejected", "count": 2},
            {"queue": work, "reason": "rejected", "count": 7}], {}),
        ("another entry's integers", lambda work: [
            {"queue": "other", "reason": "expired", "count": 2, "n": 3}], {}),
        ("not an array", lambda work: "text", {}),
        ("first death named already", None, {"x-first-death-reason": "mine"}))
    client.open_channel(2)   # 1 consumes the dead-letter queues, 2 gets and rejects
    for number, (step, history, headers) in enumerate(histories):
        work, dead = s.name(f"work{number}"), s.name(f"dead{number}")
        s.call(client, 1, Q.Declare(queue=dead), f"{step}: declare dead")
        s.call(client, 1, B.Consume(queue=dead, consumer_tag=f"dead{number}", no_ack=True),
               f"{step}: consume dead")
        s.call(client, 1, Q.Declare(queue=work, arguments={
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}),
            f"{step}: declare work")
        if history is not None:
            headers = {"x-death": history(work), **headers}
        client.publish(2, work, b"m", properties=B.Properties(headers=headers,
                                                              expiration="60000"))
        s.call(client, 2, B.Get(queue=work), f"{step}: get")
        s.read(client, f"{step}: get header")
        s.read(client, f"{step}: get body")
        client.send_method(2, B.Reject(delivery_tag=number + 1, requeue=False))
        s.read_message(client, f"{step}: dead-lettered")


def exclusive_queue_access(s: Session) -> None:
    """Another connection touching an exclusive queue: 405 RESOURCE_LOCKED, per method."""
    owner = s.raw()
    name = s.name("exclusive")
    s.call(owner, 1, Q.Declare(queue=name, exclusive=True), "declare exclusive")
    other = s.raw(channel=None)
    methods = (("passive declare", Q.Declare(queue=name, passive=True)),
               ("declare", Q.Declare(queue=name)),
               ("declare exclusive", Q.Declare(queue=name, exclusive=True)),
               ("consume", B.Consume(queue=name)),
               ("get", B.Get(queue=name)),
               ("purge", Q.Purge(queue=name)),
               ("bind", Q.Bind(queue=name, exchange="amq.direct", routing_key="k")),
               ("delete", Q.Delete(queue=name)))
    for channel, (step, method) in enumerate(methods, start=1):
        other.open_channel(channel)
        s.call(other, channel, method, step)
    s.call(owner, 1, Q.Declare(queue=name), "owner redeclares not exclusive")


def binding_lookup_order(s: Session) -> None:
    """Which end a bind names when both are missing, and when another connection's
    exclusive queue is refused (bind and unbind, queue and exchange bindings)."""
    owner = s.raw()
    locked, queue, exchange = s.name("locked"), s.name("q"), s.name("x")
    s.call(owner, 1, Q.Declare(queue=locked, exclusive=True), "declare exclusive")
    s.call(owner, 1, E.Declare(exchange=exchange, exchange_type="direct"), "declare exchange")
    s.call(owner, 1, Q.Bind(queue=locked, exchange=exchange, routing_key="bound"), "bind")
    s.call(owner, 1, Q.Declare(queue=queue), "declare queue")
    missing_queue, missing_exchange = s.name("nq"), s.name("nx")
    client = s.raw(channel=None)
    methods = (
        ("bind both missing", Q.Bind(queue=missing_queue, exchange=missing_exchange)),
        ("bind missing queue", Q.Bind(queue=missing_queue, exchange=exchange)),
        ("bind missing exchange", Q.Bind(queue=queue, exchange=missing_exchange)),
        ("bind locked to missing", Q.Bind(queue=locked, exchange=missing_exchange)),
        ("bind locked", Q.Bind(queue=locked, exchange=exchange)),
        ("unbind both missing", Q.Unbind(queue=missing_queue, exchange=missing_exchange)),
        ("unbind missing queue", Q.Unbind(queue=missing_queue, exchange=exchange)),
        ("unbind missing exchange", Q.Unbind(queue=queue, exchange=missing_exchange)),
        ("unbind locked from missing", Q.Unbind(queue=locked, exchange=missing_exchange)),
        ("unbind locked, not bound", Q.Unbind(queue=locked, exchange=exchange,
                                              routing_key="other")),
        ("unbind locked, bound", Q.Unbind(queue=locked, exchange=exchange,
                                          routing_key="bound")),
        ("exchange bind both missing", E.Bind(destination=missing_queue,
                                              source=missing_exchange)),
        ("exchange bind missing destination", E.Bind(destination=missing_queue,
                                                     source=exchange)),
        ("exchange bind missing source", E.Bind(destination=exchange,
                                                source=missing_exchange)),
        ("exchange unbind both missing", E.Unbind(destination=missing_queue,
                                                  source=missing_exchange)),
        ("exchange unbind missing source", E.Unbind(destination=exchange,
                                                    source=missing_exchange)),
        ("exchange unbind missing destination", E.Unbind(destination=missing_queue,
                                                         source=exchange)))
    for channel, (step, method) in enumerate(methods, start=1):
        client.open_channel(channel)
        s.call(client, channel, method, step)


def pika_nack_requeue_order(s: Session) -> None:
    """Delivery order and redelivered flags after a nack with requeue (pika)."""
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        s.broker.host, s.broker.port, heartbeat=0))
    try:
        channel = connection.channel()
        name = s.name("order")
        ok = channel.queue_declare(name)
        s.record("declare", (ok.method.message_count, ok.method.consumer_count))
        for index in range(5):
            channel.basic_publish("", name, str(index).encode(),
                                  pika.BasicProperties(headers={"i": index}))
        channel.basic_qos(prefetch_count=5)
        seen = []
        for method, properties, body in channel.consume(name, inactivity_timeout=10):
            if method is None:
                break
            seen.append((body, method.redelivered, properties.headers))
            if len(seen) == 5:
                channel.basic_nack(method.delivery_tag, multiple=True, requeue=True)
            if len(seen) == 10:
                channel.basic_ack(method.delivery_tag, multiple=True)
                break
        s.record("deliveries", seen)
        s.record("cancel", channel.cancel())
        s.record("declare again", channel.queue_declare(name, passive=True).method.message_count)
    finally:
        connection.close()


def pika_errors(s: Session) -> None:
    """Reply codes and texts as pika reports them."""
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        s.broker.host, s.broker.port, heartbeat=0))
    try:
        for step, action in (
                ("bind to a missing exchange", lambda ch: ch.queue_bind(
                    s.name("nq"), s.name("nx"))),
                ("delete if-empty", lambda ch: (ch.queue_declare(s.name("full")),
                                                ch.basic_publish("", s.name("full"), b"x"),
                                                ch.queue_delete(s.name("full"), if_empty=True))),
                ("ack an unknown tag", lambda ch: (ch.basic_ack(99), ch.queue_declare(""))),
                ("delete if-empty, full", lambda ch: ch.queue_delete(s.name("full"))),
                ("qos global prefetch size", lambda ch: ch.basic_qos(prefetch_size=10))):
            channel = connection.channel()
            try:
                action(channel)
                s.record(step, "ok")
            except pika.exceptions.ChannelClosedByBroker as closed:
                s.record(step, ("channel closed", closed.reply_code, closed.reply_text))
            except pika.exceptions.ConnectionClosedByBroker as closed:
                s.record(step, ("connection closed", closed.reply_code, closed.reply_text))
                return
    finally:
        if connection.is_open:
            connection.close()


SCENARIOS = (
    Scenario("redeclare_queue_arguments", redeclare_queue_arguments, unfixed=(
        "the 406 text names the field type the value would have as pika encodes it "
        "('signedint'), not the type it came with ('short'): Warren keeps decoded "
        "values, not their wire types")),
    Scenario("redeclare_exchange", redeclare_exchange),
    Scenario("reserved_names", reserved_names),
    Scenario("direct_reply_to_passive", direct_reply_to_passive, differences=(
        Difference("passive amq.rabbitmq.reply-to.abc",
                   {"channel": 1, "method": "Channel.Close", "reply_code": 404,
                    "reply_text": "NOT_FOUND - no queue 'amq.rabbitmq.reply-to.abc' in "
                                  "vhost '/'", "class_id": 50, "method_id": 10},
                   {"channel": 0, "method": "Connection.Close", "reply_code": 541,
                    "reply_text": "INTERNAL_ERROR", "class_id": 0, "method_id": 0},
                   "4.3.6 fails inside (541, the connection closed) where 3.10.8 and "
                   "4.0.5 answer 404; Warren answers 404 under every line",
                   lines=("4.3",)),)),
    Scenario("last_declared_queue", last_declared_queue),
    Scenario("delete_a_consumed_queue", delete_a_consumed_queue),
    Scenario("crossing_channel_close", crossing_channel_close, differences=(
        Difference("reopen", {"channel": 1, "method": "Channel.OpenOk", "channel_id": "0"},
               {"channel": 1, "method": "Channel.OpenOk", "channel_id": ""},
               "pamqp encodes Channel.OpenOk's deprecated channel-id only as '0'; clients "
               "ignore it"),)),
    Scenario("close_ok_on_forgotten_channel", close_ok_on_forgotten_channel),
    Scenario("uncommitted_acks", uncommitted_acks),
    Scenario("frame_max_after_tune", frame_max_after_tune),
    Scenario("frame_max_before_tune", frame_max_before_tune, differences=(
        Difference("reply to a large Start-Ok",
                   {"channel": 0, "method": "Connection.Close", "reply_code": 501,
                    "reply_text": "FRAME_ERROR - type 1, all octets = <<>>: "
                                  "{frame_too_large,8242,8184}",
                    "class_id": 0, "method_id": 0},
                   {"socket": "ended"},
                   "both refuse this frame before Tune-Ok (3.10.8 above 4096 octets, Warren "
                   "above 8192, as RabbitMQ 4.1+); Warren says why in a Connection.Close, "
                   "as it does for frame errors after Tune-Ok"),)),
    Scenario("heartbeat_on_a_channel", heartbeat_on_a_channel),
    Scenario("publishes_after_close_ok", publishes_after_close_ok),
    Scenario("x_death_headers", x_death_headers),
    Scenario("x_death_from_older_versions", x_death_from_older_versions),
    Scenario("x_death_histories", x_death_histories),
    Scenario("exclusive_queue_access", exclusive_queue_access),
    Scenario("pika_nack_requeue_order", pika_nack_requeue_order),
    Scenario("binding_lookup_order", binding_lookup_order),
    Scenario("pika_errors", pika_errors),
)
