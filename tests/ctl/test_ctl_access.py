"""`kanin ctl` managing users, vhosts and permissions of a real broker, as a process."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from ctl_run import Ctl

pytestmark = pytest.mark.kanin_only

EX_DATAERR, EX_NOUSER, EX_NOPERM, EX_USAGE = 65, 67, 77, 64


def test_a_user_is_added_tagged_given_a_new_password_and_deleted(ctl: Ctl) -> None:
    added = ctl("add_user", "alice", "pw1")
    assert (added.code, added.out) == (0, "Added user 'alice'.\n")
    assert {"user": "alice", "tags": []} in ctl("list_users", "--json").json
    assert ctl("set_user_tags", "alice", "administrator", "monitoring").code == 0
    alice = ctl.as_user("alice", "pw1")
    assert alice("ping").code == 0  # her password survived the new tags
    assert ctl("change_password", "alice", "pw2").code == 0
    assert alice("ping").code == EX_NOPERM
    assert ctl.as_user("alice", "pw2")("ping").code == 0
    # ... and her tags survived the new password.
    users = {row["user"]: row["tags"] for row in ctl("list_users", "--json").json}
    assert users == {"guest": ["administrator"], "alice": ["administrator", "monitoring"]}
    assert ctl("delete_user", "alice").code == 0
    assert [row[0] for row in ctl("list_users").rows] == ["user", "guest"]


def test_set_user_tags_without_tags_clears_them(ctl: Ctl) -> None:
    ctl("add_user", "bob", "pw")
    ctl("set_user_tags", "bob", "management")
    assert ctl("set_user_tags", "bob").code == 0
    assert {"user": "bob", "tags": []} in ctl("list_users", "--json").json


@pytest.mark.parametrize(
    "command",
    [
        ("delete_user", "nobody"),
        ("change_password", "nobody", "pw"),
        ("set_user_tags", "nobody", "administrator"),
        ("list_user_permissions", "nobody"),
        ("set_permissions", "nobody", ".*", ".*", ".*"),
    ],
)
def test_a_missing_user_is_named_with_rabbitmqctls_exit_status(
    ctl: Ctl, command: tuple[str, ...]
) -> None:
    ran = ctl(*command)
    assert ran.code == EX_NOUSER
    assert ran.err == f"kanin ctl: {command[0]}: no user 'nobody'\n"


def test_adding_a_user_that_exists_is_refused_and_changes_nothing(ctl: Ctl) -> None:
    ran = ctl("add_user", "guest", "other")
    assert ran.code == EX_DATAERR
    assert "user 'guest' already exists" in ran.err
    assert ctl("ping").code == 0  # guest's password is still guest


def test_vhosts_are_added_listed_and_deleted(ctl: Ctl) -> None:
    assert ctl("add_vhost", "orders").code == 0
    assert ctl("list_vhosts").rows == [["name"], ["/"], ["orders"]]
    assert ctl("delete_vhost", "orders").code == 0
    again = ctl("delete_vhost", "orders")
    assert (again.code, again.err) == (EX_DATAERR, "kanin ctl: delete_vhost: no vhost 'orders'\n")


def test_permissions_are_set_listed_and_cleared(ctl: Ctl, kanin: Any) -> None:
    ctl("add_user", "carol", "pw")
    ctl("add_vhost", "shop")
    assert ctl("set_permissions", "-p", "shop", "carol", "^carol-", "", ".*").code == 0
    assert ["carol", "^carol-", "", ".*"] in ctl("list_permissions", "-p", "shop").rows
    assert ctl("list_user_permissions", "carol", "--json").json == [
        {"vhost": "shop", "configure": "^carol-", "write": "", "read": ".*"}
    ]
    # The broker enforces them: carol may declare her own queues only.
    params = pika.ConnectionParameters(
        kanin.host, kanin.port, "shop", pika.PlainCredentials("carol", "pw")
    )
    with pika.BlockingConnection(params) as connection:
        connection.channel().queue_declare("carol-inbox")
    assert ctl("clear_permissions", "-p", "shop", "carol").code == 0
    assert ctl("list_user_permissions", "carol").rows == [["vhost", "configure", "write", "read"]]
    again = ctl("clear_permissions", "-p", "shop", "carol")
    assert again.code == EX_DATAERR
    assert "user 'carol' has no permissions in vhost 'shop'" in again.err


def test_permissions_in_a_missing_vhost_name_the_vhost(ctl: Ctl) -> None:
    ran = ctl("set_permissions", "-p", "nowhere", "guest", ".*", ".*", ".*")
    assert (ran.code, ran.err) == (EX_DATAERR, "kanin ctl: set_permissions: no vhost 'nowhere'\n")
    listed = ctl("list_permissions", "-p", "nowhere")
    assert (listed.code, listed.err) == (
        EX_DATAERR,
        "kanin ctl: list_permissions: no vhost 'nowhere'\n",
    )


def test_tables_take_columns_and_can_leave_out_the_header(ctl: Ctl) -> None:
    swapped = ctl("list_users", "tags", "user").rows
    assert swapped == [["tags", "user"], ["[administrator]", "guest"]]
    assert ctl("list_users", "--no-table-headers").rows == [["guest", "[administrator]"]]
    unknown = ctl("list_users", "user", "colour")
    assert unknown.code == EX_USAGE
    assert "unknown column(s) colour; columns: " in unknown.err


def test_a_user_without_the_administrator_tag_is_refused(ctl: Ctl) -> None:
    ctl("add_user", "dave", "pw")
    ctl("set_user_tags", "dave", "management")
    ran = ctl.as_user("dave", "pw")("list_users")
    assert ran.code == EX_NOPERM
    assert "refused user 'dave'" in ran.err
    assert "lacks the tag or permission" in ran.err
