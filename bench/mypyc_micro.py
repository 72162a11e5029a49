"""CPU per operation of kanin's per-message codec and ledgers: pure Python vs mypyc.

    python bench/mypyc_micro.py --trees src "$(python tests/compiled_build.py)"  # two trees
    PYTHONPATH="$(python tests/compiled_build.py)" python bench/mypyc_micro.py  # this process

Each tree is a directory holding kanin/ (src, or the compiled tree that
tests/compiled_build.py builds, see docs/mypyc.md). With --trees the script runs itself
once per tree and repetition, alternating the trees, and prints the median of the runs'
medians. Time is the process's CPU time (time.process_time), not wall time: the machine
is shared.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

N = 100_000
BODY = b"x" * 100
FRAME_MAX = 131_072


def cases() -> dict[str, Callable[[], int]]:
    """name -> a function doing N operations and returning N."""
    from pamqp import commands

    from kanin.amqp import methods, tables
    from kanin.amqp.frames import FrameReader
    from kanin.core.confirms import ConfirmLedger
    from kanin.store import records

    props = commands.Basic.Properties(content_type="text/plain", delivery_mode=2)
    header = tables.encode_header(len(BODY), props)
    publish = methods.encode_method(1, commands.Basic.Publish(exchange="ex", routing_key="rk.a"))
    triple = publish + b"".join(methods.encode_content(1, header, BODY, FRAME_MAX))
    stream = triple * N
    header_payload = header[7:-1]  # encode_header gives a whole frame

    def parse_publishes() -> int:
        reader = FrameReader(FRAME_MAX, whole_publishes=True)
        return sum(1 for _ in reader.frames(stream))

    def deliver_head_and_content() -> int:
        out: list[bytes] = []
        for tag in range(1, N + 1):
            out.append(methods.encode_deliver_head(1, b"ctag-1", tag, False, b"ex", b"rk.a"))
            out += methods.encode_content(1, header_payload, BODY, FRAME_MAX)
        return N

    def delivery_encoder() -> int:
        encoder = methods.DeliveryEncoder(1, b"ctag-1", FRAME_MAX)
        parts: list[bytes] = []
        for tag in range(1, N + 1):
            encoder.add(parts, tag, "ex", "rk.a", header_payload, BODY)
        return N

    def encode_enqueue() -> int:
        out = []
        for id_ in range(1, N + 1):
            out.append(records.encode_enqueue(id_, "/\x00q1", "ex", "rk.a", header_payload, BODY))
        return N

    segment = records.FILE_HEADER + b"".join(
        records.encode_enqueue(id_, "/\x00q1", "ex", "rk.a", header_payload, BODY)
        for id_ in range(1, N + 1)
    )

    def summary_scan() -> int:
        return sum(1 for _ in records.SummaryScan(segment))

    def confirm_ledger() -> int:
        ledger = ConfirmLedger()
        party = "queue-1"
        for _ in range(N // 100):
            for _ in range(100):
                seq = ledger.next_seq()
                ledger.hold(seq, (party,))
                ledger.done(seq, party)
            ledger.drain()
        return N

    return {
        "parse basic.publish triple (FrameReader.frames)": parse_publishes,
        "encode_deliver_head + encode_content": deliver_head_and_content,
        "DeliveryEncoder.add": delivery_encoder,
        "records.encode_enqueue": encode_enqueue,
        "records.SummaryScan (per record)": summary_scan,
        "ConfirmLedger next_seq+hold+done (+drain/100)": confirm_ledger,
    }


def measure(repetitions: int) -> dict[str, float]:
    """name -> median CPU microseconds per operation over `repetitions`."""
    result = {}
    for name, case in cases().items():
        samples = []
        for _ in range(repetitions):
            gc.collect()
            start = time.process_time()
            count = case()
            samples.append((time.process_time() - start) / count * 1e6)
        result[name] = statistics.median(samples)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="*", help="directories holding kanin/ to compare")
    parser.add_argument("--runs", type=int, default=3, help="processes per tree (alternating)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions per process")
    parser.add_argument("--json", action="store_true", help="one tree: print JSON")
    args = parser.parse_args()
    if not args.trees:
        import kanin.amqp.frames

        figures = measure(args.reps)
        if args.json:
            print(json.dumps({"frames": kanin.amqp.frames.__file__, "us": figures}))
        else:
            print(f"kanin.amqp.frames: {kanin.amqp.frames.__file__}")
            for name, us in figures.items():
                print(f"{us:8.3f} us  {name}")
        return
    runs: dict[str, list[dict[str, float]]] = {tree: [] for tree in args.trees}
    for _ in range(args.runs):
        for tree in args.trees:
            env = os.environ | {"PYTHONPATH": str(Path(tree).resolve())}
            command = [sys.executable, __file__, "--json", "--reps", str(args.reps)]
            out = json.loads(
                subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
            )
            print(f"# {tree}: kanin.amqp.frames from {out['frames']}", file=sys.stderr)
            runs[tree].append(out["us"])
    names = list(runs[args.trees[0]][0])
    print("| operation | " + " | ".join(f"{t} µs/op" for t in args.trees) + " | ratio |")
    print("|---|" + "---:|" * (len(args.trees) + 1))
    for name in names:
        medians = [statistics.median(run[name] for run in runs[tree]) for tree in args.trees]
        ratio = medians[0] / medians[-1] if medians[-1] else float("nan")
        cells = " | ".join(f"{m:.3f}" for m in medians)
        print(f"| {name} | {cells} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
