"""Admin operations on a running broker for tests: users, vhosts, permissions, topic
permissions, limits, policies and operator policies, with the same methods for Warren
(its control socket, broker/server/control.py) and for RabbitMQ (`rabbitmqctl`), so a
differential test sets up both brokers the same way.

The `broker` fixture's address picks the right one: `broker.admin()` (tests/conftest.py).
"""

import json
import os
import socket
import subprocess


class AdminRefused(Exception):
    """The broker refused the operation (the text is the broker's)."""


class WarrenAdmin:
    """Talks to a Warren broker's control socket."""

    def __init__(self, socket_path: str, timeout: float = 30.0):
        self.socket_path = socket_path
        self.timeout = timeout

    def call(self, op: str, **args) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
            sock.sendall(json.dumps({"op": op, "args": args}).encode() + b"\n")
            reply = b""
            while not reply.endswith(b"\n"):
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("control socket closed without a reply")
                reply += data
        answer = json.loads(reply)
        if not answer["ok"]:
            raise AdminRefused(answer["error"])

    def add_user(self, name: str, password: str | None = None, tags=()) -> None:
        self.call("add_user", name=name, password=password, tags=list(tags))

    def delete_user(self, name: str) -> None:
        self.call("delete_user", name=name)

    def change_password(self, name: str, password: str) -> None:
        self.call("change_password", name=name, password=password)

    def set_user_tags(self, name: str, tags) -> None:
        self.call("set_user_tags", name=name, tags=list(tags))

    def add_vhost(self, name: str) -> None:
        self.call("add_vhost", name=name)

    def delete_vhost(self, name: str) -> None:
        self.call("delete_vhost", name=name)

    def set_permissions(self, user: str, vhost: str, configure: str, write: str,
                        read: str) -> None:
        self.call("set_permissions", user=user, vhost=vhost, configure=configure,
                  write=write, read=read)

    def clear_permissions(self, user: str, vhost: str) -> None:
        self.call("clear_permissions", user=user, vhost=vhost)

    def set_topic_permissions(self, user: str, vhost: str, exchange: str, write: str,
                              read: str) -> None:
        self.call("set_topic_permissions", user=user, vhost=vhost, exchange=exchange,
                  write=write, read=read)

    def clear_topic_permissions(self, user: str, vhost: str,
                                exchange: str | None = None) -> None:
        self.call("clear_topic_permissions", user=user, vhost=vhost, exchange=exchange)

    def set_vhost_limits(self, vhost: str, limits: dict) -> None:
        self.call("set_vhost_limits", vhost=vhost, limits=limits)

    def clear_vhost_limits(self, vhost: str) -> None:
        self.call("clear_vhost_limits", vhost=vhost)

    def set_user_limits(self, user: str, limits: dict) -> None:
        self.call("set_user_limits", user=user, limits=limits)

    def clear_user_limits(self, user: str, limit: str = "all") -> None:
        self.call("clear_user_limits", user=user, limit=limit)

    def set_policy(self, vhost: str, name: str, pattern: str, definition: dict,
                   priority: int = 0, apply_to: str = "all") -> None:
        self.call("set_policy", vhost=vhost, name=name, pattern=pattern,
                  definition=definition, priority=priority, apply_to=apply_to)

    def clear_policy(self, vhost: str, name: str) -> None:
        self.call("clear_policy", vhost=vhost, name=name)

    def set_operator_policy(self, vhost: str, name: str, pattern: str, definition: dict,
                            priority: int = 0, apply_to: str = "all") -> None:
        self.call("set_operator_policy", vhost=vhost, name=name, pattern=pattern,
                  definition=definition, priority=priority, apply_to=apply_to)

    def clear_operator_policy(self, vhost: str, name: str) -> None:
        self.call("clear_operator_policy", vhost=vhost, name=name)


class RabbitAdmin:
    """Runs `rabbitmqctl` against a local RabbitMQ node: RABBITMQ_NODENAME with the cookie
    RABBITMQ_ERLANG_COOKIE (what tests/rabbitmq_node.py's `run` exports for its
    throw-away node), or the default node of this host with its cookie."""

    def __init__(self, node: str | None = None, cookie: str | None = None):
        self.node = node or os.environ.get("RABBITMQ_NODENAME")
        self.cookie = cookie or os.environ.get("RABBITMQ_ERLANG_COOKIE")

    def call(self, *args: str) -> None:
        command = ["rabbitmqctl", *(["-n", self.node] if self.node else []),
                   *(["--erlang-cookie", self.cookie] if self.cookie else []), "-q", *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise AdminRefused((result.stderr or result.stdout).strip())

    def add_user(self, name: str, password: str | None = None, tags=()) -> None:
        self.call("add_user", name, password or "")
        if password is None:
            self.call("clear_password", name)
        if tags:
            self.call("set_user_tags", name, *tags)

    def delete_user(self, name: str) -> None:
        self.call("delete_user", name)

    def change_password(self, name: str, password: str) -> None:
        self.call("change_password", name, password)

    def set_user_tags(self, name: str, tags) -> None:
        self.call("set_user_tags", name, *tags)

    def add_vhost(self, name: str) -> None:
        self.call("add_vhost", name)

    def delete_vhost(self, name: str) -> None:
        self.call("delete_vhost", name)

    def set_permissions(self, user: str, vhost: str, configure: str, write: str,
                        read: str) -> None:
        self.call("set_permissions", "-p", vhost, user, configure, write, read)

    def clear_permissions(self, user: str, vhost: str) -> None:
        self.call("clear_permissions", "-p", vhost, user)

    def set_topic_permissions(self, user: str, vhost: str, exchange: str, write: str,
                              read: str) -> None:
        self.call("set_topic_permissions", "-p", vhost, user, exchange, write, read)

    def clear_topic_permissions(self, user: str, vhost: str,
                                exchange: str | None = None) -> None:
        self.call("clear_topic_permissions", "-p", vhost, user,
                  *([exchange] if exchange is not None else []))

    def set_vhost_limits(self, vhost: str, limits: dict) -> None:
        self.call("set_vhost_limits", "-p", vhost, json.dumps(limits))

    def clear_vhost_limits(self, vhost: str) -> None:
        self.call("clear_vhost_limits", "-p", vhost)

    def set_user_limits(self, user: str, limits: dict) -> None:
        self.call("set_user_limits", user, json.dumps(limits))

    def clear_user_limits(self, user: str, limit: str = "all") -> None:
        self.call("clear_user_limits", user, limit)

    def set_policy(self, vhost: str, name: str, pattern: str, definition: dict,
                   priority: int = 0, apply_to: str = "all") -> None:
        """RabbitMQ applies it to its queues asynchronously, after rabbitmqctl returns:
        tests wait for the effect."""
        self.call("set_policy", "-p", vhost, "--priority", str(priority), "--apply-to",
                  apply_to, "--", name, pattern, json.dumps(definition))

    def clear_policy(self, vhost: str, name: str) -> None:
        self.call("clear_policy", "-p", vhost, name)

    def set_operator_policy(self, vhost: str, name: str, pattern: str, definition: dict,
                            priority: int = 0, apply_to: str = "all") -> None:
        self.call("set_operator_policy", "-p", vhost, "--priority", str(priority),
                  "--apply-to", apply_to, "--", name, pattern, json.dumps(definition))

    def clear_operator_policy(self, vhost: str, name: str) -> None:
        self.call("clear_operator_policy", "-p", vhost, name)
