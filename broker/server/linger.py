"""After the Close-Ok of a client's Connection.Close, the socket waits for the client to
close its end, as RabbitMQ's does.

Closed first, with input unread or still coming, the socket would be reset, and a client
reading it reports an error (amqp091-go's Close, called from several goroutines at once,
returned 501 "connection reset by peer")."""

from typing import Callable

import trio

from .admission import Admission

# How long the socket waits for the client to close its end (RabbitMQ's CLOSING_TIMEOUT).
CLOSING_TIMEOUT = 30.0


async def wait_for_peer_close(sock, receive: Callable[[int], bytes | None],
                              admission: Admission) -> None:
    """Read and drop what the client still sends on `sock` (with `receive`, one
    non-blocking read) until it closes its end, for CLOSING_TIMEOUT at most. A server
    shutting down, or one with too many sockets waiting already, does not wait."""
    if not admission.may_linger():
        return
    fd = sock.fileno()
    try:
        with trio.move_on_after(CLOSING_TIMEOUT):
            while True:
                data = receive(fd)
                if data is None:
                    await trio.lowlevel.wait_readable(sock)
                elif not data:
                    return
                else:
                    await trio.lowlevel.checkpoint()
    except (trio.BrokenResourceError, ConnectionError):
        pass
    finally:
        admission.linger_ended()
