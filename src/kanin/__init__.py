"""kanin: an AMQP 0-9-1 message broker that speaks the protocol the way RabbitMQ does."""

__version__ = "0.1.0"
