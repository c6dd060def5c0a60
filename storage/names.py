"""Names as the message stores write them: exchange names, routing keys and stream
consumer names are kept as at most 255 bytes (AMQP's short string) of UTF-8. Bytes that
are not valid UTF-8 survive the round trip unchanged (surrogateescape)."""

MAX_NAME_BYTES = 255


def encode_name(value) -> bytes:
    """`value` is a str or any bytes-like object. Runs for every persistent message
    (twice): bytes are returned as they are, without the cost of a bytes() call."""
    if isinstance(value, str):
        value = value.encode("utf-8", "surrogateescape")
    if len(value) > MAX_NAME_BYTES:
        raise ValueError(f"names are at most {MAX_NAME_BYTES} bytes, got {len(value)}")
    return value if type(value) is bytes else bytes(value)


def decode_name(value) -> str:
    """`value` is any bytes-like object (bytes, bytearray, memoryview)."""
    return str(value, "utf-8", "surrogateescape")
