"""Another broker (RabbitMQ, say) under the same tests: differential mode.

`ExternalBroker` offers what `TestBroker` offers where it applies — where the broker is
and a fresh vhost and user per test — through the broker's management HTTP API (the
RabbitMQ API: PUT/DELETE /api/vhosts/{vhost}, /api/users/{user},
/api/permissions/{vhost}/{user}). The broker is not ours to start or stop. Its vhosts
have no test hooks: a helper that needs them raises NotOnThisBroker.
"""

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from .test_vhost import NotOnThisBroker, TestVhost, amqp_url, quoted

MANAGEMENT_PORT = 15672      # RabbitMQ's management plugin's default port
HTTP_TIMEOUT = 30.0          # seconds for one management API request
# The test's user may log in to the management API and see its own vhost there.
TEST_USER_TAGS = "management"


class ManagementUnavailable(Exception):
    """The external broker's management API did not answer as RabbitMQ's does."""


class ExternalBroker:
    """A running broker reached at `amqp_url` (amqp://user:password@host:port/, the
    user an administrator) with its management API at `management_url` (default
    http://<host>:15672). `start()` checks the API and reads the broker's name and
    version; `stop()` leaves the broker running."""

    __test__ = False   # not a test class, whatever pytest thinks of its name

    def __init__(self, amqp_url: str, management_url: str | None = None):
        parts = urllib.parse.urlsplit(amqp_url)
        if parts.scheme != "amqp" or not parts.hostname:
            raise ValueError(f"expected amqp://user:password@host:port/, got {amqp_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 5672
        self.user = urllib.parse.unquote(parts.username or "guest")
        self.password = urllib.parse.unquote(parts.password or "guest")
        self.management_url = (management_url
                               or f"http://{self.host}:{MANAGEMENT_PORT}").rstrip("/")
        self.product = "an external broker"
        self.version = ""
        self.is_warren = False

    @property
    def url(self) -> str:
        """The default vhost as the administrator."""
        return amqp_url(self.host, self.port, "/", self.user, self.password)

    @property
    def description(self) -> str:
        """e.g. "RabbitMQ 3.10.8 at 127.0.0.1:5673"."""
        return f"{self.product} at {self.host}:{self.port}"

    def start(self) -> "ExternalBroker":
        """Check that the management API answers; learn the product and version."""
        try:
            overview = self._request("GET", "/api/overview")
        except urllib.error.HTTPError as error:
            if error.code != 401:
                raise ManagementUnavailable(
                    f"GET {self.management_url}/api/overview answered {error.code}: "
                    f"is --amqp-management the broker's management API?") from None
            raise ManagementUnavailable(
                f"the management API at {self.management_url} refuses user "
                f"{self.user!r}: give an administrator's name and password in "
                f"--amqp-broker=amqp://user:password@host:port/") from None
        except (OSError, ValueError, ManagementUnavailable) as error:
            raise ManagementUnavailable(
                f"the management API of the broker at {self.host}:{self.port} does not "
                f"answer at {self.management_url} ({error}); differential mode creates "
                f"each test's vhost and user through it: enable the management plugin "
                f"or give its address with --amqp-management=http://host:port") from None
        name = overview.get("product_name") or "RabbitMQ"
        version = overview.get("product_version") or overview.get("rabbitmq_version")
        self.product = f"{name} {version}" if version else name
        self.version = str(version or "")
        # Warren (which says it is the RabbitMQ line it emulates) can give each vhost
        # its own line; RabbitMQ is one line.
        self.is_warren = "warren_version" in overview
        return self

    def stop(self) -> None:
        """Nothing to do: the broker is not ours."""

    def new_vhost(self, prefix: str = "test", rabbitmq_line: str | None = None) -> TestVhost:
        """A new vhost with a new user that may do anything in it and nothing
        elsewhere; `TestVhost.remove()` deletes both. A test that needs another RabbitMQ
        line (`rabbitmq_line`) than this broker's is NotOnThisBroker."""
        vhost_body: dict[str, str] = {}
        if rabbitmq_line is not None:
            if self.is_warren:
                vhost_body["rabbitmq_line"] = rabbitmq_line
            elif not self.version.startswith(rabbitmq_line + "."):
                raise NotOnThisBroker(f"the test needs RabbitMQ {rabbitmq_line}; the "
                                      f"broker under test is {self.product}")
        suffix = uuid.uuid4().hex[:12]
        vhost, user = f"{prefix}-{suffix}", f"{prefix}-user-{suffix}"
        password = uuid.uuid4().hex

        def remove() -> None:
            self._delete(f"/api/vhosts/{quoted(vhost)}")
            self._delete(f"/api/users/{quoted(user)}")

        try:
            self._request("PUT", f"/api/vhosts/{quoted(vhost)}", vhost_body)
            self._request("PUT", f"/api/users/{quoted(user)}",
                          {"password": password, "tags": TEST_USER_TAGS})
            self._request("PUT", f"/api/permissions/{quoted(vhost)}/{quoted(user)}",
                          {"configure": ".*", "write": ".*", "read": ".*"})
        except Exception:
            remove()      # what was made before the failure
            raise
        return TestVhost(self.host, self.port, vhost, user, password, remove=remove,
                         management_url=self.management_url,
                         broker_name=self.description)

    def _delete(self, path: str) -> None:
        """DELETE what may be gone already (the test deleted it itself)."""
        try:
            self._request("DELETE", path)
        except urllib.error.HTTPError as error:
            if error.code != 404:
                raise

    def _request(self, method: str, path: str, body: dict | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.management_url + path, data=data,
                                         method=method)
        credentials = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {credentials}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
            text = response.read()
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            raise ManagementUnavailable(f"{method} {path} did not answer JSON") from None
