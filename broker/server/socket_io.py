"""The non-blocking system calls a socket's bytes go through (plain and TLS): one read,
one scatter/gather write. Each returns None when the socket would block."""

import os

import trio

RECEIVE_SIZE = 256 * 1024
MAX_IOV = 512                 # buffers per sendmsg (Linux allows 1024)


def receive_ready(fd: int) -> bytes | None:
    """One non-blocking read: None when nothing is there yet, b"" when the peer closed."""
    try:
        return os.read(fd, RECEIVE_SIZE)
    except BlockingIOError:
        return None
    except OSError as error:
        raise trio.BrokenResourceError(error) from error


def send_ready(fd: int, chunks: list) -> int | None:
    """One non-blocking write of the first chunks: bytes sent, or None when the socket
    is full."""
    try:
        if len(chunks) == 1:
            return os.write(fd, chunks[0])
        return os.writev(fd, chunks[:MAX_IOV])
    except BlockingIOError:
        return None
    except OSError as error:
        raise trio.BrokenResourceError(error) from error
