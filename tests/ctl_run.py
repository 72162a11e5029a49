"""`kanin ctl` as a user runs it, a real process, for the ctl tests. Import it as
`from ctl_run import Ctl`; the `ctl` fixture in tests/ctl/conftest.py gives one pointed
at a fresh embedded broker's management API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any


@dataclass
class Ran:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)

    @property
    def rows(self) -> list[list[str]]:
        """The tab-separated table, header line included."""
        return [line.split("\t") for line in self.out.splitlines()]


@dataclass
class Ctl:
    url: str
    username: str = "guest"
    password: str = "guest"

    def as_user(self, username: str, password: str) -> Ctl:
        return Ctl(self.url, username, password)

    def __call__(self, *args: str, stdin: str | None = None, **env: str) -> Ran:
        """`kanin ctl --url U --username N --password P ARGS`; `env` adds variables to a
        process environment without any KANIN_CTL_* of the test run's own."""
        command = [
            *(sys.executable, "-m", "kanin", "ctl", "--url", self.url),
            *("--username", self.username, "--password", self.password, *args),
        ]
        return run_ctl(command, stdin, env)


def bare_ctl(*args: str, stdin: str | None = None, **env: str) -> Ran:
    """`kanin ctl ARGS` without the connection options: defaults and environment only."""
    return run_ctl([sys.executable, "-m", "kanin", "ctl", *args], stdin, env)


def run_ctl(command: list[str], stdin: str | None, env: dict[str, str]) -> Ran:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KANIN_CTL_")}
    result = subprocess.run(
        command,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**environ, **env},
    )
    return Ran(result.returncode, result.stdout, result.stderr)
