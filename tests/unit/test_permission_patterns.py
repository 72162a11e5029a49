"""Permission patterns as RabbitMQ applies them, and the answer cache in front of them."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from kanin.core import auth
from kanin.core.auth import Permission


def test_patterns_are_searched_not_anchored() -> None:
    permission = Permission(configure="lice", write="^alice-", read="-x$")
    assert permission.allows("configure", "alice-q")
    assert permission.allows("configure", "xlicex")
    assert permission.allows("write", "alice-q")
    assert not permission.allows("write", "malice-q")
    assert permission.allows("read", "a-x")
    assert not permission.allows("read", "a-x-y")


def test_empty_pattern_is_caret_dollar() -> None:
    permission = Permission(configure="", write="", read="")
    for name in ("q", "amq.default", "amq.gen-abc", " "):
        assert not permission.allows("configure", name)
    # RabbitMQ's "^$" would match an empty name, which no checked resource has.
    assert permission.allows("read", "")


def test_answers_depend_on_kind_and_name_only() -> None:
    permission = Permission(configure="^a", write="^b", read="^c")
    for _ in range(2):  # the second round comes from the cache
        assert [permission.allows(kind, "a") for kind in ("configure", "write", "read")] == [
            True,
            False,
            False,
        ]
        assert [permission.allows(kind, "b") for kind in ("configure", "write", "read")] == [
            False,
            True,
            False,
        ]


def test_new_permissions_never_see_old_answers() -> None:
    store = auth.UserStore()
    user = store.add_user("u", "pw")
    store.set_permissions("u", "/", Permission(write="^a"))
    assert user.permissions["/"].allows("write", "a1")
    store.set_permissions("u", "/", Permission(write="^b"))
    assert not user.permissions["/"].allows("write", "a1")


def test_answers_stay_right_when_the_cache_fills() -> None:
    permission = Permission(write="7$")
    names = [f"n{i}" for i in range(auth._MAX_ANSWERS + 50)]
    for _ in range(2):
        assert [n for n in names if permission.allows("write", n)] == [
            n for n in names if n.endswith("7")
        ]
    assert len(permission._answers) <= auth._MAX_ANSWERS


@given(
    pattern=st.sampled_from(["", ".*", "^a", "a", "b$", "^a.c$", "[ab]+", "x|y"]),
    names=st.lists(st.text(alphabet="abcxy.-", max_size=5), max_size=20),
)
def test_cached_answers_equal_a_fresh_search(pattern: str, names: list[str]) -> None:
    permission = Permission(pattern, pattern, pattern)
    expected = re.compile(pattern or "^$")
    for name in names + names:
        assert permission.allows("read", name) == (expected.search(name) is not None)
