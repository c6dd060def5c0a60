"""The one table of class, method and property-flag numbers agrees with the AMQP 0-9-1
specification as pamqp encodes it."""

from pamqp import commands

from amqp_codec import wire_ids
from amqp_codec.properties import LAYOUT
from amqp_codec.wire_ids import MethodId


def _named(kind) -> dict:
    return {name: value for name, value in vars(wire_ids).items()
            if name.isupper() and isinstance(value, kind)}


def _pamqp_method(name: str):
    """commands.Basic.GetOk for BASIC_GET_OK."""
    class_name, *words = name.split("_")
    return getattr(getattr(commands, class_name.title()), "".join(w.title() for w in words))


def test_every_method_id_is_the_specifications():
    methods = _named(MethodId)
    assert len(methods) >= 17
    for name, ids in methods.items():
        method = _pamqp_method(name)
        assert ids.frame_index == method.index, name
        assert commands.INDEX_MAPPING[ids.frame_index] is method, name


def test_a_frame_index_gives_back_its_method_ids():
    for ids in _named(MethodId).values():
        assert MethodId.from_frame_index(ids.frame_index) == ids
    assert MethodId.from_frame_index(commands.Exchange.Declare.index) == (40, 10)


def test_class_ids_and_decoder_indexes_match_the_methods():
    assert {name: value for name, value in _named(int).items()
            if name.endswith("_CLASS")} == {
        "CONNECTION_CLASS": commands.Connection.Start.index >> 16,
        "CHANNEL_CLASS": commands.Channel.Open.index >> 16,
        "QUEUE_CLASS": commands.Queue.Declare.index >> 16,
        "BASIC_CLASS": commands.Basic.Publish.index >> 16,
        "TX_CLASS": commands.Tx.Commit.index >> 16,
    }
    assert wire_ids.PUBLISH_INDEX == commands.Basic.Publish.index
    assert wire_ids.ACK_INDEX == commands.Basic.Ack.index
    assert wire_ids.GET_INDEX == commands.Basic.Get.index


def test_property_flags_are_pamqps_and_the_layout_uses_them_in_wire_order():
    flags = {name.removesuffix("_FLAG").lower(): value
             for name, value in _named(int).items() if name.endswith("_FLAG")}
    assert flags.pop("continuation") == 0x0001
    assert flags == commands.Basic.Properties.flags
    assert [(name, flag) for name, flag, _kind in LAYOUT] == list(
        commands.Basic.Properties.flags.items())
