"""What start-up learns of each ENQUEUE record, kept in columns until the scan is over.

Why columns: recovery may meet tens of millions of records. Kept as one Python object per
record while the log is scanned, they would sit interleaved in memory with the store's own
long-lived index of live messages (FileStore._where), and the allocator could not give
their memory back once they are dropped: resident memory would stay at the start-up peak.
In arrays (a few machine words per record, allocated apart) nothing per record is made
until the scan knows which records are live, and then only for those, after the index is
complete: dropping them later frees whole blocks.
"""

from __future__ import annotations

from array import array

from kanin.store.api import Recovered


class EnqueuedColumns:
    def __init__(self) -> None:
        self.ids = array("q")
        self.locations = array("q")  # where the record is (FileStore's location encoding)
        self.queues = array("l")  # index into `names`
        self.sizes = array("q")
        self.priorities = array("B")
        self.expiries = array("q")
        self.names: list[str] = []
        self._index: dict[str, int] = {}

    def add(
        self, id_: int, location: int, queue: str, size: int, priority: int, expiry: int
    ) -> None:
        index = self._index.get(queue)
        if index is None:
            index = self._index[queue] = len(self.names)
            self.names.append(queue)
        self.ids.append(id_)
        self.locations.append(location)
        self.queues.append(index)
        self.sizes.append(size)
        self.priorities.append(priority)
        self.expiries.append(expiry)

    def live(self, where: dict[int, int], delivered: dict[int, int]) -> dict[str, list[Recovered]]:
        """Per queue, in id order, the records still live at the location `where` says (a
        copy that compaction wrote again is live at its newest place only)."""
        per_queue: list[list[Recovered]] = [[] for _ in self.names]
        for id_, location, queue, size, priority, expiry in zip(
            self.ids,
            self.locations,
            self.queues,
            self.sizes,
            self.priorities,
            self.expiries,
            strict=True,
        ):
            if where.get(id_) != location:
                continue
            returns = delivered.get(id_)
            if returns is None:
                per_queue[queue].append(Recovered(id_, size, priority, expiry))
            else:
                per_queue[queue].append(Recovered(id_, size, priority, expiry, True, returns + 1))
        result = {}
        for name, messages in zip(self.names, per_queue, strict=True):
            if messages:
                messages.sort()  # by id: compaction may have moved some later in the log
                result[name] = messages
        return result
