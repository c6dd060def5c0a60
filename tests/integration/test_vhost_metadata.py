"""A vhost's description, tags and default queue type over the management API: kept,
listed, replaced by a PUT, taken from definitions in both of RabbitMQ 3.10's forms,
applied to queues declared without x-queue-type, and kept across a restart. The first
tests run against either broker (WARREN_TEST_BROKER, WARREN_TEST_MANAGEMENT), as guest
(`api`): they make vhosts of their own, which a `warren` vhost's user may not."""

import pika
import pytest
from tests.support.pika_helpers import close_quietly, unique

QUEUE_TYPE_IGNORED = ("RabbitMQ 3.10's management API ignores default_queue_type in a "
                      "vhost PUT (it shows 'undefined'); Warren keeps it")


@pytest.fixture
def vhosts(api):
    """Unique vhost names, deleted after the test."""
    names = []

    def new() -> str:
        names.append(unique("vhmeta"))
        return names[-1]

    yield new
    for name in names:
        api.delete(f"/api/vhosts/{name}")


def shown(api, vhost: str) -> tuple:
    found = api.json(f"/api/vhosts/{vhost}")
    return found["description"], found["tags"], found["default_queue_type"], \
        found["metadata"]


def test_a_put_keeps_description_and_tags_and_a_second_put_replaces_them(api, vhosts):
    vhost = vhosts()
    assert api.put(f"/api/vhosts/{vhost}", {"description": "first",
                                            "tags": "a,b"}).status_code == 201
    assert shown(api, vhost) == ("first", ["a", "b"], "undefined",
                                 {"description": "first", "tags": ["a", "b"]})
    listed = [item for item in api.json("/api/vhosts") if item["name"] == vhost]
    assert [(item["description"], item["tags"]) for item in listed] == [("first",
                                                                          ["a", "b"])]
    assert api.put(f"/api/vhosts/{vhost}", {"description": "second"}).status_code == 204
    assert shown(api, vhost)[:2] == ("second", [])   # tags not given: none, as RabbitMQ
    assert api.put(f"/api/vhosts/{vhost}", {"tags": ["x", "y"]}).status_code == 204
    assert shown(api, vhost)[:2] == ("", ["x", "y"])


def test_definitions_give_vhost_metadata_in_both_forms(api, vhosts):
    nested, flat = vhosts(), vhosts()
    assert api.post("/api/definitions", {"vhosts": [
        {"name": nested, "metadata": {"description": "nested", "tags": ["t1"],
                                      "default_queue_type": "quorum"}},
        {"name": flat, "description": "flat", "tags": "u,v"},
    ]}).status_code == 204
    assert shown(api, nested) == ("nested", ["t1"], "quorum", {
        "description": "nested", "tags": ["t1"], "default_queue_type": "quorum"})
    assert shown(api, flat) == ("flat", ["u", "v"], "undefined",
                                {"description": "flat", "tags": ["u", "v"]})


def test_queues_declared_durable_without_a_type_get_the_vhost_default(warren_broker, api,
                                                                      vhosts):
    vhost = vhosts()
    assert api.post("/api/definitions", {"vhosts": [
        {"name": vhost, "metadata": {"default_queue_type": "quorum"}}]}).status_code == 204
    assert api.put(f"/api/permissions/{vhost}/guest",
                   {"configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
    # a PUT that leaves out default_queue_type keeps it, as RabbitMQ does
    assert api.put(f"/api/vhosts/{vhost}", {"description": "d"}).status_code == 204
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        warren_broker.host, warren_broker.port, vhost,
        pika.PlainCredentials("guest", "guest"), connection_attempts=1))
    try:
        channel = connection.channel()
        channel.queue_declare("plain", durable=True)
        channel.queue_declare("plain", durable=True)   # equivalent to itself
        channel.queue_declare("asked-classic", durable=True,
                              arguments={"x-queue-type": "classic"})
        channel.queue_declare("transient", durable=False)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refusal:
            channel.queue_declare("plain", durable=True,
                                  arguments={"x-queue-type": "classic"})
        assert refusal.value.reply_code == 406
    finally:
        close_quietly(connection)
    assert api.put(f"/api/queues/{vhost}/over-http", {"durable": True}).status_code == 201
    queues = {queue["name"]: (queue["type"], queue["arguments"])
              for queue in api.json(f"/api/queues/{vhost}")}
    assert queues == {"plain": ("quorum", {"x-queue-type": "quorum"}),
                      "over-http": ("quorum", {"x-queue-type": "quorum"}),
                      "asked-classic": ("classic", {"x-queue-type": "classic"}),
                      "transient": ("classic", {})}


@pytest.mark.warren_only(QUEUE_TYPE_IGNORED)
def test_a_put_sets_the_default_queue_type_and_refuses_one_warren_lacks(api, vhosts):
    vhost, refused = vhosts(), vhosts()
    assert api.put(f"/api/vhosts/{vhost}", {"default_queue_type": "stream"}).status_code \
        == 201
    assert shown(api, vhost)[2:] == ("stream", {"description": "", "tags": [],
                                                "default_queue_type": "stream"})
    answer = api.put(f"/api/vhosts/{refused}", {"default_queue_type": "bogus"})
    assert answer.status_code == 400
    assert answer.json()["error"] == "bad_request"
    assert "invalid_queue_type" in answer.json()["reason"]
    assert api.get(f"/api/vhosts/{refused}").status_code == 404
    # what GET shows goes back unchanged: "undefined" is no default type
    assert api.put(f"/api/vhosts/{vhost}", {"default_queue_type": "undefined"}).status_code \
        == 204
    assert shown(api, vhost)[2] == "undefined"


@pytest.mark.warren_only("RabbitMQ 3.10 answers 204 and creates nothing")
def test_definitions_with_a_default_queue_type_warren_lacks_are_refused(api, vhosts):
    vhost = vhosts()
    answer = api.post("/api/definitions", {"vhosts": [
        {"name": vhost, "metadata": {"default_queue_type": "bogus"}}]})
    assert answer.status_code == 400
    assert "invalid_queue_type" in answer.json()["reason"]
    assert api.get(f"/api/vhosts/{vhost}").status_code == 404


@pytest.mark.warren_only("RabbitMQ 3.10's export lists vhosts by name only")
def test_exported_vhost_metadata_imports_back(api, vhosts):
    vhost = vhosts()
    api.put(f"/api/vhosts/{vhost}", {"description": "exported", "tags": "e1,e2",
                                     "default_queue_type": "quorum"})
    exported = [item for item in api.json("/api/definitions")["vhosts"]
                if item["name"] == vhost]
    assert [item["metadata"] for item in exported] == [
        {"description": "exported", "tags": ["e1", "e2"], "default_queue_type": "quorum"}]
    assert api.delete(f"/api/vhosts/{vhost}").status_code == 204
    assert api.post("/api/definitions", {"vhosts": exported}).status_code == 204
    assert shown(api, vhost)[:3] == ("exported", ["e1", "e2"], "quorum")


@pytest.mark.warren_only("restarts a Warren broker of its own on the same data directory")
def test_vhost_metadata_survives_a_restart(broker_factory, tmp_path):
    data_dir = str(tmp_path / "data")
    first = broker_factory(data_dir=data_dir)
    api = first.address().management()
    assert api.put("/api/vhosts/kept", {"description": "before", "tags": "a",
                                        "default_queue_type": "quorum"}).status_code == 201
    assert api.put("/api/vhosts/kept", {"description": "after",
                                        "tags": "b,c"}).status_code == 204
    assert first.stop() == 0
    api = broker_factory(data_dir=data_dir).address().management()
    assert shown(api, "kept") == ("after", ["b", "c"], "quorum", {
        "description": "after", "tags": ["b", "c"], "default_queue_type": "quorum"})
