"""Admin operations on a running broker for tests: users, vhosts, permissions, topic
permissions, limits, policies and operator policies, with the same methods for Warren
(its control socket, broker/server/control.py) and for RabbitMQ (its management HTTP
API), so a differential test sets up both brokers the same way.

The `broker_admin` fixture (tests/conftest.py) is the right one for the session broker;
a broker's address picks it with `BrokerAddress.admin()`.
"""

import json
import os
import socket

from tests.support.management_client import ManagementApi, quoted


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
    """Talks to a RabbitMQ node's management HTTP API (the management plugin, as guest):
    `management_url`, or WARREN_TEST_MANAGEMENT (what tests/support/rabbitmq_node.py's `run`
    exports for its throw-away node). The API does what `rabbitmqctl` does, in
    milliseconds where each rabbitmqctl call starts an Erlang VM (about 0.7 s of CPU);
    an operation the node refuses raises AdminRefused with the node's reason, e.g. a
    policy's "Validation failed" text, the same as rabbitmqctl prints."""

    def __init__(self, management_url: str | None = None):
        url = management_url or os.environ.get("WARREN_TEST_MANAGEMENT")
        if not url:
            raise ValueError("RabbitAdmin needs the node's management API: pass its URL or "
                             "set WARREN_TEST_MANAGEMENT=http://host:port")
        self.api = ManagementApi(url)

    def _expect(self, response, *codes: int):
        if response.status_code not in codes:
            try:
                reason = response.json().get("reason", response.text)
            except ValueError:
                reason = response.text
            raise AdminRefused(f"{response.status_code} {reason}".strip())
        return response

    def _put(self, path: str, body: dict) -> None:
        self._expect(self.api.put(path, body), 201, 204)

    def _delete(self, path: str) -> None:
        self._expect(self.api.delete(path), 204)

    def _get(self, path: str):
        return self._expect(self.api.get(path), 200).json()

    def _user(self, name: str) -> dict:
        return self._get(f"/api/users/{quoted(name)}")

    def add_user(self, name: str, password: str | None = None, tags=()) -> None:
        """No password (None): the user cannot log in with one, as after
        `rabbitmqctl clear_password`."""
        login = {"password": password} if password is not None else {"password_hash": ""}
        self._put(f"/api/users/{quoted(name)}", {**login, "tags": list(tags)})

    def delete_user(self, name: str) -> None:
        self._delete(f"/api/users/{quoted(name)}")

    def change_password(self, name: str, password: str) -> None:
        tags = _tag_list(self._user(name)["tags"])
        self._put(f"/api/users/{quoted(name)}", {"password": password, "tags": tags})

    def set_user_tags(self, name: str, tags) -> None:
        user = self._user(name)      # a PUT replaces the user: its password hash is kept
        self._put(f"/api/users/{quoted(name)}", {
            "password_hash": user["password_hash"],
            "hashing_algorithm": user["hashing_algorithm"], "tags": list(tags)})

    def add_vhost(self, name: str) -> None:
        self._put(f"/api/vhosts/{quoted(name)}", {})

    def delete_vhost(self, name: str) -> None:
        self._delete(f"/api/vhosts/{quoted(name)}")

    def set_permissions(self, user: str, vhost: str, configure: str, write: str,
                        read: str) -> None:
        self._put(f"/api/permissions/{quoted(vhost)}/{quoted(user)}",
                  {"configure": configure, "write": write, "read": read})

    def clear_permissions(self, user: str, vhost: str) -> None:
        self._delete(f"/api/permissions/{quoted(vhost)}/{quoted(user)}")

    def set_topic_permissions(self, user: str, vhost: str, exchange: str, write: str,
                              read: str) -> None:
        self._put(f"/api/topic-permissions/{quoted(vhost)}/{quoted(user)}",
                  {"exchange": exchange, "write": write, "read": read})

    def clear_topic_permissions(self, user: str, vhost: str,
                                exchange: str | None = None) -> None:
        """The API clears a user's topic permissions of a vhost all at once: those of
        the other exchanges are put back."""
        path = f"/api/topic-permissions/{quoted(vhost)}/{quoted(user)}"
        kept = [] if exchange is None else [
            entry for entry in self._get(path) if entry["exchange"] != exchange]
        self._delete(path)
        for entry in kept:
            self.set_topic_permissions(user, vhost, entry["exchange"], entry["write"],
                                       entry["read"])

    def set_vhost_limits(self, vhost: str, limits: dict) -> None:
        """Replaces the vhost's limits, as `rabbitmqctl set_vhost_limits` does."""
        for name in set(self._limits(f"/api/vhost-limits/{quoted(vhost)}")) - set(limits):
            self._delete(f"/api/vhost-limits/{quoted(vhost)}/{name}")
        for name, value in limits.items():
            self._put(f"/api/vhost-limits/{quoted(vhost)}/{name}", {"value": value})

    def clear_vhost_limits(self, vhost: str) -> None:
        self.set_vhost_limits(vhost, {})

    def set_user_limits(self, user: str, limits: dict) -> None:
        """Sets these limits and keeps the user's others, as `rabbitmqctl
        set_user_limits` does."""
        for name, value in limits.items():
            self._put(f"/api/user-limits/{quoted(user)}/{name}", {"value": value})

    def clear_user_limits(self, user: str, limit: str = "all") -> None:
        names = (self._limits(f"/api/user-limits/{quoted(user)}") if limit == "all"
                 else [limit])
        for name in names:
            self._delete(f"/api/user-limits/{quoted(user)}/{name}")

    def _limits(self, path: str) -> dict:
        """The limits an /api/*-limits/NAME listing shows ({} when none are set)."""
        return {key: value for entry in self._get(path)
                for key, value in entry["value"].items()}

    def set_policy(self, vhost: str, name: str, pattern: str, definition: dict,
                   priority: int = 0, apply_to: str = "all") -> None:
        """RabbitMQ applies it to its queues asynchronously, after the API answers:
        tests wait for the effect."""
        self._put(f"/api/policies/{quoted(vhost)}/{quoted(name)}", {
            "pattern": pattern, "definition": definition, "priority": priority,
            "apply-to": apply_to})

    def clear_policy(self, vhost: str, name: str) -> None:
        self._delete(f"/api/policies/{quoted(vhost)}/{quoted(name)}")

    def set_operator_policy(self, vhost: str, name: str, pattern: str, definition: dict,
                            priority: int = 0, apply_to: str = "all") -> None:
        self._put(f"/api/operator-policies/{quoted(vhost)}/{quoted(name)}", {
            "pattern": pattern, "definition": definition, "priority": priority,
            "apply-to": apply_to})

    def clear_operator_policy(self, vhost: str, name: str) -> None:
        self._delete(f"/api/operator-policies/{quoted(vhost)}/{quoted(name)}")


def _tag_list(tags) -> list[str]:
    """A user's tags as the API shows them: a list, or a comma-separated string."""
    if isinstance(tags, str):
        return [tag for tag in tags.split(",") if tag]
    return list(tags)
