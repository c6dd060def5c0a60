"""Message bodies that say which message they are: "message-00000042:" followed by
bytes that depend on the index, so a body read back from disk can be checked whole and
placed in publish order; and a durable queue filled with them."""

import pika

PREFIX = b"message-"
PERSISTENT = pika.BasicProperties(delivery_mode=2)
_CYCLE = 251
_pattern = bytes(range(_CYCLE))     # grown on demand: byte i is i % 251


def numbered_body(index: int, size: int) -> bytes:
    """The head, then bytes (index + offset) % 251 for each offset after it (a slice of
    a repeating pattern: built a byte at a time, the bodies took half a test's CPU)."""
    global _pattern
    head = PREFIX + f"{index:08d}:".encode()
    start = index % _CYCLE
    end = start + max(size - len(head), 0)
    if end > len(_pattern):
        _pattern = bytes(range(_CYCLE)) * (end // _CYCLE + 1)
    return head + _pattern[start:end]


def body_index(data: bytes) -> int:
    return int(data[len(PREFIX):len(PREFIX) + 8])


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))


def fill_durable_queue(port: int, queue: str, count: int, size: int,
                       tx_batch: int = 1_000) -> None:
    """Declare `queue` durable and publish `count` persistent numbered bodies of `size`
    bytes to it, durable once each Tx.Commit-Ok (every `tx_batch` messages) arrives."""
    connection = connect(port)
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    channel.tx_select()
    for index in range(count):
        channel.basic_publish("", queue, numbered_body(index, size), PERSISTENT)
        if (index + 1) % tx_batch == 0:
            channel.tx_commit()
    channel.tx_commit()
    connection.close()
