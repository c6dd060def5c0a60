"""The management API's writes: exchanges, queues, bindings, purges, publish and get,
health checks. Runs against Warren and, with WARREN_TEST_BROKER and
WARREN_TEST_MANAGEMENT, against RabbitMQ's management plugin: effects are checked with
pika, refusals by their status code and body.

The tests work as guest, an administrator, on the session broker (`warren_broker`,
`api`, `broker_admin`), not in a `warren` vhost: what they check is the API's
broker-wide view (users, vhosts, `/`), which a `warren` user, tagged `management`, does
not have."""

import uuid
from urllib.parse import quote

import pika
import pytest

from tests.support.pika_helpers import _test_deadline, connect, close_quietly  # noqa: F401  (fixture)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def guest_channel(warren_broker):
    """A pika channel in confirm mode: a publish has reached its queues on return."""
    connection = connect(warren_broker)
    opened = connection.channel()
    opened.confirm_delivery()
    yield opened
    close_quietly(connection)


@pytest.fixture
def queue(api):
    """A non-durable queue made over HTTP, deleted afterwards."""
    name = unique("mw-q")
    assert api.put(f"/api/queues/%2F/{name}", {"durable": False}).status_code == 201
    yield name
    api.delete(f"/api/queues/%2F/{name}")


@pytest.fixture
def exchange(api):
    name = unique("mw-x")
    assert api.put(f"/api/exchanges/%2F/{name}",
                   {"type": "direct", "durable": False}).status_code == 201
    yield name
    api.delete(f"/api/exchanges/%2F/{name}")


@pytest.fixture
def limited_user(broker_admin, api):
    """A management user allowed to configure, write and read only `lim-*` names."""
    name = unique("mw-user")
    admin = broker_admin
    admin.add_user(name, "pw", tags=["management"])
    admin.set_permissions(name, "/", "^lim-", "^lim-", "^lim-")
    yield api.as_user(name, "pw")
    admin.delete_user(name)


def _ready(guest_channel, queue: str) -> int:
    return guest_channel.queue_declare(queue, passive=True).method.message_count


def _publish(guest_channel, queue: str, count: int) -> None:
    for number in range(count):
        guest_channel.basic_publish("", queue, f"m{number}".encode())


# -- queues -----------------------------------------------------------------------

def test_a_queue_put_over_http_takes_a_pika_publish(api, guest_channel, queue):
    guest_channel.basic_publish("", queue, b"hello")
    assert _ready(guest_channel, queue) == 1


def test_an_empty_body_declares_a_transient_queue_and_exchange(api, guest_channel):
    queue, exchange = unique("mw-q"), unique("mw-x")
    assert api.put(f"/api/queues/%2F/{queue}", {}).status_code == 201
    assert api.put(f"/api/exchanges/%2F/{exchange}", {}).status_code == 201
    try:   # equivalent only to a transient, direct declaration
        guest_channel.queue_declare(queue, durable=False)
        guest_channel.exchange_declare(exchange, "direct", durable=False)
    finally:
        api.delete(f"/api/queues/%2F/{queue}")
        api.delete(f"/api/exchanges/%2F/{exchange}")


def test_a_second_equivalent_put_answers_no_content(api, queue):
    assert api.put(f"/api/queues/%2F/{queue}", {"durable": False}).status_code == 204


def test_an_inequivalent_queue_put_is_refused_with_rabbitmqs_reason(api, queue):
    response = api.put(f"/api/queues/%2F/{queue}", {"durable": True})
    assert response.status_code == 400
    assert response.json() == {
        "error": "bad_request",
        "reason": f"inequivalent arg 'durable' for queue '{queue}' in vhost '/': "
                  "received 'true' but current is 'false'"}


def test_a_queue_argument_the_broker_refuses_is_a_bad_request(api, guest_channel):
    name = unique("mw-q")
    response = api.put(f"/api/queues/%2F/{name}",
                       {"arguments": {"x-max-length": "abc"}})
    assert response.status_code == 400
    assert response.json()["error"] == "bad_request"
    assert "x-max-length" in response.json()["reason"]
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
        guest_channel.queue_declare(name, passive=True)
    assert missing.value.reply_code == 404


def test_a_queue_type_argument_makes_that_kind_of_queue(api, guest_channel):
    name = unique("mw-qq")
    response = api.put(f"/api/queues/%2F/{name}",
                       {"durable": True, "arguments": {"x-queue-type": "quorum"}})
    try:
        assert response.status_code == 201
        # redeclaring as a classic queue is inequivalent: it is a quorum queue
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            guest_channel.queue_declare(name, durable=True,
                                  arguments={"x-queue-type": "classic"})
        assert refused.value.reply_code == 406
    finally:
        api.delete(f"/api/queues/%2F/{name}")


@pytest.mark.parametrize("body, reason", [
    ({"durable": "yes"}, ["not_boolean", "yes"]),
    ({"auto_delete": 1}, ["not_boolean", 1]),
    ({"durable": "TRUE"}, ["not_boolean", "TRUE"]),
])
def test_a_field_of_the_wrong_type_is_refused_as_rabbitmq_refuses_it(api, body, reason):
    response = api.put(f"/api/queues/%2F/{unique('mw-q')}", body)
    assert response.status_code == 400
    assert response.json() == {"error": "bad_request", "reason": reason}


def test_booleans_may_be_sent_as_the_strings_true_and_false(api):
    """rabbitmqadmin sends durable=false as the string "false": RabbitMQ takes it."""
    name = unique("mw-q")
    try:
        assert api.put(f"/api/queues/%2F/{name}",
                       {"durable": "false", "auto_delete": "true"}).status_code == 201
        shown = api.json(f"/api/queues/%2F/{name}")
        assert (shown["durable"], shown["auto_delete"]) == (False, True)
    finally:
        api.delete(f"/api/queues/%2F/{name}")
    exchange = unique("mw-x")
    try:
        assert api.put(f"/api/exchanges/%2F/{exchange}", {
            "type": "direct", "durable": "true", "internal": "false"}).status_code == 201
        shown = api.json(f"/api/exchanges/%2F/{exchange}")
        assert (shown["durable"], shown["internal"]) == (True, False)
    finally:
        api.delete(f"/api/exchanges/%2F/{exchange}")


def test_a_body_that_is_not_json_is_a_bad_request(api):
    response = api.http.put(f"/api/queues/%2F/{unique('mw-q')}", content=b"not json",
                            headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"] == "bad_request"


@pytest.mark.warren_only("RabbitMQ 3.10 answers 500 with an empty body")
def test_a_body_over_the_limit_is_refused_before_it_is_read(api):
    response = api.http.put(f"/api/queues/%2F/{unique('mw-q')}",
                            content=b" " * 21_000_000,
                            headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_a_queue_in_a_missing_vhost_is_not_found(api):
    response = api.put(f"/api/queues/{unique('mw-vh')}/q", {})
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "reason": "vhost_not_found"}


def test_deleting_a_missing_queue_is_not_found(api):
    response = api.delete(f"/api/queues/%2F/{unique('mw-q')}")
    assert response.status_code == 404
    assert response.json() == {"error": "Object Not Found", "reason": "Not Found"}


def test_a_queue_name_outside_the_users_permissions_is_refused(limited_user):
    response = limited_user.put(f"/api/queues/%2F/{unique('mw-q')}", {})
    assert response.status_code == 401
    assert response.json() == {"error": "not_authorised", "reason": "Access refused."}


def test_a_user_puts_a_queue_its_permissions_allow(limited_user, api):
    name = unique("lim-q")
    try:
        assert limited_user.put(f"/api/queues/%2F/{name}", {}).status_code == 201
    finally:
        api.delete(f"/api/queues/%2F/{name}")


def test_writes_to_a_queue_outside_the_users_permissions_are_refused(
        limited_user, queue):
    refused = {"error": "not_authorised", "reason": "Access refused."}
    for response in (limited_user.delete(f"/api/queues/%2F/{queue}"),
                     limited_user.delete(f"/api/queues/%2F/{queue}/contents"),
                     limited_user.post(f"/api/bindings/%2F/e/amq.direct/q/{queue}", {})):
        assert (response.status_code, response.json()) == (401, refused)


def test_a_publish_and_a_get_outside_the_users_permissions_are_refused(
        limited_user, queue):
    response = _publish_over_http(limited_user, "amq.direct", "k", "x")
    assert response.status_code == 400
    assert response.json()["reason"] == (
        f"403 ACCESS_REFUSED - access to exchange 'amq.direct' in vhost '/' refused "
        f"for user '{limited_user.user}'")
    response = _get_over_http(limited_user, queue, 1, "ack_requeue_true")
    assert response.status_code == 401
    assert response.json() == {
        "error": "not_authorised",
        "reason": f"ACCESS_REFUSED - access to queue '{queue}' in vhost '/' refused "
                  f"for user '{limited_user.user}'"}


def test_purge_empties_the_queue(api, guest_channel, queue):
    _publish(guest_channel, queue, 3)
    assert api.delete(f"/api/queues/%2F/{queue}/contents").status_code == 204
    assert _ready(guest_channel, queue) == 0


def test_delete_if_empty_refuses_a_queue_with_messages(api, guest_channel, queue):
    _publish(guest_channel, queue, 1)
    response = api.http.delete(f"/api/queues/%2F/{queue}",
                               params={"if-empty": "true"})
    assert response.status_code == 400
    assert _ready(guest_channel, queue) == 1
    assert api.delete(f"/api/queues/%2F/{queue}").status_code == 204
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
        guest_channel.queue_declare(queue, passive=True)
    assert missing.value.reply_code == 404


# -- exchanges --------------------------------------------------------------------

def test_an_exchange_put_twice_answers_created_then_no_content(api, exchange):
    assert api.put(f"/api/exchanges/%2F/{exchange}",
                   {"type": "direct", "durable": False}).status_code == 204


def test_an_inequivalent_exchange_put_is_refused_with_rabbitmqs_reason(api, exchange):
    response = api.put(f"/api/exchanges/%2F/{exchange}",
                       {"type": "fanout", "durable": False})
    assert response.status_code == 400
    assert response.json() == {
        "error": "bad_request",
        "reason": f"inequivalent arg 'type' for exchange '{exchange}' in vhost '/': "
                  "received 'fanout' but current is 'direct'"}


def test_an_unknown_exchange_type_is_a_bad_request(api):
    response = api.put(f"/api/exchanges/%2F/{unique('mw-x')}", {"type": "nope"})
    assert response.status_code == 400
    assert response.json()["error"] == "bad_request"


def test_an_amq_exchange_may_not_be_declared_or_deleted(api):
    response = api.put(f"/api/exchanges/%2F/amq.{unique('mw')}", {"type": "direct"})
    assert response.status_code == 401
    assert response.json() == {"error": "not_authorised", "reason": "Access refused."}
    assert api.delete("/api/exchanges/%2F/amq.direct").status_code == 401


def test_a_deleted_exchange_is_gone_for_pika(api, guest_channel, exchange):
    assert api.delete(f"/api/exchanges/%2F/{exchange}").status_code == 204
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
        guest_channel.exchange_declare(exchange, passive=True)
    assert missing.value.reply_code == 404


# -- bindings ---------------------------------------------------------------------

def test_a_binding_posted_over_http_routes_and_names_its_location(
        api, guest_channel, exchange, queue):
    response = api.post(f"/api/bindings/%2F/e/{exchange}/q/{queue}",
                        {"routing_key": "a b", "arguments": {}})
    assert response.status_code == 201
    assert response.headers["location"] == f"{queue}/a%2Bb"
    guest_channel.basic_publish(exchange, "a b", b"routed")
    assert _ready(guest_channel, queue) == 1


def test_a_binding_deleted_by_its_properties_key_stops_routing(
        api, guest_channel, exchange, queue):
    api.post(f"/api/bindings/%2F/e/{exchange}/q/{queue}", {"routing_key": "k"})
    api.post(f"/api/bindings/%2F/e/{exchange}/q/{queue}", {})
    assert api.delete(f"/api/bindings/%2F/e/{exchange}/q/{queue}/k").status_code == 204
    assert api.delete(f"/api/bindings/%2F/e/{exchange}/q/{queue}/~").status_code == 204
    guest_channel.basic_publish(exchange, "k", b"not routed")
    guest_channel.basic_publish(exchange, "", b"not routed")
    assert _ready(guest_channel, queue) == 0
    assert api.delete(f"/api/bindings/%2F/e/{exchange}/q/{queue}/k").status_code == 404


def test_a_binding_with_arguments_is_deleted_by_the_location_it_was_given(
        api, guest_channel, exchange, queue):
    response = api.post(f"/api/bindings/%2F/e/{exchange}/q/{queue}",
                        {"routing_key": "k", "arguments": {"x": 1}})
    key = response.headers["location"].split("/", 1)[1]
    assert key == "k~9nmLZQ"   # RabbitMQ's hash of [{<<"x">>, long, 1}]
    assert api.delete(f"/api/bindings/%2F/e/{exchange}/q/{queue}/{key}").status_code == 204
    guest_channel.basic_publish(exchange, "k", b"not routed")
    assert _ready(guest_channel, queue) == 0


def test_an_exchange_to_exchange_binding_routes(api, guest_channel, exchange, queue):
    downstream = unique("mw-x")
    api.put(f"/api/exchanges/%2F/{downstream}", {"type": "fanout", "durable": False})
    try:
        assert api.post(f"/api/bindings/%2F/e/{exchange}/e/{downstream}",
                        {"routing_key": "k"}).status_code == 201
        api.post(f"/api/bindings/%2F/e/{downstream}/q/{queue}", {})
        guest_channel.basic_publish(exchange, "k", b"through two exchanges")
        assert _ready(guest_channel, queue) == 1
    finally:
        api.delete(f"/api/exchanges/%2F/{downstream}")


def test_a_binding_to_a_missing_queue_names_it(api, exchange):
    missing = unique("mw-q")
    response = api.post(f"/api/bindings/%2F/e/{exchange}/q/{missing}", {})
    assert response.status_code == 404
    assert response.json() == {"error": "not_found",
                               "reason": f"no queue '{missing}' in vhost '/'"}


# -- publish and get --------------------------------------------------------------

def _publish_over_http(api, exchange: str, routing_key: str, payload: str,
                       properties=None, encoding: str = "string"):
    return api.post(f"/api/exchanges/%2F/{exchange}/publish", {
        "properties": properties or {}, "routing_key": routing_key, "payload": payload,
        "payload_encoding": encoding})


def _get_over_http(api, queue: str, count: int, ackmode: str, **extra):
    return api.post(f"/api/queues/%2F/{queue}/get", {
        "count": count, "ackmode": ackmode, "encoding": "auto", **extra})


def test_a_message_published_over_http_is_consumed_by_pika(api, guest_channel, queue):
    response = _publish_over_http(api, "amq.default", queue, "hello",
                                  {"content_type": "text/plain", "headers": {"a": "b"}})
    assert response.status_code == 200
    assert response.json() == {"routed": True}
    method, properties, body = guest_channel.basic_get(queue, auto_ack=True)
    assert body == b"hello"
    assert properties.content_type == "text/plain"
    assert properties.headers == {"a": b"b"} or properties.headers == {"a": "b"}


def test_a_queue_named_with_any_characters_takes_publish_and_get(api, guest_channel):
    name = f"mw ü/{uuid.uuid4().hex[:8]}"
    path = f"/api/queues/%2F/{quote(name, safe='')}"
    assert api.put(path, {"durable": False}).status_code == 201
    try:
        assert _publish_over_http(api, "amq.default", name, "x").json() == {
            "routed": True}
        got = api.post(path + "/get", {"count": 1, "ackmode": "ack_requeue_false",
                                       "encoding": "auto"}).json()
        assert [message["routing_key"] for message in got] == [name]
    finally:
        assert api.delete(path).status_code == 204


def test_an_unroutable_publish_says_so(api):
    response = _publish_over_http(api, "amq.default", unique("nowhere"), "x")
    assert response.json() == {"routed": False}


def test_a_base64_payload_is_published_as_its_bytes(api, guest_channel, queue):
    _publish_over_http(api, "amq.default", queue, "/w==", encoding="base64")
    assert guest_channel.basic_get(queue, auto_ack=True)[2] == b"\xff"


def test_a_publish_to_a_missing_exchange_is_refused_with_the_channel_error(api):
    missing = unique("mw-x")
    response = _publish_over_http(api, missing, "k", "x")
    assert response.status_code == 400
    assert response.json() == {
        "error": "bad_request",
        "reason": f"404 NOT_FOUND - no exchange '{missing}' in vhost '/'"}


def test_a_publish_with_another_users_id_is_refused(api, queue):
    response = _publish_over_http(api, "amq.default", queue, "x", {"user_id": "bob"})
    assert response.status_code == 400
    assert response.json()["reason"] == (
        "406 PRECONDITION_FAILED - user_id property set to 'bob' but authenticated "
        "user was 'guest'")


def test_a_publish_without_its_fields_is_a_bad_request(api):
    response = api.post("/api/exchanges/%2F/amq.default/publish",
                        {"routing_key": "k", "payload": "x"})
    assert response.status_code == 400
    assert response.json()["error"] == "bad_request"


def test_get_ack_requeue_true_leaves_the_messages_redelivered(api, guest_channel, queue):
    _publish(guest_channel, queue, 3)
    got = _get_over_http(api, queue, 2, "ack_requeue_true").json()
    assert [message["payload"] for message in got] == ["m0", "m1"]
    assert [message["message_count"] for message in got] == [2, 1]
    assert set(got[0]) == {"payload_bytes", "redelivered", "exchange", "routing_key",
                           "message_count", "properties", "payload",
                           "payload_encoding"}
    assert got[0]["redelivered"] is False and got[0]["payload_bytes"] == 2
    assert got[0]["payload_encoding"] == "string" and got[0]["routing_key"] == queue
    assert _ready(guest_channel, queue) == 3
    again = _get_over_http(api, queue, 1, "ack_requeue_true").json()
    assert again[0]["redelivered"] is True


def test_get_ack_requeue_false_removes_the_messages(api, guest_channel, queue):
    _publish(guest_channel, queue, 3)
    got = _get_over_http(api, queue, 5, "ack_requeue_false").json()
    assert [message["payload"] for message in got] == ["m0", "m1", "m2"]
    assert _ready(guest_channel, queue) == 0
    assert _get_over_http(api, queue, 1, "ack_requeue_false").json() == []


def test_get_reject_requeue_false_dead_letters(api, guest_channel):
    dead = unique("mw-dead")
    source = unique("mw-src")
    api.put(f"/api/queues/%2F/{dead}", {"durable": False})
    api.put(f"/api/queues/%2F/{source}", {"durable": False, "arguments": {
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}})
    try:
        _publish(guest_channel, source, 1)
        got = _get_over_http(api, source, 1, "reject_requeue_false").json()
        assert [message["payload"] for message in got] == ["m0"]
        assert _ready(guest_channel, source) == 0
        assert guest_channel.basic_get(dead, auto_ack=True)[2] == b"m0"
    finally:
        api.delete(f"/api/queues/%2F/{source}")
        api.delete(f"/api/queues/%2F/{dead}")


def test_get_truncates_and_encodes_binary_payloads(api, guest_channel, queue):
    guest_channel.basic_publish("", queue, b"\xff\xfe")
    guest_channel.basic_publish("", queue, b"hello")
    got = _get_over_http(api, queue, 2, "ack_requeue_false", truncate=1).json()
    assert (got[0]["payload"], got[0]["payload_encoding"]) == ("/w==", "base64")
    assert (got[1]["payload"], got[1]["payload_bytes"]) == ("h", 5)
    assert got[1]["properties"] == []   # RabbitMQ writes no properties as []


def test_get_takes_count_and_truncate_as_decimal_strings(api, guest_channel, queue):
    """rabbitmqadmin sends them as strings ("1"); RabbitMQ converts them."""
    for body in (b"first", b"second", b"third"):
        guest_channel.basic_publish("", queue, body)
    got = _get_over_http(api, queue, "2", "ack_requeue_false", truncate="3").json()
    assert [message["payload"] for message in got] == ["fir", "sec"]


@pytest.mark.parametrize("field, value", [
    ("count", "x"), ("count", " 1"), ("count", "1.5"), ("count", True), ("count", None),
    ("truncate", "x"), ("truncate", [1]),
])
def test_get_refuses_a_count_or_truncate_that_is_no_integer(api, queue, field, value):
    fields = {"count": 1, field: value}
    response = _get_over_http(api, queue, fields.pop("count"), "ack_requeue_true", **fields)
    assert response.status_code == 400
    assert response.json() == {"error": "bad_request", "reason": ["not_integer", value]}


def test_get_from_a_missing_queue_is_not_found(api):
    missing = unique("mw-q")
    response = _get_over_http(api, missing, 1, "ack_requeue_false")
    assert response.status_code == 404
    assert response.json() == {"error": "not_found",
                               "reason": f"NOT_FOUND - no queue '{missing}' in vhost '/'"}


def test_get_with_an_unknown_encoding_is_refused(api, queue):
    response = api.post(f"/api/queues/%2F/{queue}/get",
                        {"count": 1, "ackmode": "ack_requeue_false", "encoding": "zzz"})
    assert response.status_code == 400
    assert response.json() == {"error": "bad_request",
                               "reason": "Unsupported encoding. Please use auto or base64."}


# -- health checks ----------------------------------------------------------------

@pytest.mark.parametrize("check", ["alarms", "local-alarms", "virtual-hosts",
                                   "node-is-quorum-critical"])
def test_a_healthy_broker_passes_the_check(api, check):
    response = api.get(f"/api/health/checks/{check}")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


def test_the_amqp_port_and_protocol_have_listeners(api, warren_broker):
    assert api.json(f"/api/health/checks/port-listener/{warren_broker.port}") == {
        "status": "ok", "port": warren_broker.port}
    for protocol in ("amqp091", "amqp", "http"):
        assert api.json(f"/api/health/checks/protocol-listener/{protocol}")["status"] \
            == "ok"


def test_a_port_without_a_listener_fails_the_check(api):
    response = api.get("/api/health/checks/port-listener/1")
    assert response.status_code == 503
    body = response.json()
    assert (body["status"], body["reason"], body["missing"]) == (
        "failed", "No active listener", 1)
    assert isinstance(body["ports"], list)
    assert api.get("/api/health/checks/port-listener/abc").json() == {
        "error": "bad_request", "reason": "Invalid port"}


def test_a_protocol_without_a_listener_fails_the_check(api):
    response = api.get("/api/health/checks/protocol-listener/stomp")
    assert response.status_code == 503
    assert response.json()["missing"] == "stomp"


def test_the_aliveness_test_round_trips_a_message(api, guest_channel):
    assert api.json("/api/aliveness-test/%2F") == {"status": "ok"}
    assert _ready(guest_channel, "aliveness-test") == 0


def test_the_aliveness_test_of_a_missing_vhost_is_not_found(api):
    assert api.get(f"/api/aliveness-test/{unique('mw-vh')}").status_code == 404


@pytest.mark.warren_only("raises the memory alarm by configuration")
def test_a_raised_memory_alarm_fails_the_alarm_checks(broker_factory, tmp_path):
    config = tmp_path / "warren.toml"
    config.write_text("[alarms]\nmemory_high_watermark_absolute = 1000\n")
    process = broker_factory("--config", str(config))
    api = process.address().management()
    name = unique("mw-heavy")
    api.put(f"/api/queues/%2F/{name}", {"durable": False})
    assert api.get("/api/health/checks/alarms").status_code == 200
    _publish_over_http(api, "amq.default", name, "x" * 10_000)   # holds 10 kB > 1 kB
    process.wait_for_log("event=resource_alarm raised=memory")   # its periodic check
    response = api.get("/api/health/checks/alarms")
    assert response.status_code == 503
    body = response.json()
    assert (body["status"], body["reason"]) == (
        "failed", "There are alarms in effect in the cluster")
    assert [alarm["resource"] for alarm in body["alarms"]] == ["memory"]
    assert api.get("/api/health/checks/local-alarms").status_code == 503


# -- durability -------------------------------------------------------------------

@pytest.mark.warren_only("kills the broker with SIGKILL and restarts it")
def test_a_queue_and_a_persistent_message_made_over_http_survive_kill_9(broker_factory):
    process = broker_factory()
    api = process.address().management()
    name = unique("mw-durable")
    assert api.put(f"/api/queues/%2F/{name}", {"durable": True}).status_code == 201
    assert _publish_over_http(api, "amq.default", name, "kept",
                              {"delivery_mode": 2}).json() == {"routed": True}
    process.kill()
    process.start()
    got = _get_over_http(process.address().management(), name, 1, "ack_requeue_false").json()
    assert [message["payload"] for message in got] == ["kept"]
    assert got[0]["properties"] == {"delivery_mode": 2}


@pytest.mark.warren_only("pages a long durable queue's bodies out to disk")
def test_get_reads_messages_paged_out_to_disk(broker_factory):
    process = broker_factory()
    api = process.address().management()
    name = unique("mw-long")
    api.put(f"/api/queues/%2F/{name}", {"durable": True})
    for number in range(3):
        _publish_over_http(api, "amq.default", name, f"m{number}", {"delivery_mode": 2})
    process.kill()
    process.start()   # a restart loads no body: the gets wait for reads from disk
    got = _get_over_http(process.address().management(), name, 3, "ack_requeue_false").json()
    assert [message["payload"] for message in got] == ["m0", "m1", "m2"]


def test_a_publish_over_http_goes_to_the_alternate_exchange(api, guest_channel, queue):
    alternate, main = unique("mw-ae"), unique("mw-x")
    api.put(f"/api/exchanges/%2F/{alternate}", {"type": "fanout", "durable": False})
    api.put(f"/api/exchanges/%2F/{main}", {"type": "direct", "durable": False,
                                           "arguments": {"alternate-exchange": alternate}})
    try:
        api.post(f"/api/bindings/%2F/e/{alternate}/q/{queue}", {})
        assert _publish_over_http(api, main, "unbound", "x").json() == {"routed": True}
        assert _ready(guest_channel, queue) == 1
    finally:
        api.delete(f"/api/exchanges/%2F/{main}")
        api.delete(f"/api/exchanges/%2F/{alternate}")


def test_a_publish_over_http_meets_the_users_topic_permissions(broker_admin, api):
    name = unique("mw-topic")
    admin = broker_admin
    admin.add_user(name, "pw", tags=["management"])
    admin.set_permissions(name, "/", ".*", ".*", ".*")
    admin.set_topic_permissions(name, "/", "amq.topic", "^allowed", ".*")
    try:
        user = api.as_user(name, "pw")
        assert _publish_over_http(user, "amq.topic", "allowed.x", "x").status_code == 200
        response = _publish_over_http(user, "amq.topic", "denied.x", "x")
        assert response.status_code == 400
        assert response.json()["reason"].startswith("403 ACCESS_REFUSED")
    finally:
        admin.delete_user(name)


def test_an_expired_message_published_over_http_is_not_got(api, guest_channel, queue):
    _publish_over_http(api, "amq.default", queue, "short-lived", {"expiration": "0"})
    assert _get_over_http(api, queue, 1, "ack_requeue_false").json() == []


def test_deleting_in_a_missing_vhost_is_not_found(api):
    vhost = unique("mw-vh")
    for path in (f"/api/queues/{vhost}/q", f"/api/queues/{vhost}/q/contents",
                 f"/api/exchanges/{vhost}/x"):
        response = api.delete(path)
        assert (response.status_code, response.json()) == (
            404, {"error": "Object Not Found", "reason": "Not Found"})
