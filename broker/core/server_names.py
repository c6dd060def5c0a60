"""Names the broker chooses when a client leaves them to it: server-named queues
(`amq.gen-`), consumer tags (`amq.ctag-`) and direct reply-to tokens."""

import base64
import os


def server_named(prefix: str) -> str:
    """A unique name like RabbitMQ's: `prefix` + 22 url-safe base64 characters."""
    return prefix + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
