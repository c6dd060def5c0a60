"""A message announced larger than max_body_size: the decoder decides on its content
header, keeps frame-checking its body frames without keeping their bytes, and stays in
sync with the stream after it."""

import pytest
from hypothesis import given, settings, strategies as st

from amqp_codec import PROTOCOL_HEADER, Decoder, InboundMethod, InboundPublish, ProtocolError
from test_decoder import body, content_header, feed_in_chunks, method, publish, raw_frame

LIMIT = 1000


def refused(item) -> tuple:
    assert type(item) is InboundPublish and item.body is None
    return (item.channel, item.routing_key, item.body_size)


def oversized(channel: int = 1, size: int = 2500, frame: int = 400) -> bytes:
    """Publish + header announcing `size` bytes + body frames of `frame` bytes."""
    frames = [publish(channel, routing_key="big"), content_header(channel, size)]
    frames += [body(channel, bytes(min(frame, size - start)))
               for start in range(0, size, frame)]
    return b"".join(frames)


def started_decoder(max_body_size: int = LIMIT) -> Decoder:
    decoder = Decoder(frame_max=4096, max_body_size=max_body_size)
    decoder.feed(PROTOCOL_HEADER)
    return decoder


def test_body_above_the_limit_is_handed_over_without_its_bytes_after_its_last_frame():
    decoder = started_decoder()
    stream = oversized(size=2500, frame=400)
    last_frame = len(body(1, bytes(100)))
    assert decoder.feed(stream[:-last_frame]) == []
    assert decoder.awaiting_content
    [item] = decoder.feed(stream[-last_frame:])
    assert refused(item) == (1, "big", 2500)
    assert not decoder.awaiting_content


def test_dropped_body_frames_are_not_held():
    decoder = started_decoder()
    decoder.feed(publish() + content_header(body_size=10**9))
    for _ in range(50):
        assert decoder.feed(body(1, bytes(4000))) == []
        assert decoder.assembling_bytes == 0
    decoder.feed(body(1, bytes(4000))[:1000])          # a frame cut by a read
    assert decoder.assembling_bytes == 1000             # only that part waits


def test_a_body_being_assembled_is_counted():
    decoder = started_decoder()
    decoder.feed(publish() + content_header(body_size=900) + body(1, bytes(600)))
    assert decoder.awaiting_content
    assert decoder.assembling_bytes == 600


@pytest.mark.parametrize("size, dropped", [(LIMIT, False), (LIMIT + 1, True)])
def test_the_limit_itself_is_allowed(size, dropped):
    for frame in (size, 300):   # one body frame (the fast path) or several
        [item] = started_decoder().feed(oversized(size=size, frame=frame))
        assert (item.body is None) == dropped
        if not dropped:
            assert item.body == bytes(size)


def test_body_size_of_2_to_the_64_minus_1_is_dropped_frame_by_frame():
    decoder = started_decoder()
    assert decoder.feed(publish() + content_header(body_size=2**64 - 1)
                        + body(1, bytes(4000)) * 3) == []
    assert decoder.awaiting_content and decoder.assembling_bytes == 0


def test_stream_stays_in_sync_after_a_dropped_body():
    stream = (oversized(channel=1, size=3000, frame=700)
              + publish(1, routing_key="small") + content_header(1, 5) + body(1, b"hello")
              + method(1, 90, 10))
    out = started_decoder().feed(stream)
    assert refused(out[0]) == (1, "big", 3000)
    assert (out[1].routing_key, out[1].body) == ("small", b"hello")
    assert type(out[2]) is InboundMethod


def test_other_channels_interleave_with_a_dropped_body():
    frames = [publish(1, routing_key="big"), content_header(1, 2000), body(1, bytes(1000)),
              publish(2, routing_key="ok"), content_header(2, 3), body(2, b"abc"),
              body(1, bytes(1000))]
    out = started_decoder().feed(b"".join(frames))
    assert (out[0].channel, out[0].body) == (2, b"abc")
    assert refused(out[1]) == (1, "big", 2000)


@settings(deadline=None, max_examples=50)
@given(st.lists(st.integers(0, 6000), max_size=20))
def test_any_split_drops_the_same_way(cuts):
    stream = (PROTOCOL_HEADER + oversized(size=4000, frame=900)
              + publish(1, routing_key="after") + content_header(1, 2) + body(1, b"ok"))
    decoder = Decoder(frame_max=4096, max_body_size=LIMIT)
    out = feed_in_chunks(decoder, stream, cuts)
    assert refused(out[0]) == (1, "big", 4000)
    assert (out[1].routing_key, out[1].body) == ("after", b"ok")
    assert decoder.assembling_bytes == 0


FRAMING_ERRORS = {
    # name: (frames after an oversized header on channel 1, reply code)
    "bad end octet in a dropped frame": (body(1, bytes(500))[:-1] + b"\x00", 501),
    "dropped frames longer than announced": (body(1, bytes(1500)) + body(1, bytes(600)), 501),
    "frame above frame_max": (body(1, bytes(4097)), 501),
    "method frame before the body ends": (body(1, bytes(500)) + method(1, 90, 10), 505),
    "header frame before the body ends": (content_header(1, 5), 505),
    "unknown frame type": (raw_frame(5, 1, b"x"), 501),
}


@pytest.mark.parametrize("name", list(FRAMING_ERRORS))
def test_dropped_frames_are_still_checked(name):
    frames, code = FRAMING_ERRORS[name]
    decoder = started_decoder()
    decoder.feed(publish() + content_header(body_size=2000))
    with pytest.raises(ProtocolError) as caught:
        decoder.feed(frames)
    assert caught.value.reply_code == code
