"""Drive kanin with RabbitMQ's own tools and move definitions both ways between RabbitMQ
3.10 and kanin. Run by hand; not part of the test suite (it needs RabbitMQ with
rabbitmq_management on 127.0.0.1:15672, and pika):

    python3 tools/rabbitmq_roundtrip.py [--rabbitmq http://127.0.0.1:15672] [--amqp-port 5672]

It starts its own `kanin server` (this checkout's, a temporary data directory, free
ports) and then:
1. downloads `rabbitmqadmin` from RabbitMQ's management plugin (/cli/rabbitmqadmin) into a
   temporary directory, and with it lists, declares, publishes to, gets from and deletes
   objects on kanin, checking each answer;
2. makes on RabbitMQ a user with a password, a vhost, permissions, queues (classic and
   quorum), exchanges, bindings and a policy; exports RabbitMQ's definitions and imports
   them into kanin (POST /api/definitions); logs in to kanin over AMQP as that user with
   that password and uses what was imported; exports kanin's definitions, renames that
   vhost and user so nothing clashes, imports them into RabbitMQ and logs in there too.
Everything it made on RabbitMQ is deleted at the end, whatever happened; nothing else
there is touched. Each step prints one line; the exit status is 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pika

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from mgmt_http import Api, q  # noqa: E402 (tests/ is put on the path just above)

TOKEN = secrets.token_hex(3)
VHOST, USER, PASSWORD = f"rt-vhost-{TOKEN}", f"rt-user-{TOKEN}", f"rt-pw-{TOKEN}"
BACK_VHOST, BACK_USER = VHOST + "-back", USER + "-back"
GRANT = {"configure": ".*", "write": ".*", "read": ".*"}
POLICY = {
    "pattern": "^rt\\.capped",
    "apply-to": "queues",
    "priority": 1,
    "definition": {"max-length": 3, "message-ttl": 600000},
}


class Checks:
    """Prints each check as it runs; remembers whether any failed."""

    def __init__(self) -> None:
        self.failed = 0

    def check(self, what: str, ok: bool, detail: Any = "") -> bool:
        print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail != "" else ""))
        self.failed += not ok
        return ok


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def kanin_server(data_dir: Path) -> Iterator[tuple[int, Api]]:
    """This checkout's `kanin server` on free ports; (AMQP port, its API as guest)."""
    amqp, mgmt = free_port(), free_port()
    command = [sys.executable, "-m", "kanin", "server", "--bind", "127.0.0.1"]
    command += ["--port", str(amqp), "--mgmt-port", str(mgmt), "--prometheus-port", "0"]
    command += ["--data-dir", str(data_dir)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    log = open(data_dir.parent / "kanin.log", "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(command, env=env, stderr=log, stdout=log)
    try:
        api = Api(f"http://127.0.0.1:{mgmt}")
        wait_until(lambda: _answers(api), "kanin's management API to answer")
        yield amqp, api
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _answers(api: Api) -> bool:
    try:
        return bool(api.get("/api/overview").status == 200)
    except OSError:
        return False


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.1)


# -- 1. rabbitmqadmin against kanin ------------------------------------------------------------


def download_rabbitmqadmin(rabbitmq: str, directory: Path) -> Path:
    path = directory / "rabbitmqadmin"
    with urllib.request.urlopen(f"{rabbitmq}/cli/rabbitmqadmin", timeout=10) as response:
        path.write_bytes(response.read())
    return path


def admin_steps(checks: Checks, admin: Path, mgmt_port: int, workdir: Path) -> None:
    def run(*args: str) -> tuple[int, str]:
        command = [sys.executable, str(admin), "--host=127.0.0.1", f"--port={mgmt_port}"]
        command += ["--username=guest", "--password=guest", "--format=raw_json", *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
        return done.returncode, (done.stdout + done.stderr).strip()

    def listed(kind: str, field: str = "name") -> list[Any]:
        code, out = run("list", kind)
        return [item[field] for item in json.loads(out)] if code == 0 else [f"error: {out}"]

    checks.check("rabbitmqadmin list users", listed("users") == ["guest"], listed("users"))
    exchanges = listed("exchanges")
    checks.check("rabbitmqadmin list exchanges", "amq.topic" in exchanges, len(exchanges))
    declares: tuple[tuple[str, ...], ...] = (
        ("declare", "queue", "name=rt.work", "durable=true"),
        ("declare", "exchange", "name=rt.ex", "type=direct", "durable=true"),
        ("declare", "binding", "source=rt.ex", "destination=rt.work", "routing_key=go"),
        (
            "declare",
            "policy",
            "name=rt-cap",
            "pattern=^rt\\.work$",
            'definition={"max-length":2}',
            "priority=5",
            "apply-to=queues",
        ),
    )
    for args in declares:
        code, out = run(*args)
        checks.check("rabbitmqadmin " + " ".join(args[:2]), code == 0, out)
    checks.check("rabbitmqadmin list queues", listed("queues") == ["rt.work"], listed("queues"))
    checks.check("rabbitmqadmin list policies", listed("policies") == ["rt-cap"])
    bindings = [(b["source"], b["routing_key"]) for b in json.loads(run("list", "bindings")[1])]
    checks.check("rabbitmqadmin list bindings", ("rt.ex", "go") in bindings, bindings)
    for n in range(3):
        code, out = run("publish", "exchange=rt.ex", "routing_key=go", f"payload=m{n}")
        checks.check(f"rabbitmqadmin publish m{n}", code == 0, out)
    code, out = run("get", "queue=rt.work", "count=5", "ackmode=ack_requeue_false")
    payloads = [m["payload"] for m in json.loads(out)] if code == 0 else out
    checks.check("rabbitmqadmin get (max-length 2 by policy)", payloads == ["m1", "m2"], payloads)
    code, out = run("export", str(workdir / "kanin-admin-export.json"))
    exported = json.loads((workdir / "kanin-admin-export.json").read_text()) if code == 0 else {}
    names = [p["name"] for p in exported.get("policies", [])]
    checks.check("rabbitmqadmin export", names == ["rt-cap"], out)
    deletes: tuple[tuple[str, ...], ...] = (
        ("delete", "policy", "name=rt-cap"),
        (
            "delete",
            "binding",
            "source=rt.ex",
            "destination_type=queue",
            "destination=rt.work",
            "properties_key=go",
        ),
        ("delete", "queue", "name=rt.work"),
        ("delete", "exchange", "name=rt.ex"),
    )
    for args in deletes:
        code, out = run(*args)
        checks.check("rabbitmqadmin " + " ".join(args[:2]), code == 0, out)
    checks.check("rabbitmqadmin list queues after delete", listed("queues") == [])


# -- 2. definitions both ways ------------------------------------------------------------------


def make_on_rabbitmq(checks: Checks, rabbit: Api) -> None:
    v = q(VHOST)
    steps: list[tuple[str, str, Any]] = [
        ("PUT", f"/api/vhosts/{v}", {}),
        ("PUT", f"/api/users/{USER}", {"password": PASSWORD, "tags": "management"}),
        ("PUT", f"/api/permissions/{v}/{USER}", GRANT),
        ("PUT", f"/api/permissions/{v}/guest", GRANT),
        ("PUT", f"/api/queues/{v}/rt.orders", {"durable": True}),
        ("PUT", f"/api/queues/{v}/rt.capped", {"durable": True, "arguments": {"x-max-length": 10}}),
        (
            "PUT",
            f"/api/queues/{v}/rt.quorum",
            {"durable": True, "arguments": {"x-queue-type": "quorum"}},
        ),
        ("PUT", f"/api/exchanges/{v}/rt.topic", {"type": "topic", "durable": True}),
        ("PUT", f"/api/exchanges/{v}/rt.fan", {"type": "fanout", "durable": True}),
        ("POST", f"/api/bindings/{v}/e/rt.topic/q/rt.orders", {"routing_key": "order.*"}),
        ("POST", f"/api/bindings/{v}/e/rt.topic/e/rt.fan", {"routing_key": "#"}),
        ("POST", f"/api/bindings/{v}/e/rt.fan/q/rt.capped", {"routing_key": ""}),
        ("POST", f"/api/bindings/{v}/e/rt.fan/q/rt.quorum", {"routing_key": ""}),
        ("PUT", f"/api/policies/{v}/rt-policy", POLICY),
    ]
    for method, path, body in steps:
        reply = rabbit.request(method, path, body)
        checks.check(f"RabbitMQ {method} {path}", reply.status in (201, 204), reply.status)


def ours(document: dict[str, Any], vhost: str, user: str) -> dict[str, Any]:
    """Only what belongs to one vhost and one user (nothing else is sent back)."""
    picked: dict[str, Any] = {"vhosts": [v for v in document["vhosts"] if v["name"] == vhost]}
    picked["users"] = [u for u in document["users"] if u["name"] == user]
    picked["permissions"] = [
        p for p in document["permissions"] if p["vhost"] == vhost and p["user"] == user
    ]
    for section in ("policies", "queues", "exchanges", "bindings"):
        picked[section] = [item for item in document[section] if item["vhost"] == vhost]
    return picked


def renamed(document: dict[str, Any]) -> dict[str, Any]:
    """kanin's export of our vhost and user, under the names they go back to RabbitMQ as."""
    text = json.dumps(ours(document, VHOST, USER))
    return dict(
        json.loads(
            text.replace(f'"{VHOST}"', f'"{BACK_VHOST}"').replace(f'"{USER}"', f'"{BACK_USER}"')
        )
    )


def use_as_user(checks: Checks, where: str, port: int, vhost: str, user: str) -> None:
    """Log in with the RabbitMQ password; the imported topology routes, the policy caps."""
    credentials = pika.PlainCredentials(user, PASSWORD)
    params = pika.ConnectionParameters("127.0.0.1", port, vhost, credentials, connection_attempts=1)
    with pika.BlockingConnection(params) as connection:
        checks.check(f"{where}: AMQP login as {user} in {vhost}", True)
        channel = connection.channel()
        for n in range(5):
            channel.basic_publish("rt.topic", "order.new", b"o%d" % n)
        connection.process_data_events(time_limit=0.5)
        counts = {
            name: channel.queue_declare(name, passive=True).method.message_count
            for name in ("rt.orders", "rt.capped", "rt.quorum")
        }
        # rt.capped: x-max-length 10 and the policy's 3, the lower wins
        wanted = {"rt.orders": 5, "rt.capped": 3, "rt.quorum": 5}
        checks.check(f"{where}: routed through the imported bindings", counts == wanted, counts)
        for name in counts:
            channel.queue_purge(name)


def definitions_steps(checks: Checks, rabbit: Api, kanin: Api, kanin_port: int, amqp: int) -> None:
    make_on_rabbitmq(checks, rabbit)
    exported = rabbit.get("/api/definitions").json
    names = [p["name"] for p in exported["policies"] if p["vhost"] == VHOST]
    checks.check("RabbitMQ's export holds our policy", names == ["rt-policy"], names)
    reply = kanin.post("/api/definitions", exported)
    checks.check("kanin imports RabbitMQ's whole export", reply.status == 204, reply.text)
    if reply.status != 204:  # what else is on that RabbitMQ may be what kanin refuses
        reply = kanin.post("/api/definitions", ours(exported, VHOST, USER))
        checks.check("kanin imports our vhost and user from it", reply.status == 204, reply.text)
    policy = kanin.get(f"/api/queues/{q(VHOST)}/rt.capped").json.get("policy")
    checks.check("kanin applies the imported policy to rt.capped", policy == "rt-policy", policy)
    use_as_user(checks, "kanin", kanin_port, VHOST, USER)
    back = renamed(kanin.get("/api/definitions").json)
    reply = rabbit.post("/api/definitions", back)
    checks.check(
        "RabbitMQ imports kanin's export (renamed)", reply.status in (200, 201, 204), reply.text
    )
    wait_until(
        lambda: rabbit.get(f"/api/queues/{q(BACK_VHOST)}/rt.quorum").status == 200,
        "RabbitMQ to make the imported queues",
    )
    policies = [p["name"] for p in rabbit.get(f"/api/policies/{q(BACK_VHOST)}").json]
    checks.check("RabbitMQ has kanin's policy", policies == ["rt-policy"], policies)
    use_as_user(checks, "RabbitMQ", amqp, BACK_VHOST, BACK_USER)


def clean_up_rabbitmq(rabbit: Api) -> None:
    for vhost in (VHOST, BACK_VHOST):
        rabbit.delete(f"/api/vhosts/{q(vhost)}")
    for user in (USER, BACK_USER):
        rabbit.delete(f"/api/users/{user}")
    print(f"cleaned up on RabbitMQ: vhosts {VHOST}, {BACK_VHOST}; users {USER}, {BACK_USER}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rabbitmq", default="http://127.0.0.1:15672")
    parser.add_argument("--amqp-port", type=int, default=5672, help="RabbitMQ's AMQP port")
    options = parser.parse_args()
    rabbit = Api(options.rabbitmq)
    checks = Checks()
    version = rabbit.get("/api/overview").json["rabbitmq_version"]
    print(f"RabbitMQ {version} at {options.rabbitmq}; scratch names end in {TOKEN}")
    with tempfile.TemporaryDirectory(prefix="kanin-roundtrip-") as temporary:
        workdir = Path(temporary)
        (workdir / "data").mkdir()
        admin = download_rabbitmqadmin(options.rabbitmq, workdir)
        print(f"downloaded rabbitmqadmin ({admin.stat().st_size} bytes) into a temporary dir")
        with kanin_server(workdir / "data") as (kanin_port, kanin):
            print(f"kanin server: AMQP {kanin_port}, management API {kanin.base}")
            admin_steps(checks, admin, int(kanin.base.rsplit(":", 1)[1]), workdir)
            try:
                definitions_steps(checks, rabbit, kanin, kanin_port, options.amqp_port)
            finally:
                clean_up_rabbitmq(rabbit)
    print(f"{checks.failed} check(s) failed" if checks.failed else "all checks passed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
