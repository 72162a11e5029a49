"""Prometheus metrics at /metrics, under rabbitmq_prometheus's names (see README)."""
