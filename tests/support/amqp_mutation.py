"""Mutations of a client session (a list of frames, the protocol header first).

Frame-aware mutations keep the framing and change what is inside (arguments, type
tags in tables, property flags, body_size, channel numbers, whole methods replaced by
random ones); byte-level ones break the framing (bit flips, length fields, end octets,
truncation, bytes inserted or deleted, splices with another session). Both kinds are
applied by `mutate_session`, which also says how many frames it changed.
"""

import struct

from tests.support.amqp_grammar import (FRAME_BODY, FRAME_HEADER, FRAME_METHOD, KNOWN_TAGS,
                                        PROTOCOL_HEADER, Choices, basic_properties, boundary_integer,
                                        deeply_nested_table, field_table, field_value, frame,
                                        method_frame, publish_frames, random_method, session_frames)


def split_frames(stream: bytes) -> list:
    """Cut a recorded client byte stream into [protocol header, frame, frame, ...]; a
    trailing incomplete frame is kept as it is."""
    frames = []
    position = 0
    if stream.startswith(b"AMQP"):
        frames.append(stream[:8])
        position = 8
    while position < len(stream):
        if len(stream) - position < 7:
            frames.append(stream[position:])
            break
        size = struct.unpack_from(">I", stream, position + 3)[0]
        end = min(position + 8 + size, len(stream))
        frames.append(stream[position:end])
        position = end
    return frames


def _payload(data: bytes) -> bytes:
    return data[7:-1]


def _with_payload(data: bytes, payload: bytes) -> bytes:
    """The same frame type and channel around a new payload, size corrected."""
    return frame(data[0], struct.unpack_from(">H", data, 1)[0], payload)


# -- frame-aware mutations (framing stays valid) --------------------------------------

def replace_with_random_method(choices: Choices, data: bytes) -> bytes:
    channel = struct.unpack_from(">H", data, 1)[0] if len(data) >= 3 else 1
    return random_method(choices, channel)


def change_channel(choices: Choices, data: bytes) -> bytes:
    channel = choices.choice((0, 1, 2, 2047, 2048, 65535)) if choices.chance(60) else \
        boundary_integer(choices, 16, False)
    return data[:1] + struct.pack(">H", channel) + data[3:]


def change_table_tags(choices: Choices, data: bytes) -> bytes:
    """Swap the type tags that follow a key in a table (any known tag byte) for others."""
    payload = bytearray(_payload(data))
    spots = [at for at, byte in enumerate(payload) if byte in KNOWN_TAGS]
    for _ in range(choices.integer(1, 3)):
        if not spots:
            break
        payload[choices.choice(spots)] = choices.choice(KNOWN_TAGS + b"?\x00\xff")
    return _with_payload(data, bytes(payload))


def replace_arguments_tail(choices: Choices, data: bytes) -> bytes:
    """Keep the class/method ids and the first arguments, replace the rest with a field
    table or field values from the grammar (deeply nested now and then)."""
    payload = _payload(data)
    cut = choices.integer(min(4, len(payload)), len(payload))
    if choices.chance(30):
        tail = deeply_nested_table(choices.choice((100, 1000, 5000)),
                                   choices.choice((b"F", b"A")))
    elif choices.chance(50):
        tail = field_table(choices)
    else:
        tail = field_value(choices)
    return _with_payload(data, payload[:cut] + tail)


def change_content_header(choices: Choices, data: bytes) -> bytes:
    """A content header with another body_size, class id or properties."""
    payload = _payload(data)
    if len(payload) < 12:
        return _with_payload(data, payload + choices.raw(choices.integer(1, 14)))
    class_id, weight, body_size = struct.unpack_from(">HHQ", payload)
    kind = choices.integer(0, 3)
    if kind == 0:
        body_size = choices.choice((0, 1, body_size + 1, max(body_size - 1, 0),
                                    1 << 31, (1 << 63) - 1, (1 << 64) - 1))
    elif kind == 1:
        class_id = choices.choice((0, 10, 20, 61, 0xFFFF))
    else:
        return _with_payload(data, payload[:12] + basic_properties(choices))
    return _with_payload(data, struct.pack(">HHQ", class_id, weight, body_size) + payload[12:])


# -- byte-level mutations (framing may break) ------------------------------------------

def flip_bits(choices: Choices, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(choices.integer(1, 4)):
        if out:
            at = choices.integer(0, len(out) - 1)
            out[at] ^= 1 << choices.integer(0, 7)
    return bytes(out)


def set_length_field(choices: Choices, data: bytes) -> bytes:
    if len(data) < 7:
        return data
    size = len(data) - 8
    value = choices.choice((0, 1, max(size - 1, 0), size + 1, 4096, 131072, 131073,
                            0x7FFFFFFF, 0xFFFFFFFF))
    return data[:3] + struct.pack(">I", value) + data[7:]


def set_frame_type(choices: Choices, data: bytes) -> bytes:
    frame_type = choices.choice((FRAME_METHOD, FRAME_HEADER, FRAME_BODY, 8, 0, 4, 9, 65,
                                 255))
    return bytes([frame_type]) + data[1:]


def set_end_octet(choices: Choices, data: bytes) -> bytes:
    return data[:-1] + bytes([choices.choice((0, 0xCD, 0xCF, 0xFF))]) if data else data


def truncate(choices: Choices, data: bytes) -> bytes:
    return data[:choices.integer(0, max(len(data) - 1, 0))]


def insert_or_delete_bytes(choices: Choices, data: bytes) -> bytes:
    at = choices.integer(0, len(data))
    if choices.chance(50):
        return data[:at] + choices.raw(choices.integer(1, 8)) + data[at:]
    return data[:at] + data[at + choices.integer(1, 8):]


FRAME_MUTATIONS = (replace_with_random_method, change_channel, change_table_tags,
                   replace_arguments_tail, change_content_header, flip_bits,
                   set_length_field, set_frame_type, set_end_octet, truncate,
                   insert_or_delete_bytes)


def mutate_frame(choices: Choices, data: bytes) -> bytes:
    """One mutation of one frame, chosen to fit the frame's type."""
    mutation = choices.choice(FRAME_MUTATIONS)
    if mutation is change_content_header and (len(data) < 8 or data[0] != FRAME_HEADER):
        mutation = flip_bits
    if mutation in (change_table_tags, replace_arguments_tail) and len(data) < 12:
        mutation = set_length_field
    return mutation(choices, data)


# -- session-level mutations -----------------------------------------------------------

def mutate_session(choices: Choices, frames: list, donors: list, mutations: int) -> tuple:
    """Apply `mutations` mutations to a session; returns (frames, a flag per frame:
    whether the mutations changed or added it).

    `donors` are other sessions whose frames can be spliced in. The protocol header is
    left alone by all but a few mutations, so most sessions reach the core.
    """
    frames = list(frames)
    originals = set(frames)
    for _ in range(mutations):
        kind = choices.integer(0, 19)
        first = 1 if len(frames) > 1 and choices.chance(97) else 0
        at = choices.integer(first, max(len(frames) - 1, first))
        if not frames:
            frames.append(PROTOCOL_HEADER)
        elif kind <= 10:
            frames[at] = mutate_frame(choices, frames[at])
        elif kind == 11:
            frames.insert(at, random_method(choices, choices.integer(0, 3)))
        elif kind == 12:
            frames[at:at] = publish_frames(choices, choices.integer(1, 3))
        elif kind == 13 and donors:
            donor = choices.choice(donors)
            start = choices.integer(1, max(len(donor) - 1, 1))
            frames[at:at] = donor[start:start + choices.integer(1, 5)]
        elif kind == 14:
            frames.insert(at, frames[at])                   # a frame twice
        elif kind == 15:
            del frames[at]
        elif kind == 16 and at + 1 < len(frames):
            frames[at], frames[at + 1] = frames[at + 1], frames[at]
        elif kind == 17:
            del frames[at + 1:]                             # the client stops mid-session
        elif kind == 18:
            frames.insert(at, method_frame(choices.integer(1, 3), 0x003C0028,
                                           choices.raw(choices.integer(0, 12))))
        else:
            frames[at] = truncate(choices, frames[at])      # cut mid-frame
    return frames, [data not in originals for data in frames]


def fuzz_session(choices: Choices, seeds: list) -> tuple:
    """One hostile session: a recorded seed session or a grammar session, mutated.
    Returns (frames, a flag per frame: whether it differs from the unmutated session)."""
    if seeds and choices.chance(50):
        base = choices.choice(seeds)
    else:
        base = session_frames(choices)
    mutations = choices.choice((0, 1, 1, 2, 3, 5, 10)) if choices.chance(90) else \
        choices.integer(0, 40)
    return mutate_session(choices, base, seeds, mutations)


def read_cuts(choices: Choices, stream: bytes) -> list:
    """Up to four offsets, in order, where the stream is split between reads."""
    return sorted(choices.integer(0, len(stream)) for _ in range(choices.integer(0, 4)))
