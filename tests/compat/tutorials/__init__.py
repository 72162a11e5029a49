"""RabbitMQ's seven pika tutorials as small programs that take the broker URL as a parameter.

Each module mirrors one tutorial's send/receive programs. The only departures from the
tutorial shape are the ones a test needs: names get a unique suffix so tests can share one
broker, consumers loop with `process_data_events(time_limit=...)` bounded in time instead of
`start_consuming()` forever, and what a program would print is also recorded in a `Listener`.
"""
