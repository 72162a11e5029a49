"""`kanin ctl` set_policy, clear_policy, list_policies: the requests they send (RabbitMQ
3.10's /api/policies shape) and their answers to a server without that API, checked
against a small stand-in HTTP server; and against kanin itself once kanin has the API."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ctl_run import Ctl
from mgmt_http import Api

EX_USAGE, EX_DATAERR, EX_UNAVAILABLE = 64, 65, 69
NOT_FOUND = (404, {"error": "Object Not Found", "reason": "Not Found"})


@dataclass
class StandIn:
    """Answers each (method, path) as told, else 404 as RabbitMQ's API does; keeps what
    it was sent."""

    answers: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    otherwise: tuple[int, Any] = NOT_FOUND
    received: list[tuple[str, str, Any]] = field(default_factory=list)


@pytest.fixture
def stand_in() -> Iterator[tuple[StandIn, Ctl]]:
    state = StandIn()

    class Handler(BaseHTTPRequestHandler):
        def answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            state.received.append((self.command, self.path, body))
            status, reply = state.answers.get((self.command, self.path), state.otherwise)
            data = json.dumps(reply).encode() if reply is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_DELETE = answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, Ctl(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_set_policy_sends_rabbitmqs_shape(stand_in: tuple[StandIn, Ctl]) -> None:
    state, ctl = stand_in
    state.answers[("PUT", "/api/policies/shop/cap")] = (201, None)
    ran = ctl(
        *("set_policy", "-p", "shop", "--priority", "3", "--apply-to", "queues"),
        *("cap", "^orders\\.", '{"max-length": 1000}'),
    )
    assert (ran.code, ran.out) == (0, "Set policy 'cap' in vhost 'shop'.\n")
    body = {
        "pattern": "^orders\\.",
        "definition": {"max-length": 1000},
        "priority": 3,
        "apply-to": "queues",
    }
    assert state.received == [("PUT", "/api/policies/shop/cap", body)]


def test_list_and_clear_policy_call_the_api(stand_in: tuple[StandIn, Ctl]) -> None:
    state, ctl = stand_in
    policy = {
        "vhost": "/",
        "name": "cap",
        "pattern": ".*",
        "apply-to": "all",
        "definition": {"max-length": 5},
        "priority": 0,
    }
    state.answers[("GET", "/api/policies/%2F")] = (200, [policy])
    state.answers[("DELETE", "/api/policies/%2F/cap")] = (204, None)
    assert ctl("list_policies").rows == [
        ["vhost", "name", "pattern", "apply-to", "definition", "priority"],
        ["/", "cap", ".*", "all", '{"max-length":5}', "0"],
    ]
    assert ctl("list_policies", "name", "--json").json == [{"name": "cap"}]
    assert ctl("clear_policy", "cap").code == 0
    assert state.received[-1] == ("DELETE", "/api/policies/%2F/cap", None)


@pytest.mark.parametrize("status", [404, 405])
def test_a_server_without_policies_is_named(stand_in: tuple[StandIn, Ctl], status: int) -> None:
    state, ctl = stand_in
    state.otherwise = (status, {"error": "nope", "reason": "Not Found"})
    for command in (
        ("set_policy", "cap", ".*", '{"max-length": 5}'),
        ("clear_policy", "cap"),
        ("list_policies",),
    ):
        ran = ctl(*command)
        assert ran.code == EX_UNAVAILABLE, ran.err
        assert f"the server at {ctl.url} has no policies API (/api/policies answered {status}" in (
            ran.err
        )


def test_with_the_api_a_404_is_a_missing_vhost_or_policy(stand_in: tuple[StandIn, Ctl]) -> None:
    state, ctl = stand_in
    state.answers[("GET", "/api/policies")] = (200, [])
    state.answers[("GET", "/api/vhosts/%2F")] = (200, {"name": "/"})
    missing_vhost = ctl("set_policy", "-p", "nowhere", "cap", ".*", "{}")
    assert (missing_vhost.code, missing_vhost.err) == (
        EX_DATAERR,
        "kanin ctl: set_policy: no vhost 'nowhere'\n",
    )
    missing_policy = ctl("clear_policy", "cap")
    assert (missing_policy.code, missing_policy.err) == (
        EX_DATAERR,
        "kanin ctl: clear_policy: no policy 'cap' in vhost '/'\n",
    )


def test_set_policy_arguments_are_checked_before_any_request(
    stand_in: tuple[StandIn, Ctl],
) -> None:
    state, ctl = stand_in
    bad_json = ctl("set_policy", "cap", ".*", "{max-length: 5}")
    assert bad_json.code == EX_DATAERR
    assert "kanin ctl: set_policy: definition: not JSON" in bad_json.err
    assert ctl("set_policy", "cap", ".*", "[5]").code == EX_DATAERR
    assert ctl("set_policy", "--apply-to", "topics", "cap", ".*", "{}").code == EX_USAGE
    assert ctl("set_policy", "--priority", "high", "cap", ".*", "{}").code == EX_USAGE
    assert ctl("set_policy", "cap", ".*").code == EX_USAGE  # no definition
    assert state.received == []


@pytest.mark.kanin_only
def test_policies_round_trip_on_kanin(kanin: Any, ctl: Ctl) -> None:
    if Api(kanin.mgmt_url).get("/api/policies").status == 404:
        pytest.skip("this kanin has no /api/policies yet")
    definition = '{"max-length": 2}'
    assert ctl("set_policy", "cap", "^orders$", definition, "--apply-to", "queues").code == 0
    assert ctl("list_policies", "name", "pattern", "definition", "--json").json == [
        {"name": "cap", "pattern": "^orders$", "definition": {"max-length": 2}}
    ]
    assert ctl("clear_policy", "cap").code == 0
    assert ctl("list_policies", "--json").json == []
