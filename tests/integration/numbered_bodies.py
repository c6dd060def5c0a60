"""Message bodies that say which message they are: "message-00000042:" followed by
bytes that depend on the index, so a body read back from disk can be checked whole and
placed in publish order; and a durable queue filled with them."""

import pika

PREFIX = b"message-"
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def numbered_body(index: int, size: int) -> bytes:
    head = PREFIX + f"{index:08d}:".encode()
    return head + bytes((index + offset) % 251 for offset in range(size - len(head)))


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
