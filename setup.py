"""Opt-in mypyc build of kanin's hot modules.

`pip install .` builds the pure-Python package, as pyproject.toml says. With KANIN_MYPYC=1
in the environment the modules in COMPILED are compiled to C extensions with mypyc
(needs mypy, a C compiler and Python's headers; see docs/mypyc.md), e.g.

    KANIN_MYPYC=1 pip install --no-build-isolation .
    KANIN_MYPYC=1 python setup.py build --build-lib build/mypyc   # a tree to put on PYTHONPATH

Every other module, and every module when the variable is unset, stays Python.
"""

from __future__ import annotations

import os

from setuptools import setup

COMPILED = [
    "src/kanin/amqp/frames.py",
    "src/kanin/amqp/methods.py",
    "src/kanin/amqp/tables.py",
    "src/kanin/amqp/properties.py",
    "src/kanin/amqp/assembler.py",
    "src/kanin/core/publishing.py",
    "src/kanin/core/channel.py",
    "src/kanin/core/confirms.py",
    "src/kanin/core/unacked.py",
    "src/kanin/core/message.py",
    "src/kanin/core/session/session.py",
    "src/kanin/core/session/routing.py",
    "src/kanin/core/queues/__init__.py",
    "src/kanin/core/queues/base.py",
    "src/kanin/core/queues/classic.py",
    "src/kanin/core/queues/consumers.py",
    "src/kanin/core/queues/dedup_index.py",
    "src/kanin/core/queues/end_to_end.py",
    "src/kanin/core/queues/expiry.py",
    "src/kanin/core/queues/quorum.py",
    "src/kanin/core/queues/returns.py",
    "src/kanin/core/queues/stream.py",
    "src/kanin/core/dispatch.py",
    "src/kanin/core/commit_rounds.py",
    "src/kanin/store/records.py",
    "src/kanin/store/committer.py",
    "src/kanin/store/stream_reads.py",
    "src/kanin/store/stream_index.py",
    "src/kanin/store/stream_log.py",
]


def ext_modules() -> list[object]:
    if os.environ.get("KANIN_MYPYC", "") in ("", "0"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        raise SystemExit(
            "KANIN_MYPYC=1 needs mypy (which brings mypyc) where the build runs: "
            "pip install mypy, then pip install --no-build-isolation ."
        ) from exc

    # group_name: the runtime shared by the compiled modules is kanin__mypyc.*.so, not a
    # hash-named library at the top of site-packages.
    return list(
        mypycify(["--config-file", "pyproject.toml", *COMPILED], opt_level="3", group_name="kanin")
    )


setup(ext_modules=ext_modules())
