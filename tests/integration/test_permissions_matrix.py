"""Permissions and topic permissions, differentially: every cell is one operation (or a
short sequence ending in it) by a user with a given permission set in a given vhost,
and the outcome RabbitMQ 3.10 gives: the operation is allowed, or its channel (or, at
Connection.Open, its connection) is closed with this reply code and text, by the
method that was refused. The same cells pass against Warren and, with
WARREN_TEST_BROKER=127.0.0.1:5673, against RabbitMQ (users and vhosts of its own set up
on the session broker, `warren_broker`, with `broker_admin`, once per module: one user
per permission set).

Texts use placeholders filled in per run: <vhost> and <user> (the cell's), <user:X>
(the user's name with every "." made an "X"), <gen> (any server-chosen queue name).
"""

import copy
import re
import uuid
from dataclasses import dataclass, field

import pytest
from pamqp import body, commands, header

from tests.support.raw_amqp import PeerClosed, RawAmqpClient, connect

PASSWORD = "matrix-password"

# Permission sets (configure, write, read) in vhost A; every user has one.
PERMISSIONS = {
    "all": (".*", ".*", ".*"),
    "none": ("", "", ""),                       # "" matches only the empty name
    "part": ("^cfg-", "^w-", "^r-"),
    "mid": ("mid", "mid", "mid"),               # unanchored: any name containing "mid"
    "cfg": (".*", "", ""),
    "cfg-read": (".*", "", ".*"),
    "cfg-write": (".*", ".*", ""),
    "default-only": ("", r"^amq\.default$", ""),
    "topic.u": (".*", ".*", ".*"),              # a "." in the name: expanded unescaped
}
# In vhost B, "all" may do nothing and "part" may not even connect.
PERMISSIONS_B = {"all": ("", "", "")}
# (user, exchange, write pattern, read pattern)
TOPIC_PERMISSIONS = (
    ("topic.u", "amq.topic", r"^{username}\.{vhost}\.", r"^{username}\."),
    ("topic.u", "t-x", r"^a\.", ""),
    ("topic.u", "d-x", "^never$", "^never$"),     # a direct exchange: never checked
    ("topic.u", "t-cid", "^{client_id}$", ".*"),  # AMQP 0-9-1 has no client_id to expand
)
CLIENT_ID = "cid"   # what the topic user's connection advertises as client_id

QUEUES = ("q-fixture", "r-q", "w-q", "q-mid", "q-topic")
EXCHANGES = (("r-x", "direct"), ("w-x", "direct"), ("x-mid", "direct"),
             ("t-x", "topic"), ("t-dest", "fanout"), ("t-free", "topic"),
             ("d-x", "direct"), ("t-cid", "topic"))

C = commands


@dataclass(frozen=True)
class Publish:
    """Basic.Publish of a one-byte message (answered by nothing: a Basic.Qos after it
    shows whether the channel survived)."""

    exchange: str
    routing_key: str = "k"


@dataclass(frozen=True)
class Cell:
    name: str
    user: str
    steps: tuple
    outcome: tuple | None = None   # None: allowed; else (reply code, reply text)
    vhost: str = "a"
    client_properties: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


def refused(kind: str, name: str, user: str = "<user>") -> tuple:
    return (403, f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '<vhost>' "
                 f"refused for user '{user}'")


def topic_refused(routing_key: str, exchange: str) -> tuple:
    return (403, f"ACCESS_REFUSED - access to topic '{routing_key}' in exchange "
                 f"'{exchange}' in vhost '<vhost>' refused for user '<user>'")


DEFAULT_EXCHANGE = (403,
                    "ACCESS_REFUSED - operation not permitted on the default exchange")
LOCKED = (405, "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'excl-q' "
               "in vhost '<vhost>'. It could be originally declared on another connection "
               "or the exclusive property value does not match that of the original "
               "declaration.")


def missing(kind: str, name: str) -> tuple:
    return (404, f"NOT_FOUND - no {kind} '{name}' in vhost '<vhost>'")


def declare(name: str, kind: str = "direct", **kwargs):
    return C.Exchange.Declare(exchange=name, exchange_type=kind, **kwargs)


def queue(name: str, **kwargs):
    return C.Queue.Declare(queue=name, **kwargs)


def bind(name: str, exchange: str, key: str = "k"):
    return C.Queue.Bind(queue=name, exchange=exchange, routing_key=key)


def unbind(name: str, exchange: str, key: str = "k"):
    return C.Queue.Unbind(queue=name, exchange=exchange, routing_key=key)


def xbind(destination: str, source: str, key: str = "k"):
    return C.Exchange.Bind(destination=destination, source=source, routing_key=key)


def xunbind(destination: str, source: str, key: str = "k"):
    return C.Exchange.Unbind(destination=destination, source=source, routing_key=key)


AE = {"alternate-exchange": "ae-target"}
DLX = {"x-dead-letter-exchange": "dlx-x"}
BAD_TTL = {"x-message-ttl": "soon"}

CELLS = [
    # exchange.declare: configure on the name; the default exchange and the type first,
    # the reserved amq. prefix only after configure and only for a new exchange.
    Cell("exchange.declare allowed", "all", (declare("x-made-1"),)),
    Cell("exchange.declare no configure", "none", (declare("x-made-2"),),
         refused("exchange", "x-made-2")),
    Cell("exchange.declare partial regex match", "part", (declare("cfg-x-made"),)),
    Cell("exchange.declare partial regex miss", "part", (declare("x-made-3"),),
         refused("exchange", "x-made-3")),
    Cell("exchange.declare unanchored regex match", "mid", (declare("a-mid-x"),)),
    Cell("exchange.declare unanchored regex miss", "mid", (declare("a-x"),),
         refused("exchange", "a-x")),
    Cell("exchange.declare passive needs no permission", "none",
         (declare("amq.direct", passive=True),)),
    Cell("exchange.declare passive missing", "none", (declare("no-x", passive=True),),
         missing("exchange", "no-x")),
    Cell("exchange.declare passive default exchange", "all",
         (declare("", passive=True),), DEFAULT_EXCHANGE),
    Cell("exchange.declare default exchange before configure", "none", (declare(""),),
         DEFAULT_EXCHANGE),
    Cell("exchange.declare amq.* configure before reserved prefix", "none",
         (declare("amq.made"),), refused("exchange", "amq.made")),
    Cell("exchange.declare amq.* reserved prefix", "all", (declare("amq.made"),),
         (403, "ACCESS_REFUSED - exchange name 'amq.made' contains reserved prefix "
               "'amq.*'")),
    Cell("exchange.declare existing amq.direct", "all",
         (declare("amq.direct", durable=True),)),
    Cell("exchange.declare existing amq.direct no configure", "none",
         (declare("amq.direct", durable=True),), refused("exchange", "amq.direct")),
    Cell("exchange.declare alternate-exchange allowed", "all",
         (declare("x-ae-1", arguments=AE),)),
    Cell("exchange.declare alternate-exchange needs write on it", "cfg-read",
         (declare("x-ae-2", arguments=AE),), refused("exchange", "ae-target")),
    Cell("exchange.declare alternate-exchange needs read on the exchange", "cfg-write",
         (declare("x-ae-3", arguments=AE),), refused("exchange", "x-ae-3")),
    Cell("exchange.declare alternate-exchange default exchange", "cfg-read",
         (declare("x-ae-4", arguments={"alternate-exchange": ""}),),
         refused("exchange", "amq.default")),
    Cell("exchange.declare existing with alternate-exchange: no check", "cfg",
         (declare("x-fixture-ae", arguments=AE),)),
    # exchange.delete: the default exchange and amq.* first, then configure, then
    # whether it exists.
    Cell("exchange.delete allowed", "all",
         (declare("x-del-1"), C.Exchange.Delete(exchange="x-del-1"))),
    Cell("exchange.delete no configure", "none", (C.Exchange.Delete(exchange="r-x"),),
         refused("exchange", "r-x")),
    Cell("exchange.delete missing no configure", "none",
         (C.Exchange.Delete(exchange="no-x"),), refused("exchange", "no-x")),
    Cell("exchange.delete missing allowed", "all", (C.Exchange.Delete(exchange="no-x"),)),
    Cell("exchange.delete partial regex", "part",
         (C.Exchange.Delete(exchange="cfg-no-x"),)),
    Cell("exchange.delete amq.* before configure", "none",
         (C.Exchange.Delete(exchange="amq.direct"),),
         (403, "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost "
               "'<vhost>' not allowed")),
    Cell("exchange.delete default exchange", "none", (C.Exchange.Delete(exchange=""),),
         DEFAULT_EXCHANGE),
    # queue.declare: the reserved prefix first, then configure (server-named queues
    # with the name chosen), then a dead-letter exchange, then the arguments.
    Cell("queue.declare allowed", "all", (queue("q-made-1"),)),
    Cell("queue.declare no configure", "none", (queue("q-made-2"),),
         refused("queue", "q-made-2")),
    Cell("queue.declare partial regex", "part", (queue("cfg-q-made"),)),
    Cell("queue.declare unanchored regex miss", "mid", (queue("q-made-3"),),
         refused("queue", "q-made-3")),
    Cell("queue.declare server-named allowed", "all", (queue(""),)),
    Cell("queue.declare server-named no configure", "none", (queue(""),),
         refused("queue", "<gen>")),
    Cell("queue.declare server-named partial regex", "part", (queue(""),),
         refused("queue", "<gen>")),
    Cell("queue.declare amq.* reserved prefix before configure", "none",
         (queue("amq.made"),),
         (403, "ACCESS_REFUSED - queue name 'amq.made' contains reserved prefix "
               "'amq.*'")),
    Cell("queue.declare passive needs no permission", "none",
         (queue("q-fixture", passive=True),)),
    Cell("queue.declare passive missing", "none", (queue("no-q", passive=True),),
         missing("queue", "no-q")),
    Cell("queue.declare configure before arguments", "none",
         (queue("q-made-4", arguments=BAD_TTL),), refused("queue", "q-made-4")),
    Cell("queue.declare exclusive allowed", "all", (queue("q-made-5", exclusive=True),)),
    Cell("queue.declare exclusive no configure", "none",
         (queue("q-made-6", exclusive=True),), refused("queue", "q-made-6")),
    Cell("queue.declare other connection's exclusive", "all", (queue("excl-q"),), LOCKED),
    Cell("queue.declare other connection's exclusive no configure", "none",
         (queue("excl-q"),), refused("queue", "excl-q")),
    Cell("queue.declare passive other connection's exclusive", "none",
         (queue("excl-q", passive=True),), LOCKED),
    Cell("queue.declare dead-letter exchange allowed", "all",
         (queue("q-dlx-1", arguments=DLX),)),
    Cell("queue.declare dead-letter exchange needs write on it", "cfg-read",
         (queue("q-dlx-2", arguments=DLX),), refused("exchange", "dlx-x")),
    Cell("queue.declare dead-letter exchange needs read on the queue", "cfg-write",
         (queue("q-dlx-3", arguments=DLX),), refused("queue", "q-dlx-3")),
    Cell("queue.declare dead-letter default exchange", "cfg-read",
         (queue("q-dlx-4", arguments={"x-dead-letter-exchange": ""}),),
         refused("exchange", "amq.default")),
    Cell("queue.declare dead-letter exchange before arguments", "cfg-read",
         (queue("q-dlx-5", arguments={**DLX, **BAD_TTL}),), refused("exchange", "dlx-x")),
    Cell("queue.declare existing with dead-letter exchange: no check", "cfg",
         (queue("q-fixture-dlx", arguments=DLX),)),
    Cell("queue.declare amq.rabbitmq.reply-to needs no permission", "none",
         (queue("amq.rabbitmq.reply-to"),)),
    Cell("queue.declare unknown reply-to address", "none",
         (queue("amq.rabbitmq.reply-to.nobody"),),
         missing("queue", "amq.rabbitmq.reply-to.nobody")),
    # queue.delete: configure, before whether it exists or is exclusive.
    Cell("queue.delete allowed", "all",
         (queue("q-del-1"), C.Queue.Delete(queue="q-del-1"))),
    Cell("queue.delete no configure", "none", (C.Queue.Delete(queue="q-fixture"),),
         refused("queue", "q-fixture")),
    Cell("queue.delete missing no configure", "none", (C.Queue.Delete(queue="no-q"),),
         refused("queue", "no-q")),
    Cell("queue.delete missing allowed", "all", (C.Queue.Delete(queue="no-q"),)),
    Cell("queue.delete read is not enough", "cfg-read",
         (queue("q-del-2"), C.Queue.Delete(queue="q-del-2"))),
    Cell("queue.delete other connection's exclusive", "all",
         (C.Queue.Delete(queue="excl-q"),), LOCKED),
    Cell("queue.delete other connection's exclusive no configure", "none",
         (C.Queue.Delete(queue="excl-q"),), refused("queue", "excl-q")),
    Cell("queue.delete last declared queue", "part",
         (queue("cfg-q-del"), C.Queue.Delete(queue=""))),
    # queue.purge, basic.get, basic.consume: read on the queue, before it is looked up.
    Cell("queue.purge allowed", "part", (C.Queue.Purge(queue="r-q"),)),
    Cell("queue.purge no read", "cfg", (C.Queue.Purge(queue="q-fixture"),),
         refused("queue", "q-fixture")),
    Cell("queue.purge missing no read", "none", (C.Queue.Purge(queue="no-q"),),
         refused("queue", "no-q")),
    Cell("queue.purge other connection's exclusive", "all",
         (C.Queue.Purge(queue="excl-q"),), LOCKED),
    Cell("basic.get allowed", "part", (C.Basic.Get(queue="r-q"),)),
    Cell("basic.get no read", "part", (C.Basic.Get(queue="w-q"),),
         refused("queue", "w-q")),
    Cell("basic.get missing no read", "none", (C.Basic.Get(queue="no-q"),),
         refused("queue", "no-q")),
    Cell("basic.get missing allowed", "all", (C.Basic.Get(queue="no-q"),),
         missing("queue", "no-q")),
    Cell("basic.get other connection's exclusive", "all", (C.Basic.Get(queue="excl-q"),),
         LOCKED),
    Cell("basic.get other connection's exclusive no read", "none",
         (C.Basic.Get(queue="excl-q"),), refused("queue", "excl-q")),
    Cell("basic.get last declared queue no read", "cfg",
         (queue("q-get-1"), C.Basic.Get(queue="")), refused("queue", "q-get-1")),
    Cell("basic.consume allowed", "part", (C.Basic.Consume(queue="r-q"),)),
    Cell("basic.consume unanchored regex", "mid", (C.Basic.Consume(queue="q-mid"),)),
    Cell("basic.consume no read", "none", (C.Basic.Consume(queue="q-fixture"),),
         refused("queue", "q-fixture")),
    Cell("basic.consume missing no read", "none", (C.Basic.Consume(queue="no-q"),),
         refused("queue", "no-q")),
    Cell("basic.consume missing allowed", "all", (C.Basic.Consume(queue="no-q"),),
         missing("queue", "no-q")),
    Cell("basic.consume other connection's exclusive", "all",
         (C.Basic.Consume(queue="excl-q"),), LOCKED),
    Cell("basic.consume amq.rabbitmq.reply-to needs no permission", "none",
         (C.Basic.Consume(queue="amq.rabbitmq.reply-to", no_ack=True),)),
    Cell("basic.consume last declared queue no read", "cfg",
         (queue("q-consume-1"), C.Basic.Consume(queue="")),
         refused("queue", "q-consume-1")),
    # queue.bind/unbind: write on the queue, then the default exchange, then read on
    # the exchange, then whether both exist.
    Cell("queue.bind allowed", "part", (bind("w-q", "r-x"),)),
    Cell("queue.bind no write on the queue", "part", (bind("r-q", "r-x"),),
         refused("queue", "r-q")),
    Cell("queue.bind no read on the exchange", "part", (bind("w-q", "w-x"),),
         refused("exchange", "w-x")),
    Cell("queue.bind unanchored regex", "mid", (bind("q-mid", "x-mid"),)),
    Cell("queue.bind default exchange after write", "none", (bind("q-fixture", ""),),
         refused("queue", "q-fixture")),
    Cell("queue.bind default exchange", "all", (bind("q-fixture", ""),),
         DEFAULT_EXCHANGE),
    Cell("queue.bind missing ends no write", "none", (bind("no-q", "no-x"),),
         refused("queue", "no-q")),
    Cell("queue.bind missing queue", "all", (bind("no-q", "amq.direct"),),
         missing("queue", "no-q")),
    Cell("queue.bind missing exchange", "all", (bind("q-fixture", "no-x"),),
         missing("exchange", "no-x")),
    Cell("queue.bind other connection's exclusive", "all",
         (bind("excl-q", "amq.direct"),), LOCKED),
    Cell("queue.unbind allowed", "part", (unbind("w-q", "r-x"),)),
    Cell("queue.unbind no write on the queue", "part", (unbind("r-q", "r-x"),),
         refused("queue", "r-q")),
    Cell("queue.unbind no read on the exchange", "part", (unbind("w-q", "w-x"),),
         refused("exchange", "w-x")),
    Cell("queue.unbind default exchange", "all", (unbind("q-fixture", ""),),
         DEFAULT_EXCHANGE),
    # exchange.bind/unbind: write on the destination, read on the source.
    Cell("exchange.bind allowed", "part", (xbind("w-x", "r-x"),)),
    Cell("exchange.bind no write on the destination", "part", (xbind("r-x", "r-x"),),
         refused("exchange", "r-x")),
    Cell("exchange.bind no read on the source", "part", (xbind("w-x", "w-x"),),
         refused("exchange", "w-x")),
    Cell("exchange.bind default destination no write", "none", (xbind("", "amq.direct"),),
         refused("exchange", "amq.default")),
    Cell("exchange.bind default destination", "all", (xbind("", "amq.direct"),),
         DEFAULT_EXCHANGE),
    Cell("exchange.bind default source", "all", (xbind("r-x", ""),), DEFAULT_EXCHANGE),
    Cell("exchange.bind missing source no read", "part", (xbind("w-x", "no-x"),),
         refused("exchange", "no-x")),
    Cell("exchange.unbind allowed", "part", (xunbind("w-x", "r-x"),)),
    Cell("exchange.unbind no write on the destination", "part", (xunbind("r-x", "r-x"),),
         refused("exchange", "r-x")),
    Cell("exchange.unbind no read on the source", "part", (xunbind("w-x", "w-x"),),
         refused("exchange", "w-x")),
    # basic.publish: write on the exchange (the default one is amq.default), before
    # whether it exists or is internal.
    Cell("basic.publish allowed", "part", (Publish("w-x"),)),
    Cell("basic.publish no write", "part", (Publish("r-x"),), refused("exchange", "r-x")),
    Cell("basic.publish unanchored regex", "mid", (Publish("x-mid"),)),
    Cell("basic.publish default exchange no write", "none", (Publish("", "q-fixture"),),
         refused("exchange", "amq.default")),
    Cell("basic.publish default exchange as amq.default", "default-only",
         (Publish("", "q-fixture"),)),
    Cell("basic.publish amq.default is not the default exchange's name", "all",
         (Publish("amq.default"),), missing("exchange", "amq.default")),
    Cell("basic.publish write on amq.default only", "default-only",
         (Publish("amq.direct"),), refused("exchange", "amq.direct")),
    Cell("basic.publish missing exchange no write", "none", (Publish("no-x"),),
         refused("exchange", "no-x")),
    Cell("basic.publish missing exchange", "all", (Publish("no-x"),),
         missing("exchange", "no-x")),
    Cell("basic.publish internal exchange no write", "none", (Publish("x-internal"),),
         refused("exchange", "x-internal")),
    Cell("basic.publish internal exchange", "all", (Publish("x-internal"),),
         (403, "ACCESS_REFUSED - cannot publish to internal exchange 'x-internal' in "
               "vhost '<vhost>'")),
    # Another vhost, other permissions.
    Cell("vhost B: no write there", "all", (Publish("amq.direct"),),
         refused("exchange", "amq.direct"), vhost="b"),
    Cell("vhost B: passive declare needs none", "all",
         (declare("amq.direct", passive=True),), vhost="b"),
    Cell("vhost B: no permissions at all", "part", (), vhost="b", outcome=(
        530, "NOT_ALLOWED - access to vhost '<vhost>' refused for user '<user>'")),
    # Topic permissions: write on the routing key of a publish, read on the binding
    # key of a bind/unbind, to or from a topic exchange the user has one for.
    Cell("topic publish allowed", "topic.u", (Publish("amq.topic", "<user>.<vhost>.k"),)),
    Cell("topic publish: names expanded unescaped", "topic.u",
         (Publish("amq.topic", "<user:X>.<vhost>.k"),)),
    Cell("topic publish refused", "topic.u", (Publish("amq.topic", "other.k"),),
         topic_refused("other.k", "amq.topic")),
    Cell("topic publish other exchange allowed", "topic.u", (Publish("t-x", "a.b"),)),
    Cell("topic publish other exchange refused", "topic.u", (Publish("t-x", "b.a"),),
         topic_refused("b.a", "t-x")),
    Cell("topic publish: no topic permission on that exchange", "topic.u",
         (Publish("t-free", "anything"),)),
    Cell("topic publish: direct exchange not checked", "topic.u",
         (Publish("d-x", "anything"),)),
    Cell("topic publish: user without topic permissions", "all",
         (Publish("amq.topic", "anything"),)),
    Cell("topic publish: {client_id} not expanded", "topic.u",
         (Publish("t-cid", "{client_id}"),), client_properties={"client_id": CLIENT_ID}),
    Cell("topic publish: client_id property is not the client_id", "topic.u",
         (Publish("t-cid", CLIENT_ID),), topic_refused(CLIENT_ID, "t-cid"),
         client_properties={"client_id": CLIENT_ID}),
    Cell("topic publish: missing exchange", "topic.u", (Publish("no-x", "x"),),
         missing("exchange", "no-x")),
    Cell("topic queue.bind allowed", "topic.u",
         (bind("q-topic", "amq.topic", "<user>.x"),)),
    Cell("topic queue.bind refused", "topic.u", (bind("q-topic", "amq.topic", "x"),),
         topic_refused("x", "amq.topic")),
    Cell("topic queue.bind empty pattern allows the empty key", "topic.u",
         (bind("q-topic", "t-x", ""),)),
    Cell("topic queue.bind empty pattern refuses others", "topic.u",
         (bind("q-topic", "t-x", "a"),), topic_refused("a", "t-x")),
    Cell("topic queue.bind last declared queue as the key", "topic.u",
         (queue("q-topic-2"), bind("", "t-x", "")), topic_refused("q-topic-2", "t-x")),
    Cell("topic queue.bind missing exchange", "topic.u", (bind("q-topic", "no-x", "x"),),
         missing("exchange", "no-x")),
    Cell("topic queue.unbind refused", "topic.u", (unbind("q-topic", "amq.topic", "x"),),
         topic_refused("x", "amq.topic")),
    Cell("topic exchange.bind allowed", "topic.u",
         (xbind("t-dest", "amq.topic", "<user>.y"),)),
    Cell("topic exchange.bind refused", "topic.u", (xbind("t-dest", "amq.topic", "y"),),
         topic_refused("y", "amq.topic")),
    Cell("topic exchange.bind topic destination not checked", "topic.u",
         (xbind("amq.topic", "d-x", "y"),)),
    Cell("topic exchange.unbind refused", "topic.u",
         (xunbind("t-dest", "amq.topic", "y"),), topic_refused("y", "amq.topic")),
]


def fill(text: str, context: dict) -> str:
    for token, value in context.items():
        text = text.replace(token, value)
    return text


@dataclass
class Matrix:
    """The brokers' users, vhosts and fixtures of one module run."""

    broker: object
    users: dict
    vhosts: dict
    connections: dict = field(default_factory=dict)
    channels: dict = field(default_factory=dict)

    def context(self, cell: Cell) -> dict:
        user = self.users[cell.user]
        return {"<user:X>": user.replace(".", "X"), "<user>": user,
                "<vhost>": self.vhosts[cell.vhost]}

    def connect(self, cell: Cell) -> RawAmqpClient:
        return connect(self.broker.host, self.broker.port, user=self.users[cell.user],
                       password=PASSWORD, vhost=self.vhosts[cell.vhost],
                       client_properties=cell.client_properties)

    def client(self, cell: Cell) -> tuple[RawAmqpClient, int]:
        """The cell user's connection to the cell's vhost, and a fresh channel on it."""
        key = (cell.user, cell.vhost, tuple(sorted(cell.client_properties.items())))
        if key not in self.connections:
            self.connections[key] = self.connect(cell)
        number = self.channels[key] = self.channels.get(key, 0) + 1
        self.connections[key].open_channel(number)
        return self.connections[key], number

    def close(self) -> None:
        for client in self.connections.values():
            client.close()


REPLIES = {
    C.Exchange.Declare: C.Exchange.DeclareOk, C.Exchange.Delete: C.Exchange.DeleteOk,
    C.Exchange.Bind: C.Exchange.BindOk, C.Exchange.Unbind: C.Exchange.UnbindOk,
    C.Queue.Declare: C.Queue.DeclareOk, C.Queue.Delete: C.Queue.DeleteOk,
    C.Queue.Bind: C.Queue.BindOk, C.Queue.Unbind: C.Queue.UnbindOk,
    C.Queue.Purge: C.Queue.PurgeOk, C.Basic.Consume: C.Basic.ConsumeOk,
    C.Basic.Get: (C.Basic.GetOk, C.Basic.GetEmpty), Publish: C.Basic.QosOk,
}
# Frames a step may bring besides its reply (deliveries to a cell's consumer...).
PASSING = (header.ContentHeader, body.ContentBody, C.Basic.Deliver, C.Basic.Return)


def run_step(client: RawAmqpClient, channel: int, step, context: dict):
    """Send one step; returns its reply, or the Channel.Close that refused it."""
    if isinstance(step, Publish):
        client.publish(channel, fill(step.routing_key, context), b"x",
                       exchange=step.exchange)
        client.send_method(channel, C.Basic.Qos(prefetch_count=0))
    else:
        if hasattr(step, "routing_key"):
            step = copy.copy(step)
            step.routing_key = fill(step.routing_key, context)
        client.send_method(channel, step)
    while True:
        received = client.read_frame_skip_heartbeats()
        if received.channel != channel or isinstance(received.value, PASSING):
            continue
        reply = received.value
        if isinstance(reply, (C.Channel.Close, REPLIES[type(step)])):
            return reply
        raise AssertionError(f"unexpected reply to {step!r}: {reply!r}")


def outcome_of(matrix: Matrix, cell: Cell):
    """(reply code, text, class id, method id) of the close that refused the cell's
    last step, or None when every step was answered."""
    context = matrix.context(cell)
    if not cell.steps:
        return connection_refusal(matrix, cell)
    client, channel = matrix.client(cell)
    for step in cell.steps:
        reply = run_step(client, channel, step, context)
        if isinstance(reply, C.Channel.Close):
            client.send_method(channel, C.Channel.CloseOk())
            return (reply.reply_code, reply.reply_text, reply.class_id, reply.method_id)
    client.send_method(channel, C.Channel.Close(reply_code=200, reply_text="done",
                                                class_id=0, method_id=0))
    client.expect(C.Channel.CloseOk, channel=channel)
    return None


def connection_refusal(matrix: Matrix, cell: Cell):
    """Connection.Open as the cell's user: the Connection.Close it gets, or None."""
    client = RawAmqpClient(matrix.broker.host, matrix.broker.port)
    with client:
        client.start_handshake()
        client.send_start_ok(matrix.users[cell.user], PASSWORD)
        client.tune = client.expect(C.Connection.Tune, channel=0)
        client.send_tune_ok(heartbeat=0)
        client.send_method(0, C.Connection.Open(virtual_host=matrix.vhosts[cell.vhost]))
        try:
            reply = client.read_frame_skip_heartbeats().value
        except PeerClosed:
            raise AssertionError("Connection.Open: socket closed without a "
                                 "Connection.Close") from None
        if isinstance(reply, C.Connection.Close):
            return (reply.reply_code, reply.reply_text, reply.class_id, reply.method_id)
        return None


def expected_ids(cell: Cell) -> tuple[int, int]:
    if not cell.steps:
        return (10, 40)   # Connection.Open
    last = cell.steps[-1]
    if isinstance(last, Publish):
        return (60, 40)
    return (last.index >> 16, last.index & 0xFFFF)


@pytest.fixture(scope="module")
def matrix(warren_broker, broker_admin):
    """Two vhosts, one user per permission set, the fixtures: made once per module (on
    RabbitMQ each rabbitmqctl call takes about half a second), removed at the end."""
    admin = broker_admin
    prefix = f"pm{uuid.uuid4().hex[:10]}"
    vhosts = {"a": f"{prefix}-a", "b": f"{prefix}-b"}
    users = {role: f"{prefix}-{role}" for role in PERMISSIONS}
    made_vhosts, made_users = [], []
    try:
        for vhost in vhosts.values():
            admin.add_vhost(vhost)
            made_vhosts.append(vhost)
        for role, patterns in PERMISSIONS.items():
            admin.add_user(users[role], PASSWORD)
            made_users.append(users[role])
            admin.set_permissions(users[role], vhosts["a"], *patterns)
        for role, patterns in PERMISSIONS_B.items():
            admin.set_permissions(users[role], vhosts["b"], *patterns)
        owner = connect(warren_broker.host, warren_broker.port, user=users["all"],
                        password=PASSWORD, vhost=vhosts["a"])
        state = Matrix(warren_broker, users, vhosts)
        try:
            create_fixtures(owner)
            # after the exchanges they name: RabbitMQ 4.3 refuses one for a missing exchange
            for role, exchange, write, read in TOPIC_PERMISSIONS:
                admin.set_topic_permissions(users[role], vhosts["a"], exchange, write, read)
            yield state
        finally:
            state.close()
            owner.close()
    finally:
        for vhost in made_vhosts:
            admin.delete_vhost(vhost)
        for user in made_users:
            admin.delete_user(user)


def create_fixtures(owner: RawAmqpClient) -> None:
    """What the cells use, declared by a user with every permission; the exclusive
    queue excl-q lives as long as this connection."""
    owner.open_channel(1)
    methods = [queue(name) for name in QUEUES]
    methods += [declare(name, kind) for name, kind in EXCHANGES]
    methods += [declare("x-internal", internal=True), declare("x-fixture-ae", arguments=AE),
                queue("q-fixture-dlx", arguments=DLX), queue("excl-q", exclusive=True)]
    for method in methods:
        owner.send_method(1, method)
        owner.expect(REPLIES[type(method)], channel=1)


@pytest.mark.parametrize("cell", CELLS, ids=str)
def test_cell(matrix, cell):
    context = matrix.context(cell)
    outcome = outcome_of(matrix, cell)
    if cell.outcome is None:
        assert outcome is None, f"refused: {outcome}"
        return
    assert outcome is not None, "allowed, expected a refusal"
    code, text, class_id, method_id = outcome
    expected_code, expected_text = cell.outcome
    pattern = re.escape(fill(expected_text, context)).replace(
        re.escape("<gen>"), r"amq\.gen-[A-Za-z0-9_-]{22}")
    assert code == expected_code
    assert re.fullmatch(pattern, text), text
    assert (class_id, method_id) == expected_ids(cell)

