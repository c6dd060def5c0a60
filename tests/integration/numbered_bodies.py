"""Message bodies that say which message they are: "message-00000042:" followed by
bytes that depend on the index, so a body read back from disk can be checked whole and
placed in publish order."""

PREFIX = b"message-"


def numbered_body(index: int, size: int) -> bytes:
    head = PREFIX + f"{index:08d}:".encode()
    return head + bytes((index + offset) % 251 for offset in range(size - len(head)))


def body_index(data: bytes) -> int:
    return int(data[len(PREFIX):len(PREFIX) + 8])
