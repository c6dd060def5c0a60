"""Warren: an AMQP 0-9-1 broker that unmodified RabbitMQ clients use."""

__version__ = "0.1.0"
