"""A stateful property test of DispatchRing (kanin/core/dispatch.py) against a reference that
scans every member on every choice: random joins, leaves, members filling up and getting
room, owners enabling and disabling members, and choices.

The reference keeps every member in one list with the time of its last turn (joined, served
or enabled) and, to choose, scans them all, highest priority first and then by that time,
setting aside each one it finds full. The ring must choose the same member and set aside the
same ones. Besides, whenever every member set aside that has room again has been given back
(as the queue does), the choice must be what a plain scan of all members would allow: none
when no member has room, otherwise one of the highest priority among those with room.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from core_harness import take_turn
from kanin.core.dispatch import DispatchRing

NAMES = st.sampled_from([f"m{n}" for n in range(8)])


@dataclass
class Member:
    priority: int
    last_turn: int
    enabled: bool = True


class RingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ring: DispatchRing[str] = DispatchRing()
        self.members: dict[str, Member] = {}  # the reference
        self.full: set[str] = set()
        self.clock = 0

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    @rule(name=NAMES, priority=st.integers(0, 3))
    def join(self, name: str, priority: int) -> None:
        if name in self.members:
            return
        self.ring.add(name, priority)
        self.members[name] = Member(priority, self.tick())

    @rule(name=NAMES)
    def leave(self, name: str) -> None:
        self.ring.remove(name)
        self.members.pop(name, None)

    @rule(name=NAMES, full=st.booleans())
    def set_full(self, name: str, full: bool) -> None:
        if full:
            self.full.add(name)
        else:
            self.full.discard(name)

    @rule(name=NAMES)
    def enable(self, name: str) -> None:
        member = self.members.get(name)
        expected = member is not None and not member.enabled
        assert self.ring.enable(name) == expected
        if member is not None and expected:
            member.enabled = True
            member.last_turn = self.tick()

    @rule(name=NAMES)
    def disable(self, name: str) -> None:
        member = self.members.get(name)
        expected = member is not None and member.enabled
        assert self.ring.disable(name) == expected
        if member is not None:
            member.enabled = False

    @rule()
    def give_back_those_with_room(self) -> None:
        """What the queue does: every member set aside that has room again is enabled."""
        for name, member in self.members.items():
            if not member.enabled and name not in self.full:
                self.enable(name)

    @rule()
    def choose(self) -> None:
        complete = all(m.enabled for n, m in self.members.items() if n not in self.full)
        skipped: list[str] = []
        chosen = take_turn(self.ring, lambda name: name not in self.full, skipped.append)

        expected_skipped = []
        expected = None
        order = sorted(self.members.items(), key=lambda kv: (-kv[1].priority, kv[1].last_turn))
        for name, member in order:
            if not member.enabled:
                continue
            if name in self.full:
                member.enabled = False
                expected_skipped.append(name)
                continue
            member.last_turn = self.tick()
            expected = name
            break
        assert (chosen, skipped) == (expected, expected_skipped)

        if complete:
            with_room = [m.priority for n, m in self.members.items() if n not in self.full]
            if not with_room:
                assert chosen is None
            else:
                assert chosen is not None
                assert self.members[chosen].priority == max(with_room)

    @invariant()
    def same_members(self) -> None:
        assert len(self.ring) == len(self.members)
        assert set(self.ring) == set(self.members)
        for name, member in self.members.items():
            assert self.ring.is_enabled(name) == member.enabled


TestDispatchRing = RingMachine.TestCase
TestDispatchRing.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
