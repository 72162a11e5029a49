"""Run the same management API requests against RabbitMQ 3.10 and kanin, and report where
the status codes or JSON field names differ. Not part of the test suite (it needs
RabbitMQ with rabbitmq_management):

    PYTHONPATH=src python3 tools/mgmt_compare.py [--rabbitmq http://127.0.0.1:15672]

kanin runs embedded, with its API on a free port. On RabbitMQ everything happens in a
scratch vhost and with scratch users, created first and deleted at the end; nothing else
there is touched. VM figures RabbitMQ adds (`garbage_collection`, `reductions`, ...)
are known to be absent from kanin and are not reported; the figures in `message_stats`
are compared by name (their values depend on timing).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from kanin.config import BrokerConfig
from kanin.testing.embedded import running_broker
from mgmt_http import Api

VHOST = "kanin-compare"
IGNORED = {
    "garbage_collection",
    "reductions",
    "reductions_details",
    "memory",
    "backing_queue_status",
    "idle_since",
    "consumer_capacity",
    "consumer_utilisation",
    "recoverable_slaves",
    "head_message_timestamp",
    "deliveries",
    "incoming",
    "outgoing",
    "consumer_details",
}
GRANT = {"configure": ".*", "write": ".*", "read": ".*"}
MESSAGE = {"properties": {}, "routing_key": "cq", "payload": "hi", "payload_encoding": "string"}

# (method, path, body, as user): {v} is the scratch vhost.
STEPS: list[tuple[str, str, Any, str]] = [
    ("PUT", "/api/vhosts/{v}", {}, "guest"),
    ("PUT", "/api/vhosts/{v}", {}, "guest"),
    ("PUT", "/api/users/cmp-mon", {"password": "pw", "tags": "monitoring"}, "guest"),
    ("PUT", "/api/users/cmp-mgmt", {"password": "pw", "tags": "management"}, "guest"),
    ("PUT", "/api/users/cmp-none", {"password": "pw", "tags": ""}, "guest"),
    ("PUT", "/api/permissions/{v}/cmp-mgmt", {**GRANT, "configure": "^m"}, "guest"),
    ("PUT", "/api/permissions/{v}/nobody", GRANT, "guest"),
    ("GET", "/api/permissions/{v}/cmp-mgmt", None, "guest"),
    ("GET", "/api/overview", None, "anonymous"),
    ("GET", "/api/overview", None, "wrong"),
    ("GET", "/api/overview", None, "cmp-none"),
    ("GET", "/api/overview?msg_rates_age=60&msg_rates_incr=5", None, "guest"),
    ("GET", "/api/users", None, "cmp-mgmt"),
    ("GET", "/api/nodes", None, "cmp-mgmt"),
    ("GET", "/api/queues/%2F", None, "cmp-mgmt"),
    ("PUT", "/api/queues/{v}/q1", {}, "cmp-mgmt"),
    ("PUT", "/api/queues/{v}/mq", {}, "cmp-mgmt"),
    ("GET", "/api/whoami", None, "cmp-mgmt"),
    ("PUT", "/api/queues/{v}/cq", {"durable": "true", "arguments": {"x-max-length": 10}}, "guest"),
    ("PUT", "/api/queues/{v}/cq", {"durable": True, "arguments": {"x-max-length": 10}}, "guest"),
    ("PUT", "/api/queues/{v}/cq", {"durable": False}, "guest"),
    ("PUT", "/api/queues/{v}/bad", {"arguments": {"x-max-length": "ten"}}, "guest"),
    ("PUT", "/api/queues/{v}/amq.q", {}, "guest"),
    ("PUT", "/api/queues/nowhere/q", {}, "guest"),
    ("PUT", "/api/exchanges/{v}/cx", {"type": "topic", "durable": True}, "guest"),
    ("PUT", "/api/exchanges/{v}/cx", {"type": "direct", "durable": True}, "guest"),
    ("PUT", "/api/exchanges/{v}/cy", {"type": "nosuch"}, "guest"),
    ("DELETE", "/api/exchanges/{v}/amq.direct", None, "guest"),
    ("POST", "/api/bindings/{v}/e/cx/q/cq", {"routing_key": "a.b"}, "guest"),
    ("POST", "/api/bindings/{v}/e/cx/q/nosuch", {"routing_key": "a.b"}, "guest"),
    ("GET", "/api/bindings/{v}/e/cx/q/cq", None, "guest"),
    ("GET", "/api/bindings/{v}/e/cx/q/cq/a.b", None, "guest"),
    ("POST", "/api/exchanges/{v}/amq.default/publish", MESSAGE, "guest"),
    ("POST", "/api/exchanges/{v}/amq.default/publish", {**MESSAGE, "routing_key": "x"}, "guest"),
    ("POST", "/api/exchanges/{v}/nosuch/publish", MESSAGE, "guest"),
    ("GET", "/api/queues/{v}/cq", None, "guest"),
    ("GET", "/api/exchanges/{v}/cx", None, "guest"),
    ("GET", "/api/vhosts/{v}", None, "guest"),
    (
        "POST",
        "/api/queues/{v}/cq/get",
        {"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto"},
        "guest",
    ),
    (
        "POST",
        "/api/queues/{v}/cq/get",
        {"count": 1, "ackmode": "ack_requeue_true", "encoding": "x"},
        "guest",
    ),
    ("POST", "/api/queues/{v}/nosuch/get", {"count": 1, "ackmode": "ack_requeue_true"}, "guest"),
    ("DELETE", "/api/queues/{v}/cq/contents", None, "guest"),
    ("DELETE", "/api/exchanges/{v}/cx?if-unused=true", None, "guest"),
    ("GET", "/api/aliveness-test/{v}", None, "guest"),
    ("GET", "/api/health/checks/alarms", None, "cmp-mon"),
    ("GET", "/api/health/checks/virtual-hosts", None, "guest"),
    ("GET", "/api/queues?page=99&page_size=2", None, "guest"),
    ("GET", "/api/nosuchthing", None, "guest"),
    ("DELETE", "/api/queues/{v}/nosuch", None, "guest"),
    ("DELETE", "/api/queues/{v}/cq", None, "guest"),
    ("DELETE", "/api/users/cmp-mon", None, "guest"),
    ("DELETE", "/api/users/cmp-mgmt", None, "guest"),
    ("DELETE", "/api/users/cmp-none", None, "guest"),
    ("DELETE", "/api/users/cmp-none", None, "guest"),
    ("DELETE", "/api/vhosts/{v}", None, "guest"),
    ("GET", "/api/vhosts/{v}", None, "guest"),
]


def _as(api: Api, who: str) -> Api:
    if who in ("guest", "anonymous"):
        return api
    if who == "wrong":
        return api.as_user("guest", "wrong")
    return api.as_user(who, "pw")


def _keys(value: Any) -> set[str]:
    if isinstance(value, list):
        return set().union(*(_keys(item) for item in value)) if value else set()
    if isinstance(value, dict):
        keys = {key for key in value if key not in IGNORED and not key.endswith("_details")}
        stats = value.get("message_stats")
        if isinstance(stats, dict):
            keys |= {f"message_stats.{key}" for key in stats if not key.endswith("_details")}
        return keys
    return set()


def _json(text: str) -> Any:
    import json

    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


def compare(rabbit: Api, kanin: Api) -> int:
    differences = 0
    for method, path, body, who in STEPS:
        path = path.replace("{v}", VHOST)
        answers = []
        for api in (rabbit, kanin):
            if who == "anonymous":
                reply = _as(api, who).request(method, path, body, auth=False)
            else:
                reply = _as(api, who).request(method, path, body)
            answers.append((reply.status, _json(reply.text)))
            time.sleep(0.05)
        (r_status, r_body), (k_status, k_body) = answers
        notes = []
        if r_status != k_status:
            notes.append(f"status RabbitMQ {r_status}, kanin {k_status}")
        missing = _keys(r_body) - _keys(k_body)
        if missing and k_status < 300:
            notes.append(f"fields kanin lacks: {sorted(missing)}")
        if r_status >= 400 and r_body != k_body:
            notes.append(f"body RabbitMQ {r_body!r}, kanin {k_body!r}")
        print(f"{'DIFF' if notes else 'same'} {method} {path} ({who})")
        for note in notes:
            print(f"     {note}")
        differences += bool(notes)
    return differences


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rabbitmq", default="http://127.0.0.1:15672")
    args = parser.parse_args()
    rabbit = Api(args.rabbitmq)
    with running_broker(BrokerConfig(mgmt_port=0)) as embedded:
        differences = compare(rabbit, Api(embedded.mgmt_url))
    print(f"{differences} of {len(STEPS)} requests differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
