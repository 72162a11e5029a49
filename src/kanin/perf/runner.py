"""The parent process: plan the workers, start them together, watch, drain, verify.

Phases: every worker connects and reports `ready`; the parent sends START with one
start time; producers publish for --duration (or --count) and wait for their confirms;
then the parent drains: it waits until consumers have received every confirmed message
(every published one without confirms), or until they make no progress for
--drain-timeout seconds; then FINISH, and each worker sends its result.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection as Pipe
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import Any

from kanin.perf.options import PerfOptions
from kanin.perf.report import Timeline, progress_line
from kanin.perf.tally import WorkerResult, add_snapshots
from kanin.perf.worker import WorkerSpec, worker_main

READY_TIMEOUT_S = 60.0
RESULT_TIMEOUT_S = 30.0  # after FINISH, for workers to close and report


def plan(options: PerfOptions, run_id: int) -> list[WorkerSpec]:
    """Spread producer and consumer connections over processes.

    Automatic (--processes 0): each side (producers, consumers) gets half the cores,
    at least one process, so on two cores producers and consumers run in one process
    each. With N processes and both sides, half go to each side. Connections are dealt
    round-robin within a side. Each process reports its CPU use; one near 100% means
    perf itself may be the limit (the summary says so), and more --processes help.
    """
    queues = options.queue_names
    producers = [(i, queues[i % len(queues)]) for i in range(options.producers)]
    consumers = [(i, queues[i % len(queues)]) for i in range(options.consumers)]
    half = max(1, len(os.sched_getaffinity(0)) // 2)
    wanted = options.processes or (2 * half if producers and consumers else half)
    if producers and consumers and wanted >= 2:
        producer_slots = max(1, min(wanted // 2, len(producers)))
        consumer_slots = max(1, min(wanted - wanted // 2, len(consumers)))
        sides = [(producers, producer_slots, True), (consumers, consumer_slots, False)]
    else:
        slots = max(1, min(wanted, len(producers) + len(consumers)))
        mixed = [(p, True) for p in producers] + [(c, False) for c in consumers]
        specs_p: list[list[tuple[int, str]]] = [[] for _ in range(slots)]
        specs_c: list[list[tuple[int, str]]] = [[] for _ in range(slots)]
        for index, (entry, is_producer) in enumerate(mixed):
            (specs_p if is_producer else specs_c)[index % slots].append(entry)
        return [
            WorkerSpec(options, run_id, tuple(p), tuple(c))
            for p, c in zip(specs_p, specs_c, strict=True)
        ]
    specs = []
    for entries, slots, is_producer in sides:
        for slot in range(slots):
            mine = tuple(entries[slot::slots])
            if is_producer:
                specs.append(WorkerSpec(options, run_id, mine, ()))
            else:
                specs.append(WorkerSpec(options, run_id, (), mine))
    return specs


@dataclass
class Session:
    options: PerfOptions
    pipes: list[Pipe]  # the live ones; a worker's index is its place in `all_pipes`
    processes: list[BaseProcess]
    snapshots: dict[int, dict[str, int]] = field(default_factory=dict)
    results: dict[int, WorkerResult] = field(default_factory=dict)
    produced: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    timeline: Timeline = field(default_factory=Timeline)
    start_ns: int = 0
    started_at: float = 0.0
    finished: bool = False
    finished_at: float = 0.0
    all_pipes: list[Pipe] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.all_pipes = list(self.pipes)

    def broadcast(self, command: str, argument: Any = None) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send((command, argument))

    def receive(self, timeout_s: float) -> None:
        for pipe in wait(self.pipes, max(timeout_s, 0.0)):
            assert isinstance(pipe, Pipe)
            index = self.all_pipes.index(pipe)
            try:
                kind, data = pipe.recv()
            except (EOFError, OSError):
                self.pipes.remove(pipe)
                if index not in self.results:
                    self.errors.append(f"worker process {index} died")
                    self.finish()
                continue
            if kind in ("stats", "produced"):
                self.snapshots[index] = data
                if kind == "produced":
                    self.produced.add(index)
            elif kind == "error":
                self.errors.append(data)
                self.finish()
            elif kind == "result":
                self.results[index] = data
                self.snapshots[index] = data.counters

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self.finished_at = time.monotonic()
            self.broadcast("FINISH")

    def wait_ready(self) -> None:
        ready: set[int] = set()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(ready) < len(self.pipes) and not self.errors:
            if time.monotonic() > deadline:
                self.errors.append("workers were not ready within 60 s")
                return
            for pipe in wait(self.pipes, 1.0):
                assert isinstance(pipe, Pipe)
                index = self.all_pipes.index(pipe)
                try:
                    kind, data = pipe.recv()
                except EOFError:
                    self.errors.append(f"worker process {index} died while connecting")
                    return
                if kind == "ready":
                    ready.add(index)
                elif kind == "error":
                    self.errors.append(data)
                elif kind == "result":
                    self.results[index] = data

    def drive(self) -> None:
        options = self.options
        confirms = options.confirm.kind != "none"
        self.start_ns = time.monotonic_ns()
        self.started_at = time.time()
        self.broadcast("START", self.start_ns)
        start = time.monotonic()
        next_tick = start + 1.0
        draining_since: float | None = None
        last_unique = -1
        show = not options.quiet
        stall_s = options.confirm_timeout_s + options.drain_timeout_s + 10.0
        last_change, last_state = start, (0, 0, 0)
        while len(self.results) < len(self.processes) and self.pipes:
            self.receive(next_tick - time.monotonic())
            now = time.monotonic()
            total = add_snapshots(list(self.snapshots.values()))
            if now >= next_tick:
                self.timeline.add(now - start, total)
                if show:
                    sys.stderr.write(progress_line(self.timeline, total, confirms))
                    sys.stderr.flush()
                next_tick += 1.0
            if self.finished:
                if now - self.finished_at > RESULT_TIMEOUT_S:
                    self.errors.append("workers did not report within 30 s of FINISH")
                    break
                continue
            state = (total.get("published", 0), total.get("confirmed", 0), total.get("consumed", 0))
            if state != last_state:
                last_change, last_state = now, state
            elif now - last_change > stall_s:
                self.errors.append(f"no progress for {stall_s:.0f} s")
                self.finish()
                continue
            publishing_over = len(self.produced) == len(self.processes) and (
                options.producers > 0 or now - start >= options.duration_s
            )
            if not publishing_over:
                continue
            expected = total.get("confirmed" if confirms else "published", 0)
            unique = total.get("unique", 0)
            if options.consumers == 0 or unique >= expected:
                self.finish()
            elif unique != last_unique or draining_since is None:
                draining_since, last_unique = now, unique
            elif now - draining_since > options.drain_timeout_s:
                self.finish()
        if show:
            sys.stderr.write("\n")


def run(options: PerfOptions) -> tuple[Session, int]:
    """Run the workers; return the session (with results) and the start time."""
    run_id = random.getrandbits(32)
    context = multiprocessing.get_context("spawn")
    pipes: list[Pipe] = []
    processes: list[BaseProcess] = []
    process: BaseProcess
    for spec in plan(options, run_id):
        parent_end, child_end = context.Pipe()
        process = context.Process(target=worker_main, args=(spec, child_end), daemon=True)
        process.start()
        child_end.close()
        pipes.append(parent_end)
        processes.append(process)
    session = Session(options, pipes, processes)
    try:
        session.wait_ready()
        if session.errors:
            session.finish()
            _collect(session, 10.0)
        else:
            session.drive()
    finally:
        for process in processes:
            process.join(timeout=10.0)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5.0)
    return session, run_id


def _collect(session: Session, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while len(session.results) < len(session.processes) and session.pipes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        session.receive(remaining)
