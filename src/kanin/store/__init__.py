"""Durability: persistent messages on durable queues, and the broker's definitions.

records.py       the on-disk record format (pure: bytes in, records out)
segments.py      the append-only segmented log: files, rotation, reclaim, recovery scan,
                 reading records back by location
committer.py     the group committer: the only path that makes records durable
api.py           the interface the broker uses (MessageStore, Content, Recovered)
file_store.py    FileStore: that interface on the segmented log
memory_store.py  MemoryStore: that interface with nothing on disk
definitions.py   durable exchanges, queues, bindings, users, vhosts, permissions
"""
