"""Running spark_job.py as a Spark driver of its own, and killing it the hard way.

A driver here is a process tree: the Python program, the JVM it starts, the JVM's
Python workers and the streaming sources' Python processes (PySpark's worker daemon
moves into a process group of its own). Each driver starts in a session of its own, and
a kill sends SIGKILL to every process of that session: nothing gets to shut down.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
JOB = HERE / "spark_job.py"
SRC = HERE.parent.parent / "src"


def spark_environment() -> dict[str, str]:
    """What a Spark driver and its Python workers need here: loopback, this Python, and
    kanin and the test helpers importable."""
    path = [str(SRC), str(HERE), str(HERE.parent)]
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    return {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(path),
    }


def driver_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, **spark_environment(), **(extra or {})}


class Driver:
    def __init__(self, plan: dict[str, Any], folder: Path, label: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.plan_file = folder / f"{label}-plan.json"
        self.plan_file.write_text(json.dumps(plan))
        self.log = folder / f"{label}.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(JOB), str(self.plan_file)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=driver_environment(),
                start_new_session=True,
            )

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the driver ran over {timeout:.0f} s:\n{self.tail()}") from None

    def wait_for_files(self, files: Iterable[Path], failed: Path, timeout: float) -> None:
        """Until every file exists; the driver ending or writing `failed` first is an error."""
        deadline = time.monotonic() + timeout
        missing = list(files)
        while missing:
            missing = [path for path in missing if not path.exists()]
            problem = None
            if failed.exists():
                problem = failed.read_text()
            elif self.process.poll() is not None:
                problem = f"the driver exited with {self.process.returncode}"
            elif time.monotonic() > deadline:
                problem = f"timed out waiting for {[path.name for path in missing]}"
            if problem:
                self.kill()
                raise AssertionError(f"{problem}\n{self.tail()}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL to every process of the driver's session, then reap the program."""
        kill_session(self.process.pid)
        self.process.wait(30)


def session_members(session: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # Fields after the command (which may hold spaces) start after its ")".
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == session and fields[0] != "Z":  # state, ppid, pgrp, session
            members.append(int(entry.name))
    return members


def kill_session(session: int) -> None:
    for _ in range(5):  # a process forked while the first ones were being killed
        members = session_members(session)
        if not members:
            return
        for pid in members:
            with suppress(ProcessLookupError):  # gone meanwhile
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
