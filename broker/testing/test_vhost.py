"""One test's own vhost and user on a broker, with where to connect, and (on a Warren
test broker) the test hooks scoped to that vhost."""

import urllib.parse
from typing import TYPE_CHECKING, Any, Callable

from .cleanliness import Cleanliness
from .control_client import ControlClient
from .faults import Faults
from .inspection import Inspection
from .waits import Waits
from .virtual_time import VirtualTime

if TYPE_CHECKING:
    import pika

    from .test_broker import TestBroker


class NotOnThisBroker(Exception):
    """The helper needs Warren's test hooks and the broker under test is another one
    (differential mode). The pytest plugin reports the test as skipped with this text."""


class TestVhost(Inspection, Waits, Faults, VirtualTime, Cleanliness):
    """A vhost and a user for one test. Connect with `url` (any client taking an
    amqp:// URL: pika.URLParameters, aio-pika, kombu), `connection_parameters()`
    (pika), or `host`/`port`/`vhost`/`user`/`password` (a Java or Go program)."""

    __test__ = False   # not a test class, whatever pytest thinks of its name

    def __init__(self, host: str, port: int, vhost: str, user: str, password: str, *,
                 remove: Callable[[], None], control: ControlClient | None = None,
                 management_url: str | None = None,
                 broker: "TestBroker | None" = None, broker_name: str = "Warren"):
        self.host = host
        self.port = port
        self.vhost = vhost
        self.user = user
        self.password = password
        self.management_url = management_url
        self.broker = broker           # the TestBroker, on Warren; None elsewhere
        self.broker_name = broker_name
        self._control = control
        self._remove = remove
        self.removed = False

    @classmethod
    def on_test_broker(cls, broker: "TestBroker", vhost: str, user: str,
                       password: str) -> "TestVhost":
        control = broker.control

        def remove() -> None:
            control.call("test.remove_sandbox", vhost=vhost, user=user)

        return cls(broker.host, broker.port, vhost, user, password, remove=remove,
                   control=control, management_url=broker.management_url, broker=broker)

    # -- where to connect --------------------------------------------------------

    @property
    def url(self) -> str:
        """amqp://user:password@host:port/vhost, the vhost percent-encoded."""
        return amqp_url(self.host, self.port, self.vhost, self.user, self.password)

    @property
    def aio_pika_url(self) -> str:
        """The URL aio-pika's and aiormq's `connect` take (the same amqp:// URL)."""
        return self.url

    def connection_parameters(self, **options) -> "pika.ConnectionParameters":
        """pika's ConnectionParameters for this vhost and user; `options` are more of
        its keyword arguments (heartbeat, client_properties, ...)."""
        import pika   # pika is needed only by tests that use it

        return pika.ConnectionParameters(
            self.host, self.port, self.vhost,
            pika.PlainCredentials(self.user, self.password), **options)

    # -- the test hooks ----------------------------------------------------------

    def call(self, operation: str, **arguments) -> Any:
        """Run the test hook `operation` on this vhost (Warren only)."""
        return self.hooks(operation).call(f"test.{operation}", vhost=self.vhost,
                                          **arguments)

    @property
    def has_test_hooks(self) -> bool:
        """Whether the broker under test is a Warren test broker."""
        return self._control is not None

    def hooks(self, needed_for: str) -> ControlClient:
        """The control socket of a Warren test broker; NotOnThisBroker elsewhere."""
        if self._control is None:
            raise NotOnThisBroker(
                f"{needed_for} needs Warren's test hooks; the broker under test is "
                f"{self.broker_name}")
        return self._control

    def upgrade_notes(self) -> list[tuple[str, str]]:
        """What this vhost did that another RabbitMQ line refuses or treats otherwise,
        or that a denied deprecated feature changed: (topic, text) each (Warren only)."""
        return [(topic, text) for topic, text in self.call("upgrade_notes")]

    def remove(self) -> None:
        """Delete the vhost (its queues, exchanges, messages; its connections are
        closed) and the user, in one step. Idempotent."""
        if not self.removed:
            self._remove()
            self.removed = True

    def __repr__(self) -> str:
        return f"<TestVhost {self.vhost!r} as {self.user!r} on {self.host}:{self.port}>"


def amqp_url(host: str, port: int, vhost: str, user: str, password: str) -> str:
    """amqp://user:password@host:port/vhost, user, password and vhost percent-encoded
    (the default vhost "/" is %2F: a bare "/" path means the empty vhost to some
    clients, the Java client among them)."""
    return f"amqp://{quoted(user)}:{quoted(password)}@{host}:{port}/{quoted(vhost)}"


def quoted(text: str) -> str:
    """A name as one URL path segment or user-info part ("/" is %2F)."""
    return urllib.parse.quote(text, safe="")
