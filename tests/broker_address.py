"""Where a test broker is: AMQP, its admin operations and its management API."""

from dataclasses import dataclass

from broker_admin import RabbitAdmin, WarrenAdmin
from management_client import ManagementApi


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int
    control_socket: str | None = None   # Warren's; None for an external broker
    management_url: str | None = None   # the management HTTP API (http://host:port)
    # a throw-away RabbitMQ node's name and Erlang cookie, for rabbitmqctl
    rabbitmq_node: str | None = None
    erlang_cookie: str | None = None

    def management(self, user: str = "guest", password: str = "guest") -> ManagementApi:
        """A client of this broker's management HTTP API, logged in as `user`."""
        assert self.management_url is not None, (
            "no management API: set WARREN_TEST_MANAGEMENT=http://host:port with "
            "WARREN_TEST_BROKER")
        return ManagementApi(self.management_url, user, password)

    def admin(self):
        """Admin operations on this broker: its control socket, or rabbitmqctl."""
        if self.control_socket is None:
            return RabbitAdmin(self.rabbitmq_node, self.erlang_cookie)
        return WarrenAdmin(self.control_socket)
