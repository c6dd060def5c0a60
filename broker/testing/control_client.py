"""A client of a broker's control socket (broker/server/control.py): one JSON request
per line, one reply per line. Used by the test broker for its admin and test
operations."""

import json
import socket
from typing import Any


class BrokerRefused(Exception):
    """The broker refused the operation; the text is the broker's."""


class ControlClient:
    """Talks to the control socket at `path`; `call` waits up to `timeout` seconds for
    the reply (a wait operation's own timeout must be shorter)."""

    def __init__(self, path: str, timeout: float = 60.0):
        self.path = path
        self.timeout = timeout

    def call(self, op: str, timeout: float | None = None, **args) -> Any:
        """Run `op` with `args` and return its result (None for admin operations)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout if timeout is None else timeout)
            sock.connect(self.path)
            sock.sendall(json.dumps({"op": op, "args": args}).encode() + b"\n")
            reply = bytearray()
            while not reply.endswith(b"\n"):
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError(
                        f"the broker closed its control socket without answering {op}")
                reply += data
        answer = json.loads(reply)
        if not answer["ok"]:
            raise BrokerRefused(answer["error"])
        return answer.get("result")
