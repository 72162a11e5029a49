"""The compiled build of this checkout, for tests/test_compiled.py and bench/.

`compiled_tree()` runs setup.py's build (the modules in setup.py's COMPILED, compiled with
mypyc; the rest copied as Python) into build/compiled-<digest>/lib, where the digest
covers everything the build reads: kanin's sources, setup.py, pyproject.toml, the Python
and the mypy doing it. A second call with the same sources reuses the tree. Returns the
directory to put on PYTHONPATH, or raises NotCompiled saying why there is none (no mypyc,
no working C compiler): callers skip then.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
# Files a build reads besides src/kanin's.
INPUTS = ("setup.py", "pyproject.toml")
PROBE = "import kanin.native as n; print(n.build_name())"


class NotCompiled(Exception):
    """No compiled build is possible here; the message says why."""


def source_digest() -> str:
    digest = hashlib.sha256()
    try:
        import mypy.version

        digest.update(mypy.version.__version__.encode())
    except ImportError:
        pass
    digest.update(sys.version.encode())
    files = [ROOT / name for name in INPUTS]
    files += sorted(p for p in (ROOT / "src" / "kanin").rglob("*") if p.is_file() and _source(p))
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _source(path: Path) -> bool:
    return "__pycache__" not in path.parts and path.suffix not in (".so", ".pyc", ".c")


def compiled_tree() -> Path:
    """The compiled tree's directory (holding kanin/), built if this digest has none."""
    try:
        import mypyc  # noqa: F401
        import setuptools  # noqa: F401
    except ImportError as exc:
        raise NotCompiled(f"{exc.name} is not installed (pip install mypy setuptools)") from exc
    home = BUILD / f"compiled-{source_digest()}"
    lib, done = home / "lib", home / "complete"
    home.mkdir(parents=True, exist_ok=True)
    with (home / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per digest, whoever asks first
        if not done.exists():
            _build(home, lib)
            done.write_text(_build_name(lib))
    name = done.read_text()
    if name != "compiled with mypyc":
        raise NotCompiled(f"the build came out {name}: see {home / 'build.log'}")
    return lib


def _build(home: Path, lib: Path) -> None:
    command = [sys.executable, "setup.py", "build", "--build-base", str(home / "tmp")]
    command += ["--build-lib", str(lib)]
    environment = {k: v for k, v in os.environ.items() if k != "KANIN_PURE"}
    with (home / "build.log").open("w") as log:
        result = subprocess.run(
            command, cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT
        )
    if result.returncode != 0:
        tail = (home / "build.log").read_text().splitlines()[-20:]
        raise RuntimeError("the compiled build failed:\n" + "\n".join(tail))


def _build_name(lib: Path) -> str:
    environment = os.environ | {"PYTHONPATH": str(lib)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=environment, capture_output=True, text=True
    )
    return result.stdout.strip() or f"unusable ({result.stderr.strip()[-200:]})"


if __name__ == "__main__":
    try:
        print(compiled_tree())
    except NotCompiled as exc:
        sys.exit(f"no compiled build: {exc}")
