"""kanin's build: the hot modules compiled with mypyc by default, pure Python otherwise.

`pip install .` (a wheel build) compiles the modules in COMPILED to C extensions when it
can: mypy (which brings mypyc) is a build requirement in pyproject.toml, and a C compiler
with Python's headers must work. Without a working compiler the build says so in one
line and installs the pure-Python package, which behaves the same (the test suite runs
against both). The compiled modules' .py files are installed too; the extension wins
the import. `kanin --version` names the build.

Pure Python, always:
- KANIN_PURE=1 in the environment;
- editable installs (`pip install -e .`): an edited .py must never be shadowed by a stale
  extension module next to it in src/.

    KANIN_PURE=1 pip install .                                   # pure, on purpose
    python setup.py build --build-lib build/compiled             # a compiled tree for PYTHONPATH
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

# The per-message modules (see docs/mypyc.md for what each gains and what it took).
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
    "src/kanin/core/stream_args.py",
    "src/kanin/core/dispatch.py",
    "src/kanin/core/consumer.py",
    "src/kanin/core/counters.py",
    "src/kanin/core/memory.py",
    "src/kanin/core/queue_args.py",
    "src/kanin/core/ready.py",
    "src/kanin/core/scheduling.py",
    "src/kanin/server/scheduler.py",
    "src/kanin/core/exchanges/base.py",
    "src/kanin/core/exchanges/direct.py",
    "src/kanin/core/exchanges/fanout.py",
    "src/kanin/core/exchanges/topic.py",
    "src/kanin/core/exchanges/headers.py",
    "src/kanin/core/exchanges/routing.py",
    "src/kanin/core/exchanges/dedup.py",
    "src/kanin/core/dedup_cache.py",
    "src/kanin/core/commit_rounds.py",
    "src/kanin/store/api.py",
    "src/kanin/store/records.py",
    "src/kanin/store/committer.py",
    "src/kanin/store/file_store.py",
    "src/kanin/store/stream_reads.py",
    "src/kanin/store/stream_index.py",
    "src/kanin/store/stream_log.py",
    "src/kanin/store/stream_batch.py",
]

# setup.py commands that build extension modules; anything else (egg_info, sdist, the
# editable wheel) needs no C, and mypyc's generation step costs a minute.
BUILDING = {"build", "build_ext", "bdist_wheel", "install"}


def say(message: str) -> None:
    print(f"kanin build: {message}", file=sys.stderr, flush=True)


def compiler_problem() -> str | None:
    """Why a C extension cannot be built here (no compiler, no Python headers), or None."""
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.sysconfig import customize_compiler

    compiler: Any = new_compiler()
    customize_compiler(compiler)
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "probe.c"
        source.write_text("#include <Python.h>\nint kanin_probe(void) { return 0; }\n")
        try:
            compiler.compile(
                [str(source)], output_dir=work, include_dirs=[sysconfig.get_paths()["include"]]
            )
        except Exception as exc:  # CompileError, or the compiler missing altogether
            return f"{compiler.compiler_so[0]}: {type(exc).__name__}"
    return None


def pure_reason() -> str | None:
    """Why this build stays pure Python, or None to compile."""
    if os.environ.get("KANIN_PURE", "") not in ("", "0"):
        return "KANIN_PURE is set"
    if "editable_wheel" in sys.argv or "develop" in sys.argv:
        return "an editable install stays pure Python"
    if not BUILDING.intersection(sys.argv[1:]):
        return ""  # no extension is built by this command: nothing to say
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc is not installed where the build runs"
    problem = compiler_problem()
    return f"no working C compiler ({problem})" if problem else None


class BuildExtOrPure(build_ext):
    """build_ext that falls back to the pure package if compiling fails after all."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            say(f"compiling failed ({type(exc).__name__}); installing pure Python")
            for output in self.get_outputs():
                Path(output).unlink(missing_ok=True)
            self.extensions = []


def ext_modules() -> list[Any]:
    reason = pure_reason()
    if reason is not None:
        if reason:
            say(f"pure Python ({reason})")
        return []
    from mypyc.build import mypycify

    say(f"compiling {len(COMPILED)} modules with mypyc (KANIN_PURE=1 to skip)")
    # group_name: the runtime shared by the compiled modules is kanin__mypyc.*.so, not a
    # hash-named library at the top of site-packages.
    return list(
        mypycify(["--config-file", "pyproject.toml", *COMPILED], opt_level="3", group_name="kanin")
    )


setup(ext_modules=ext_modules(), cmdclass={"build_ext": BuildExtOrPure})
