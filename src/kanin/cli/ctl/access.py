"""Users, virtual hosts and permissions, as rabbitmqctl manages them."""

from __future__ import annotations

import argparse
from typing import Any

from kanin.cli.ctl.errors import EX_DATAERR, EX_NOUSER, ApiError, CtlError
from kanin.cli.ctl.http import Api, segment
from kanin.cli.ctl.output import Columns, Output
from kanin.cli.ctl.parser import Commands

USERS = Columns("list_users", ("user", "tags"), fields={"user": "name"})
VHOSTS = Columns(
    "list_vhosts",
    ("name",),
    ("name", "description", "tags", "tracing", "cluster_state", "default_queue_type"),
)
PERMISSIONS = Columns("list_permissions", ("user", "configure", "write", "read"))
USER_PERMISSIONS = Columns("list_user_permissions", ("vhost", "configure", "write", "read"))


def register(commands: Commands) -> None:
    add = commands.add
    user = add("add_user", add_user, "create a user (no tags, no permissions)")
    user.add_argument("user", metavar="username")
    user.add_argument("secret", metavar="password")
    add("delete_user", delete_user, "delete a user").add_argument("user", metavar="username")
    change = add("change_password", change_password, "set a user's password")
    change.add_argument("user", metavar="username")
    change.add_argument("secret", metavar="password")
    tags = add("set_user_tags", set_user_tags, "replace a user's tags (none: no tags)")
    tags.add_argument("user", metavar="username")
    tags.add_argument("tags", nargs="*", metavar="tag", help="administrator, monitoring, ...")
    commands.listing("list_users", list_users, "users and their tags")
    add("add_vhost", add_vhost, "create a virtual host").add_argument("name")
    add("delete_vhost", delete_vhost, "delete a virtual host and all in it").add_argument("name")
    commands.listing("list_vhosts", list_vhosts, "virtual hosts")
    grant = add("set_permissions", set_permissions, "set a user's permissions", vhost=True)
    grant.add_argument("user", metavar="username")
    for kind in ("configure", "write", "read"):
        grant.add_argument(kind, help=f"regular expression of the names it may {kind}")
    clear = add("clear_permissions", clear_permissions, "remove a user's permissions", vhost=True)
    clear.add_argument("user", metavar="username")
    commands.listing(
        "list_permissions", list_permissions, "permissions in a virtual host", vhost=True
    )
    mine = add("list_user_permissions", list_user_permissions, "a user's permissions")
    mine.add_argument("user", metavar="username")


def _user(api: Api, name: str) -> dict[str, Any]:
    path = f"/api/users/{segment(name)}"
    found = api.call("GET", path, missing=_no_user(name), missing_exit=EX_NOUSER)
    assert isinstance(found.body, dict)
    return found.body


def _no_user(name: str) -> str:
    return f"no user {name!r}"


def _tags(user: dict[str, Any]) -> str:
    tags = user.get("tags", "")
    return ",".join(tags) if isinstance(tags, list) else str(tags)


def add_user(api: Api, args: argparse.Namespace, out: Output) -> None:
    path = f"/api/users/{segment(args.user)}"
    try:
        api.call("GET", path)
    except ApiError as error:
        if error.status != 404:
            raise
    else:  # PUT would replace the user: rabbitmqctl refuses instead
        raise CtlError(f"user {args.user!r} already exists", EX_DATAERR)
    api.call("PUT", path, {"password": args.secret, "tags": ""})
    out.done(f"Added user {args.user!r}.")


def delete_user(api: Api, args: argparse.Namespace, out: Output) -> None:
    path = f"/api/users/{segment(args.user)}"
    api.call("DELETE", path, missing=_no_user(args.user), missing_exit=EX_NOUSER)
    out.done(f"Deleted user {args.user!r}.")


def change_password(api: Api, args: argparse.Namespace, out: Output) -> None:
    user = _user(api, args.user)  # a PUT sets the tags too: keep the user's
    body = {"password": args.secret, "tags": _tags(user)}
    api.call("PUT", f"/api/users/{segment(args.user)}", body)
    out.done(f"Changed the password of {args.user!r}.")


def set_user_tags(api: Api, args: argparse.Namespace, out: Output) -> None:
    user = _user(api, args.user)  # the hash goes back unchanged: the password stays
    body = {"tags": ",".join(args.tags), "password_hash": user.get("password_hash", "")}
    if "hashing_algorithm" in user:
        body["hashing_algorithm"] = user["hashing_algorithm"]
    api.call("PUT", f"/api/users/{segment(args.user)}", body)
    out.done(f"Set the tags of {args.user!r} to [{', '.join(args.tags)}].")


def list_users(api: Api, args: argparse.Namespace, out: Output) -> None:
    out.table(USERS, args.columns, api.get("/api/users"))


def add_vhost(api: Api, args: argparse.Namespace, out: Output) -> None:
    api.call("PUT", f"/api/vhosts/{segment(args.name)}", {})
    out.done(f"Added vhost {args.name!r}.")


def delete_vhost(api: Api, args: argparse.Namespace, out: Output) -> None:
    api.call("DELETE", f"/api/vhosts/{segment(args.name)}", missing=f"no vhost {args.name!r}")
    out.done(f"Deleted vhost {args.name!r}.")


def list_vhosts(api: Api, args: argparse.Namespace, out: Output) -> None:
    out.table(VHOSTS, args.columns, api.get("/api/vhosts"))


def set_permissions(api: Api, args: argparse.Namespace, out: Output) -> None:
    path = f"/api/permissions/{segment(args.vhost)}/{segment(args.user)}"
    body = {"configure": args.configure, "write": args.write, "read": args.read}
    try:
        api.call("PUT", path, body)
    except ApiError as error:
        if error.reason != "vhost_or_user_not_found":
            raise
        _user(api, args.user)  # which of the two: no user is EX_NOUSER
        raise CtlError(f"no vhost {args.vhost!r}", EX_DATAERR) from None
    out.done(f"Set permissions of {args.user!r} in vhost {args.vhost!r}.")


def clear_permissions(api: Api, args: argparse.Namespace, out: Output) -> None:
    path = f"/api/permissions/{segment(args.vhost)}/{segment(args.user)}"
    missing = f"user {args.user!r} has no permissions in vhost {args.vhost!r}"
    api.call("DELETE", path, missing=missing)
    out.done(f"Cleared permissions of {args.user!r} in vhost {args.vhost!r}.")


def list_permissions(api: Api, args: argparse.Namespace, out: Output) -> None:
    path = f"/api/vhosts/{segment(args.vhost)}/permissions"
    rows = api.call("GET", path, missing=f"no vhost {args.vhost!r}").body
    out.table(PERMISSIONS, args.columns, rows)


def list_user_permissions(api: Api, args: argparse.Namespace, out: Output) -> None:
    path = f"/api/users/{segment(args.user)}/permissions"
    rows = api.call("GET", path, missing=_no_user(args.user), missing_exit=EX_NOUSER).body
    out.table(USER_PERMISSIONS, (), rows)
