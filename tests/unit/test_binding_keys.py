"""properties_key: RabbitMQ's spelling of a binding's key in the management API."""

import pytest

from broker.server.management.binding_keys import properties_key
from broker.core.erlang_hash import Atom, phash2


def test_empty_key_without_arguments_is_a_tilde():
    assert properties_key("", {}) == "~"


def test_routing_key_is_form_encoded_as_rabbitmq_spells_it():
    # Values read from RabbitMQ 3.10's /api/queues/%2F/{q}/bindings.
    assert properties_key("a b~c/d", {}) == "a+b%7Ec%2Fd"
    assert properties_key("ü+x", {}) == "%C3%BC%2Bx"
    assert properties_key("plain.key-1_x", {}) == "plain.key-1_x"


def test_arguments_add_rabbitmqs_hash_of_them_whatever_their_order():
    # Locations RabbitMQ 3.10 gave to bindings POSTed with these arguments.
    assert properties_key("k", {"x": 1}) == "k~9nmLZQ"
    assert properties_key("k", {"x": "y", "a": True}) == "k~eyzvmQ"
    assert properties_key("k", {"a": True, "x": "y"}) == "k~eyzvmQ"
    assert properties_key("", {"x": 1}) == "~9nmLZQ"


@pytest.mark.parametrize("term, expected", [
    # erlang:phash2(Term, 1 bsl 32) computed by Erlang/OTP 25 on this machine
    ([], 0xCEC2C42E), (b"", 0x08D12E65), (1, 0x2027E3EA), (-5, 0x1EDB0000),
    ((1, 2), 0xF575284E), ([1], 0xA50B0886), (Atom("long"), 0x00073647),
    (1 << 40, 0x10D4011F), (1.5, 0x789E641B), (b"abcdefghijklmnopq", 0x5B94A2C1),
    ([(b"x", Atom("signedint"), 1)], 0xE2048DFC),
])
def test_erlang_phash2_of_the_term_kinds_arguments_become(term, expected):
    assert phash2(term) == expected


@pytest.mark.parametrize("term, expected", [
    # erlang:phash2(Term): the default range keeps 27 bits
    ([[]], 96416884), ([97, 98, 99, 100], 7922743), ([300], 99763619),
    ((Atom("a"),), 35332806),
])
def test_erlang_phash2_of_nested_lists_strings_and_atoms(term, expected):
    assert phash2(term) & ((1 << 27) - 1) == expected
