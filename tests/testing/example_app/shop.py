"""The shop's Celery application. `create_app(broker_url)` builds it for a broker, so a
test can give it its own Warren vhost; production code would call it once at import."""

from celery import Celery
from kombu import Exchange

ORDERS = Exchange("orders", type="topic", durable=True)
CONFIRMED = "order.confirmed"


def create_app(broker_url: str) -> Celery:
    """The shop's Celery app on `broker_url`; task results come back over AMQP (rpc://)."""
    app = Celery("shop", broker=broker_url, backend="rpc://", set_as_current=False)
    app.conf.broker_connection_retry_on_startup = True

    @app.task(name="shop.confirm_order")
    def confirm_order(order_id: int) -> str:
        """Mark the order confirmed and tell the rest of the shop, on `orders`."""
        with app.producer_or_acquire() as producer:
            producer.publish({"order_id": order_id, "status": "confirmed"},
                             exchange=ORDERS, routing_key=CONFIRMED, declare=[ORDERS],
                             serializer="json", delivery_mode=2, retry=True)
        return f"order {order_id} confirmed"

    return app
