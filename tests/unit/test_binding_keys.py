"""properties_key: RabbitMQ's spelling of a binding's key in the management API."""

from broker.server.management.binding_keys import properties_key


def test_empty_key_without_arguments_is_a_tilde():
    assert properties_key("", {}) == "~"


def test_routing_key_is_form_encoded_as_rabbitmq_spells_it():
    # Values read from RabbitMQ 3.10's /api/queues/%2F/{q}/bindings.
    assert properties_key("a b~c/d", {}) == "a+b%7Ec%2Fd"
    assert properties_key("ü+x", {}) == "%C3%BC%2Bx"
    assert properties_key("plain.key-1_x", {}) == "plain.key-1_x"


def test_arguments_add_a_hash_that_ignores_key_order():
    first = properties_key("k", {"x": "y", "a": True})
    assert first.startswith("k~") and len(first) == len("k~") + 6
    assert first == properties_key("k", {"a": True, "x": "y"})
    assert first != properties_key("k", {"a": False, "x": "y"})
    assert properties_key("", {"x": 1}).startswith("~")
