"""The management API's read endpoints: RabbitMQ 3.10's fields and JSON types, counts
after AMQP work, closing a connection, list parameters, 404s, who sees what, and
message rates. Runs against Warren and, with WARREN_TEST_BROKER and
WARREN_TEST_MANAGEMENT, against RabbitMQ's management plugin: the expectations are
RabbitMQ's, checked on both.

The tests work as guest, an administrator, on the session broker (`warren_broker`,
`api`, `broker_admin`), not in a `warren` vhost: what they check is the API's
broker-wide view (users, vhosts, `/`), which a `warren` user, tagged `management`, does
not have."""

import threading
import time
import uuid

import pika
import pika.exceptions
import pytest

from tests.support.management_client import quoted

NUMBER, TEXT, FLAG, OBJECT, ARRAY, NULL = (
    "number", "string", "boolean", "object", "array", "null")


def json_type(value) -> str:
    if value is None:
        return NULL
    if isinstance(value, bool):
        return FLAG
    if isinstance(value, (int, float)):
        return NUMBER
    if isinstance(value, str):
        return TEXT
    return OBJECT if isinstance(value, dict) else ARRAY


def check_shape(item: dict, expected: dict) -> None:
    """Every expected key is there with one of its allowed JSON types."""
    wrong = {key: (json_type(item.get(key)) if key in item else "missing", allowed)
             for key, allowed in expected.items()
             if key not in item or json_type(item[key]) not in allowed.split("|")}
    assert not wrong, wrong


RATE = {"rate": NUMBER}

CONNECTION = {
    "auth_mechanism": TEXT, "channel_max": NUMBER, "channels": NUMBER,
    "client_properties": OBJECT, "connected_at": NUMBER, "frame_max": NUMBER,
    "host": TEXT, "name": TEXT, "node": TEXT, "peer_cert_issuer": NULL,
    "peer_cert_subject": NULL, "peer_cert_validity": NULL, "peer_host": TEXT,
    "peer_port": NUMBER, "port": NUMBER, "protocol": TEXT, "recv_oct": NUMBER,
    "recv_oct_details": OBJECT, "send_oct": NUMBER, "send_oct_details": OBJECT,
    "ssl": FLAG, "ssl_protocol": NULL, "state": TEXT, "timeout": NUMBER, "type": TEXT,
    "user": TEXT, "user_who_performed_action": TEXT, "vhost": TEXT,
}
CHANNEL = {
    "acks_uncommitted": NUMBER, "confirm": FLAG, "connection_details": OBJECT,
    "consumer_count": NUMBER, "global_prefetch_count": NUMBER,
    "messages_unacknowledged": NUMBER, "messages_uncommitted": NUMBER,
    "messages_unconfirmed": NUMBER, "name": TEXT, "node": TEXT, "number": NUMBER,
    "prefetch_count": NUMBER, "state": TEXT, "transactional": FLAG, "user": TEXT,
    "vhost": TEXT,
}
CONSUMER = {
    "arguments": OBJECT, "ack_required": FLAG, "active": FLAG, "activity_status": TEXT,
    "channel_details": OBJECT, "consumer_tag": TEXT, "exclusive": FLAG,
    "prefetch_count": NUMBER, "queue": OBJECT,
}
CHANNEL_DETAILS = {"connection_name": TEXT, "name": TEXT, "node": TEXT, "number": NUMBER,
                   "peer_host": TEXT, "peer_port": NUMBER, "user": TEXT}
EXCHANGE = {"arguments": OBJECT, "auto_delete": FLAG, "durable": FLAG, "internal": FLAG,
            "name": TEXT, "type": TEXT, "user_who_performed_action": TEXT, "vhost": TEXT}
QUEUE = {
    "arguments": OBJECT, "auto_delete": FLAG, "consumer_utilisation": NUMBER,
    "consumers": NUMBER, "durable": FLAG, "effective_policy_definition": OBJECT,
    "exclusive": FLAG, "exclusive_consumer_tag": NULL + "|" + TEXT,
    "head_message_timestamp": NULL + "|" + NUMBER, "memory": NUMBER,
    "message_bytes": NUMBER, "message_bytes_ready": NUMBER,
    "message_bytes_unacknowledged": NUMBER, "messages": NUMBER,
    "messages_details": OBJECT, "messages_ready": NUMBER, "messages_ready_details": OBJECT,
    "messages_unacknowledged": NUMBER, "messages_unacknowledged_details": OBJECT,
    "name": TEXT, "node": TEXT, "policy": NULL + "|" + TEXT,
    "single_active_consumer_tag": NULL + "|" + TEXT, "state": TEXT, "type": TEXT,
    "vhost": TEXT,
}
BINDING = {"source": TEXT, "vhost": TEXT, "destination": TEXT, "destination_type": TEXT,
           "routing_key": TEXT, "arguments": OBJECT, "properties_key": TEXT}
OVERVIEW = {
    "management_version": TEXT, "rates_mode": TEXT, "exchange_types": ARRAY,
    "product_version": TEXT, "product_name": TEXT, "rabbitmq_version": TEXT,
    "cluster_name": TEXT, "erlang_version": TEXT, "message_stats": OBJECT,
    "churn_rates": OBJECT, "queue_totals": OBJECT, "object_totals": OBJECT,
    "statistics_db_event_queue": NUMBER, "node": TEXT, "listeners": ARRAY,
    "contexts": ARRAY,
}
NODE = {
    "mem_used": NUMBER, "mem_limit": NUMBER, "mem_alarm": FLAG, "disk_free": NUMBER,
    "disk_free_limit": NUMBER, "disk_free_alarm": FLAG, "fd_used": NUMBER,
    "fd_total": NUMBER, "sockets_used": NUMBER, "sockets_total": NUMBER,
    "proc_used": NUMBER, "proc_total": NUMBER, "uptime": NUMBER, "running": FLAG,
    "type": TEXT, "name": TEXT, "processors": NUMBER, "partitions": ARRAY,
    "exchange_types": ARRAY, "auth_mechanisms": ARRAY, "contexts": ARRAY,
}
MESSAGE_STATS = ("publish", "confirm", "deliver", "deliver_no_ack", "get", "get_no_ack",
                 "get_empty", "ack", "redeliver", "return_unroutable", "drop_unroutable",
                 "deliver_get")


@pytest.fixture
def name():
    return f"read16-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def amqp(warren_broker):
    """Opens pika connections as guest (or another user); closes them at the end."""
    opened = []

    def connect(user="guest", password="guest") -> pika.BlockingConnection:
        connection = pika.BlockingConnection(pika.ConnectionParameters(
            warren_broker.host, warren_broker.port,
            credentials=pika.PlainCredentials(user, password)))
        opened.append(connection)
        return connection

    yield connect
    for connection in opened:
        if connection.is_open:
            connection.close()


def local_port(connection: pika.BlockingConnection) -> int:
    return connection._impl._transport._sock.getsockname()[1]


def listed_connection(api, connection: pika.BlockingConnection, user_api=None) -> dict:
    """This pika connection as /api/connections lists it, once RabbitMQ has merged
    both of its periodic stats events into the listing: the byte counters come from
    one, `state` and `channels` from the other, and they arrive independently."""
    port = local_port(connection)
    stats_keys = ("recv_oct", "state", "channels")
    answer = (user_api or api).wait_for("/api/connections", lambda items: any(
        c["peer_port"] == port and all(key in c for key in stats_keys) for c in items))
    return next(c for c in answer if c["peer_port"] == port)


def queue_path(name: str, vhost: str = "/") -> str:
    return f"/api/queues/{quoted(vhost)}/{quoted(name)}"


# -- shapes -----------------------------------------------------------------------

def do_every_counted_operation(connection: pika.BlockingConnection, queue: str) -> None:
    """One of each operation the overview's message_stats count. RabbitMQ lists a
    counter there only once the node has done that operation at least once."""
    channel = connection.channel()
    channel.queue_declare(queue, exclusive=True)
    channel.confirm_delivery()
    for body in (b"get", b"get-no-ack", b"redeliver", b"deliver", b"deliver-no-ack"):
        channel.basic_publish("", queue, body)
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("", f"{queue}-nowhere", b"returned", mandatory=True)
    channel.basic_publish("", f"{queue}-nowhere", b"dropped")
    method, _, _ = channel.basic_get(queue)
    channel.basic_ack(method.delivery_tag)
    channel.basic_get(queue, auto_ack=True)
    method, _, _ = channel.basic_get(queue)
    channel.basic_reject(method.delivery_tag, requeue=True)
    method, _, _ = channel.basic_get(queue)
    channel.basic_ack(method.delivery_tag)
    for auto_ack in (False, True):
        for method, _, _ in channel.consume(queue, auto_ack=auto_ack,
                                            inactivity_timeout=None):
            if not auto_ack:
                channel.basic_ack(method.delivery_tag)
            break
        channel.cancel()
    assert channel.basic_get(queue) == (None, None, None)


def test_overview_and_node_have_rabbitmqs_fields_and_types(api, amqp, name):
    do_every_counted_operation(amqp(), name)
    overview = api.wait_for("/api/overview", lambda answer: all(
        key in answer["message_stats"] for key in MESSAGE_STATS))
    check_shape(overview, OVERVIEW)
    for key in MESSAGE_STATS:
        assert json_type(overview["message_stats"][key]) == NUMBER
        check_shape(overview["message_stats"][key + "_details"], RATE)
    check_shape(overview["queue_totals"], {
        "messages": NUMBER, "messages_ready": NUMBER, "messages_unacknowledged": NUMBER,
        "messages_details": OBJECT})
    check_shape(overview["object_totals"], {key: NUMBER for key in (
        "channels", "connections", "consumers", "exchanges", "queues")})
    assert any(listener["protocol"] == "amqp" for listener in overview["listeners"])
    nodes = api.json("/api/nodes")
    assert [node["name"] for node in nodes] == [overview["node"]]
    check_shape(nodes[0], NODE)
    assert nodes[0]["running"] is True and nodes[0]["mem_limit"] > 0
    check_shape(api.json(f"/api/nodes/{quoted(overview['node'])}"), NODE)


def test_connection_channel_and_consumer_have_rabbitmqs_fields(api, amqp, name):
    connection = amqp()
    channel = connection.channel()
    channel.queue_declare(name, auto_delete=True)
    channel.basic_qos(prefetch_count=7)
    tag = channel.basic_consume(name, lambda *args: None)
    listed = listed_connection(api, connection)
    check_shape(listed, CONNECTION)
    assert listed["name"] == (f"127.0.0.1:{local_port(connection)} -> "
                              f"{listed['host']}:{listed['port']}")
    assert (listed["protocol"], listed["user"], listed["vhost"]) == ("AMQP 0-9-1",
                                                                      "guest", "/")
    assert listed["client_properties"]["product"] == "Pika Python Client Library"
    assert api.json(f"/api/connections/{quoted(listed['name'])}")["name"] == listed["name"]
    channels = api.wait_for(f"/api/connections/{quoted(listed['name'])}/channels",
                            lambda items: items and items[0]["consumer_count"] == 1)
    check_shape(channels[0], CHANNEL)
    assert channels[0]["name"] == f"{listed['name']} (1)"
    assert channels[0]["prefetch_count"] == 7
    assert api.json(f"/api/channels/{quoted(channels[0]['name'])}")["number"] == 1
    def listed_with_tag(consumers):
        return [consumer for consumer in consumers if consumer["consumer_tag"] == tag]

    # RabbitMQ lists a consumer once its statistics are collected
    consumers = listed_with_tag(api.wait_for("/api/consumers/%2F", listed_with_tag))
    check_shape(consumers[0], CONSUMER)
    check_shape(consumers[0]["channel_details"], CHANNEL_DETAILS)
    assert consumers[0]["queue"] == {"name": name, "vhost": "/"}
    assert consumers[0]["prefetch_count"] == 7 and consumers[0]["ack_required"] is True
    single = api.json(queue_path(name))
    assert [c["consumer_tag"] for c in single["consumer_details"]] == [tag]
    assert single["incoming"] == [] and single["deliveries"] == []


def test_exchange_and_binding_shapes_and_properties_keys(api, amqp, name):
    channel = amqp().channel()
    channel.queue_declare(name, auto_delete=True)
    channel.exchange_declare(name + "-x", "fanout", auto_delete=True)
    channel.queue_bind(name, "amq.direct", "k")
    channel.queue_bind(name, "amq.direct", "a b", arguments={"x": "y"})
    channel.queue_bind(name, "amq.direct", "")
    channel.exchange_bind(name + "-x", "amq.fanout", "")
    exchange = api.json(f"/api/exchanges/%2F/{quoted(name)}-x")
    check_shape(exchange, EXCHANGE)
    assert (exchange["type"], exchange["auto_delete"]) == ("fanout", True)
    assert any(e["name"] == "amq.direct" for e in api.json("/api/exchanges/%2F"))
    between = api.json(f"/api/bindings/%2F/e/amq.direct/q/{quoted(name)}")
    for binding in between:
        check_shape(binding, BINDING)
    keys = {binding["routing_key"]: binding["properties_key"] for binding in between}
    assert keys["k"] == "k" and keys[""] == "~"
    assert keys["a b"] == "a+b~FO7NeQ"   # RabbitMQ's hash of {"x": "y"}
    one = api.json(f"/api/bindings/%2F/e/amq.direct/q/{quoted(name)}/"
                   f"{quoted(keys['a b'])}")
    assert one["arguments"] == {"x": "y"}
    on_queue = api.json(f"{queue_path(name)}/bindings")
    assert on_queue[0] == {"source": "", "vhost": "/", "destination": name,
                           "destination_type": "queue", "routing_key": name,
                           "arguments": {}, "properties_key": name}
    assert len(on_queue) == 4
    e2e = api.json(f"/api/bindings/%2F/e/amq.fanout/e/{quoted(name)}-x")
    assert [(b["destination_type"], b["properties_key"]) for b in e2e] == [
        ("exchange", "~")]
    assert api.json(f"/api/exchanges/%2F/{quoted(name)}-x/bindings/destination") == e2e
    assert len(api.json("/api/exchanges/%2F/amq.direct/bindings/source",
                        columns="destination")) >= 3
    everything = api.json("/api/bindings/%2F")
    assert {"source": "", "destination": name} in [
        {"source": b["source"], "destination": b["destination"]} for b in everything]


# -- counts ---------------------------------------------------------------------

def test_queue_counts_follow_publishes_and_unacked_gets(api, amqp, name):
    channel = amqp().channel()
    channel.confirm_delivery()
    channel.queue_declare(name, auto_delete=False, arguments={"x-max-length": 100})
    for body in (b"one", b"two", b"three"):
        channel.basic_publish("", name, body)
    channel.basic_get(name, auto_ack=False)
    try:
        # RabbitMQ updates message counts and byte counts in separate statistics events
        queue = api.wait_for(queue_path(name), lambda q: (
            q.get("messages"), q.get("messages_unacknowledged"), q.get("message_bytes"),
            q.get("message_bytes_unacknowledged")) == (3, 1, 11, 3))
        check_shape(queue, QUEUE)
        assert (queue["messages_ready"], queue["consumers"], queue["type"],
                queue["state"]) == (2, 0, "classic", "running")
        assert queue["arguments"] == {"x-max-length": 100}
        assert queue["message_bytes"] == len(b"onetwothree")
        assert queue["message_bytes_unacknowledged"] == len(b"one")
        # RabbitMQ lists a new queue before its statistics reach the listing
        listed = [q for q in api.wait_for("/api/queues/%2F", lambda queues: any(
            q["name"] == name and q.get("messages") == 3 for q in queues))
            if q["name"] == name]
        check_shape(listed[0], QUEUE)
        overview = api.json("/api/overview")
        assert overview["queue_totals"]["messages"] >= 3
        assert overview["object_totals"]["queues"] >= 1
        api.wait_for("/api/channels", lambda items: any(
            c["messages_unacknowledged"] == 1 and c["confirm"] for c in items))
    finally:
        channel.queue_delete(name)


# -- closing a connection ---------------------------------------------------------

@pytest.mark.parametrize("reason, text", [
    (None, "CONNECTION_FORCED - Closed via management plugin"),
    ("maintenance window", "CONNECTION_FORCED - maintenance window"),
])
def test_deleting_a_connection_closes_it_with_320_and_the_reason(api, amqp, reason, text):
    connection = amqp()
    listed = listed_connection(api, connection)
    headers = {"X-Reason": reason} if reason else {}
    response = api.delete(f"/api/connections/{quoted(listed['name'])}", **headers)
    assert response.status_code == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.2)
    assert (closed.value.reply_code, closed.value.reply_text) == (320, text)


# -- list parameters ----------------------------------------------------------------

def test_pagination_sorting_and_columns_of_queues(api, amqp, name):
    channel = amqp().channel()
    names = [f"{name}-{index}" for index in range(5)]
    for queue in names:
        channel.queue_declare(queue, auto_delete=True)
    api.wait_for("/api/queues/%2F", lambda page: page["filtered_count"] == 5,
                 page=1, page_size=2, name=name)
    page = api.json("/api/queues/%2F", page=3, page_size=2, name=name, sort="name")
    assert (page["page_count"], page["item_count"], page["filtered_count"]) == (3, 1, 5)
    assert [q["name"] for q in page["items"]] == [names[4]]
    refused = api.get("/api/queues/%2F", page=4, page_size=2, name=name)
    assert refused.status_code == 400
    assert refused.json()["error"] == "page_out_of_range"
    reverse = api.json("/api/queues/%2F", page=1, page_size=5, name=name, sort="name",
                       sort_reverse="true", columns="name,messages")
    assert [q["name"] for q in reverse["items"]] == names[::-1]
    # only the columns asked for (RabbitMQ adds "messages" once its statistics have it)
    assert all("name" in q and set(q) <= {"name", "messages"} for q in reverse["items"])


# -- 404s -------------------------------------------------------------------------

@pytest.mark.parametrize("path", [
    "/api/queues/no-such-vhost-read16", "/api/queues/%2F/no-such-queue-read16",
    "/api/exchanges/%2F/no-such-exchange-read16", "/api/exchanges/no-such-vhost-read16",
    "/api/connections/no-such-connection", "/api/channels/no-such-channel",
    "/api/vhosts/no-such-vhost-read16/connections",
    "/api/consumers/no-such-vhost-read16", "/api/bindings/no-such-vhost-read16",
])
def test_missing_objects_are_404_with_rabbitmqs_body(api, path):
    response = api.get(path)
    assert response.status_code == 404
    assert response.json() == {"error": "Object Not Found", "reason": "Not Found"}


def test_bindings_of_missing_objects_are_listed_as_rabbitmq_lists_them(api):
    """RabbitMQ answers 200 here, not 404: no bindings from a missing exchange, and the
    default exchange's implicit binding of a missing queue."""
    assert api.json("/api/bindings/%2F/e/no-such-exchange-read16/q/nothing") == []
    assert [b["source"] for b in api.json(
        "/api/queues/%2F/no-such-queue-read16/bindings")] == [""]


def test_deleting_a_missing_connection_is_404(api):
    response = api.delete("/api/connections/no-such-connection")
    assert response.status_code == 404


# -- who sees what ------------------------------------------------------------------

@pytest.fixture
def users(broker_admin, name):
    """A management user with permissions on "/" only, a monitoring user, and a vhost
    that only guest (and monitoring users) see."""
    admin = broker_admin
    vhost = name + "-vhost"
    admin.add_vhost(vhost)
    admin.set_permissions("guest", vhost, ".*", ".*", ".*")
    created = {"management": name + "-m", "monitoring": name + "-o"}
    for tag, user in created.items():
        admin.add_user(user, "pw", tags=[tag])
        admin.set_permissions(user, "/", ".*", ".*", ".*")
    yield vhost, created
    for user in created.values():
        admin.delete_user(user)
    admin.delete_vhost(vhost)


def test_management_users_see_their_own_connections_and_vhosts_monitoring_all(
        api, users, amqp, name):   # amqp after users: its connections close first
    vhost, created = users
    mine = amqp(created["management"], "pw")
    guests = amqp()
    channel = guests.channel()
    channel.queue_declare(name, auto_delete=True)
    listed_connection(api, guests)
    manager = api.as_user(created["management"], "pw")
    monitor = api.as_user(created["monitoring"], "pw")
    own = listed_connection(api, mine, user_api=manager)
    assert {c["user"] for c in manager.json("/api/connections")} == {created["management"]}
    assert own["user"] == created["management"]
    users_seen = {c["user"] for c in monitor.wait_for(
        "/api/connections", lambda items: {"guest", created["management"]} <= {
            c["user"] for c in items})}
    assert {"guest", created["management"]} <= users_seen
    guest_port = local_port(guests)
    guest_name = next(c["name"] for c in api.json("/api/connections")
                      if c["peer_port"] == guest_port)
    assert manager.get(f"/api/connections/{quoted(guest_name)}").status_code != 200
    assert monitor.json(f"/api/connections/{quoted(guest_name)}")["user"] == "guest"
    seen_by_manager = {e["vhost"] for e in manager.json("/api/exchanges")}
    assert vhost not in seen_by_manager and "/" in seen_by_manager
    # as RabbitMQ: exchanges and queues of vhosts with permissions only, for every tag
    assert vhost not in {e["vhost"] for e in monitor.json("/api/exchanges")}
    assert vhost in {e["vhost"] for e in api.json("/api/exchanges")}
    assert manager.get("/api/nodes").status_code == 401
    assert monitor.get("/api/nodes").status_code == 200


# -- rates ------------------------------------------------------------------------

def test_a_running_publisher_shows_a_publish_rate(api, warren_broker, name):
    stop = threading.Event()
    declared = threading.Event()

    def publish() -> None:
        connection = pika.BlockingConnection(
            pika.ConnectionParameters(warren_broker.host, warren_broker.port))
        channel = connection.channel()
        channel.queue_declare(name, arguments={"x-max-length": 1000})
        declared.set()
        while not stop.is_set():
            channel.basic_publish("", name, b"tick")
            connection.process_data_events(time_limit=0.01)
        channel.queue_delete(name)
        connection.close()

    publisher = threading.Thread(target=publish)
    publisher.start()
    try:
        assert declared.wait(30)
        api.wait_for(queue_path(name), lambda q: q.get("message_stats", {}).get(
            "publish_details", {}).get("rate", 0) > 0)
        api.wait_for("/api/overview", lambda o: o["message_stats"].get(
            "publish_details", {}).get("rate", 0) > 0)
        api.wait_for("/api/channels", lambda items: any(
            c.get("message_stats", {}).get("publish_details", {}).get("rate", 0) > 0
            for c in items))
    finally:
        stop.set()
        publisher.join(30)
