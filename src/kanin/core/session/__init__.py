"""An AMQP connection without I/O: Session (session.py) and what it is made of."""
