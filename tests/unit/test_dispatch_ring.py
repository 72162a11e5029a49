"""DispatchRing (kanin/core/dispatch.py) on its own: priorities, turns, members that cannot
take a message set aside and given back, removal in either state."""

from __future__ import annotations

import pytest

from core_harness import take_turn
from kanin.core.dispatch import DispatchRing


class Members:
    """Which members can take a message now, and a ring over them."""

    def __init__(self, **priorities: int) -> None:
        self.ring: DispatchRing[str] = DispatchRing()
        self.full: set[str] = set()
        self.skipped: list[str] = []
        for name, priority in priorities.items():
            self.ring.add(name, priority)

    def choose(self) -> str | None:
        return take_turn(self.ring, lambda name: name not in self.full, self.skipped.append)

    def turns(self, count: int) -> list[str | None]:
        return [self.choose() for _ in range(count)]


def test_equal_priorities_take_turns_in_the_order_they_joined() -> None:
    members = Members(a=0, b=0, c=0)
    assert members.turns(7) == ["a", "b", "c", "a", "b", "c", "a"]


def test_a_new_member_gets_its_turn_after_those_already_waiting() -> None:
    members = Members(a=0, b=0)
    assert members.turns(1) == ["a"]
    members.ring.add("c", 0)
    assert members.turns(4) == ["b", "a", "c", "b"]


def test_the_highest_priority_takes_everything_while_it_can() -> None:
    members = Members(low=1, high=5, mid=3)
    assert members.turns(3) == ["high"] * 3
    members.full.add("high")
    assert members.turns(2) == ["mid", "mid"]
    assert members.skipped == ["high"]


def test_a_lower_priority_gets_messages_only_when_every_higher_one_is_full() -> None:
    members = Members(h1=9, h2=9, low=0)
    members.full.add("h1")
    assert members.turns(2) == ["h2", "h2"]
    members.full.add("h2")
    assert members.turns(2) == ["low", "low"]
    assert members.skipped == ["h1", "h2"]


def test_a_full_member_is_looked_at_once_until_it_is_enabled_again() -> None:
    members = Members(a=0, b=0, c=0)
    members.full.add("b")
    assert members.turns(4) == ["a", "c", "a", "c"]
    assert members.skipped == ["b"]
    assert not members.ring.is_enabled("b") and "b" in members.ring
    looked = members.ring.examined
    assert members.turns(10) == ["a", "c"] * 5
    assert members.ring.examined - looked == 10  # one look per turn: b is not asked again


def test_an_enabled_member_rejoins_at_the_back_of_its_priority() -> None:
    members = Members(a=0, b=0, c=0)
    members.full.add("a")
    assert members.turns(1) == ["b"]
    members.full.discard("a")
    assert members.ring.enable("a")
    assert not members.ring.enable("a")  # enabled already: nothing changes
    assert members.turns(4) == ["c", "b", "a", "c"]


def test_nothing_to_choose_when_every_member_is_full() -> None:
    members = Members(a=2, b=1)
    members.full.update({"a", "b"})
    assert members.choose() is None
    assert members.skipped == ["a", "b"]
    assert members.choose() is None
    assert members.skipped == ["a", "b"]  # set aside: not asked again
    assert len(members.ring) == 2


def test_removal_of_enabled_and_disabled_members() -> None:
    members = Members(a=1, b=1, c=0)
    members.full.add("a")
    assert members.turns(1) == ["b"]
    members.ring.remove("a")  # disabled
    members.ring.remove("b")  # enabled
    members.ring.remove("zz")  # never a member: ignored
    assert "a" not in members.ring and len(members.ring) == 1
    assert not members.ring.enable("a")  # no longer a member
    assert members.turns(2) == ["c", "c"]
    members.ring.remove("c")
    assert members.choose() is None


def test_a_member_is_added_once() -> None:
    ring: DispatchRing[str] = DispatchRing()
    ring.add("a", 0)
    with pytest.raises(ValueError):
        ring.add("a", 1)


def test_disable_then_enable_by_the_owner() -> None:
    members = Members(a=0, b=0)
    assert members.ring.disable("a")
    assert not members.ring.disable("a")
    assert members.turns(2) == ["b", "b"]
    members.ring.enable("a")
    assert members.turns(2) == ["b", "a"]  # b had its turn: a's follows


def test_clear_forgets_everyone() -> None:
    members = Members(a=0, b=3)
    members.ring.clear()
    assert len(members.ring) == 0 and members.choose() is None
    members.ring.add("a", 0)
    assert members.turns(1) == ["a"]
