"""Where a test broker is: AMQP, its admin operations and its management API."""

from dataclasses import dataclass

from tests.support.broker_admin import RabbitAdmin, WarrenAdmin
from tests.support.management_client import ManagementApi


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int
    control_socket: str | None = None   # Warren's; None for an external broker
    management_url: str | None = None   # the management HTTP API (http://host:port)

    def management(self, user: str = "guest", password: str = "guest") -> ManagementApi:
        """A client of this broker's management HTTP API, logged in as `user`."""
        assert self.management_url is not None, (
            "no management API: set WARREN_TEST_MANAGEMENT=http://host:port with "
            "WARREN_TEST_BROKER")
        return ManagementApi(self.management_url, user, password)

    def admin(self):
        """Admin operations on this broker: its control socket, or RabbitMQ's management
        API."""
        if self.control_socket is None:
            return RabbitAdmin(self.management_url)
        return WarrenAdmin(self.control_socket)
