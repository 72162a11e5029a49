"""Which consumer of a classic queue gets its next message.

How this works:
- Among consumers with room the highest x-priority wins and equals take turns; with
  x-single-active-consumer only the earliest registered consumer receives, and a
  cancelled active consumer with deliveries unsettled keeps the others waiting until
  they are settled or back in the queue, so the next one sees them first.
- Choosing costs O(1) amortised however many consumers there are: a DispatchRing
  (core/dispatch.py) keeps the consumers' turns, and a consumer found without
  capacity is parked, off the ring, until its channel reports room again (`unpark`),
  instead of being asked again on every delivery.
The queue owns the consumers (Queue.consumers, in registration order) and tells this
class as they come and go; it asks `pick` for each delivery.
"""

from __future__ import annotations

from collections import OrderedDict

from kanin.core.consumer import Consumer
from kanin.core.dispatch import DispatchRing


class ConsumerChoice:
    def __init__(self, consumers: OrderedDict[Consumer, None], single_active: bool) -> None:
        self._consumers = consumers  # the queue's, in registration order
        self._single_active = single_active
        self._turns: DispatchRing[Consumer] = DispatchRing()  # whose turn it is
        self._exclusive = 0
        self._sac_previous: Consumer | None = None  # a cancelled active consumer still owing

    @property
    def examined(self) -> int:
        """Consumers asked whether they can take a message, so far, when consumers take
        turns (a single active consumer's own checks are not counted): tests bound it."""
        return self._turns.examined

    @property
    def has_exclusive(self) -> bool:
        return self._exclusive > 0

    def joined(self, consumer: Consumer) -> None:
        self._turns.add(consumer, consumer.priority)
        if consumer.exclusive:
            self._exclusive += 1

    def leaving(self, consumer: Consumer) -> None:
        """Before the queue drops the consumer: a single active one still owing settlements
        holds the hand-over (the ordering single active consumer is for)."""
        active = next(iter(self._consumers), None) is consumer
        if self._single_active and active and consumer.unacked:
            self._sac_previous = consumer

    def left(self, consumer: Consumer) -> None:
        self._turns.remove(consumer)
        if consumer.exclusive:
            self._exclusive -= 1
        if consumer.parked:
            consumer.parked = False
            consumer.channel.parked.pop(consumer, None)

    def unpark(self, consumer: Consumer) -> bool:
        """It has capacity again (its channel says so): its turns back. True if it was off."""
        consumer.parked = False
        return self._turns.enable(consumer)

    def pick(self) -> Consumer | None:
        """The consumer for the next message, or None if none can take it now."""
        if not self._consumers:
            return None
        if not self._single_active:
            # The ring's turn: the consumer whose turn it is serves, or is parked (its
            # turns off until it has capacity again) and the next one is asked.
            turns = self._turns
            while (consumer := turns.current()) is not None:
                if consumer.has_capacity():
                    turns.served(consumer)
                    return consumer
                self._park(consumer)
            return None
        if self._sac_previous is not None:
            if self._sac_previous.unacked:
                return None  # its settling schedules a dispatch (Channel._release)
            self._sac_previous = None
        active = next(iter(self._consumers))
        if active.parked:
            return None
        if active.has_capacity():
            return active
        self._park(active)
        return None

    def _park(self, consumer: Consumer) -> None:
        """No capacity: off the turns until its channel calls unpark. When the channel itself
        cannot deliver, the channel keeps it to wake with the rest of its parked consumers;
        otherwise it is full on its own and its acks wake it (Channel._release)."""
        self._turns.disable(consumer)
        consumer.parked = True
        channel = consumer.channel
        if not channel.can_deliver():
            channel.parked[consumer] = None
