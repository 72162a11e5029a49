"""Policies, as rabbitmqctl's set_policy, clear_policy and list_policies, over RabbitMQ
3.10's /api/policies (https://www.rabbitmq.com/parameters.html#policies). A server
without that API (404 or 405 where it should be) is named as such, rather than
reported as a missing vhost."""

from __future__ import annotations

import argparse
from typing import Any

from kanin.cli.ctl.errors import EX_UNAVAILABLE, ApiError, CtlError
from kanin.cli.ctl.http import Api, segment
from kanin.cli.ctl.output import Columns, Output
from kanin.cli.ctl.parser import Commands
from kanin.cli.ctl.topology import json_object

POLICIES = Columns(
    "list_policies", ("vhost", "name", "pattern", "apply-to", "definition", "priority")
)
APPLY_TO = ("all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams")


def register(commands: Commands) -> None:
    policy = commands.add("set_policy", set_policy, "set a policy", vhost=True)
    policy.add_argument("name")
    policy.add_argument("pattern", help="regular expression of the names it applies to")
    policy.add_argument("definition", help='JSON object: \'{"max-length": 1000}\'')
    policy.add_argument("--priority", type=int, default=0, help="higher wins (default 0)")
    policy.add_argument("--apply-to", choices=APPLY_TO, default="all", help="(default all)")
    clear = commands.add("clear_policy", clear_policy, "remove a policy", vhost=True)
    clear.add_argument("name")
    commands.listing("list_policies", list_policies, "policies of a virtual host", vhost=True)


def set_policy(api: Api, args: argparse.Namespace, out: Output) -> None:
    body = {
        "pattern": args.pattern,
        "definition": json_object(args.definition, "definition"),
        "priority": args.priority,
        "apply-to": args.apply_to,
    }
    _policy_call(api, "PUT", args.vhost, args.name, body)
    out.done(f"Set policy {args.name!r} in vhost {args.vhost!r}.")


def clear_policy(api: Api, args: argparse.Namespace, out: Output) -> None:
    _policy_call(api, "DELETE", args.vhost, args.name, None)
    out.done(f"Cleared policy {args.name!r} in vhost {args.vhost!r}.")


def list_policies(api: Api, args: argparse.Namespace, out: Output) -> None:
    rows = _policy_call(api, "GET", args.vhost, None, None)
    out.table(POLICIES, args.columns, rows)


def _policy_call(api: Api, method: str, vhost: str, name: str | None, body: Any) -> Any:
    path = f"/api/policies/{segment(vhost)}" + ("" if name is None else f"/{segment(name)}")
    try:
        return api.call(method, path, body).body
    except ApiError as error:
        if error.status not in (404, 405):
            raise
        _require_policies_api(api, error)
        if name is not None and method == "DELETE" and _vhost_exists(api, vhost):
            raise CtlError(f"no policy {name!r} in vhost {vhost!r}", error.exit_code) from None
        raise CtlError(f"no vhost {vhost!r}", error.exit_code) from None


def _require_policies_api(api: Api, error: ApiError) -> None:
    """The 404 or 405 was the API's absence if the list of all policies is missing too."""
    try:
        api.call("GET", "/api/policies")
    except ApiError as listing:
        if listing.status in (404, 405):
            raise CtlError(
                f"the server at {api.url} has no policies API "
                f"(/api/policies answered {listing.status}: {listing.reason})",
                EX_UNAVAILABLE,
            ) from None
        raise


def _vhost_exists(api: Api, vhost: str) -> bool:
    try:
        api.call("GET", f"/api/vhosts/{segment(vhost)}")
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return True
