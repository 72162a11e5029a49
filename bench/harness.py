"""Starting and measuring brokers for the benchmarks in bench/: kanin as a subprocess,
the local RabbitMQ through rabbitmqctl, and `kanin perf` runs parsed from --json."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kanin.perf import topology
from kanin.perf.options import PerfOptions, parse_uri

PYTHON = sys.executable
# Environment of every kanin and perf subprocess; snapshot_source() points it at a copy.
ENV = dict(os.environ)
# Where every Kanin without a pythonpath of its own starts from instead of ENV's path
# (compiled.py's --compiled sets it: the broker compiled, its clients as they are).
BROKER_TREE: Path | None = None


def snapshot_source(root: Path, work: Path) -> str:
    """Copy src/kanin into work and run every subprocess from the copy.

    Others may edit the tree while a run goes on; the copy makes one run measure one
    version of the code. Returns a short digest of the copied sources.
    """
    copy = work / "src"
    digest = copy_source(root, copy)
    ENV["PYTHONPATH"] = str(copy)
    return digest


def copy_source(root: Path, copy: Path) -> str:
    """Copy root/src/kanin to copy/kanin; return a short digest of the copied sources."""
    shutil.copytree(
        root / "src" / "kanin", copy / "kanin", ignore=shutil.ignore_patterns("__pycache__")
    )
    return source_digest(copy)


def source_digest(tree: Path) -> str:
    """A short digest of the .py files of tree/kanin (a compiled tree has them too)."""
    digest = hashlib.sha256()
    for path in sorted((tree / "kanin").rglob("*.py")):
        digest.update(path.relative_to(tree).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


LISTENING = re.compile(r"listening for AMQP on \S+ port (\d+)")


def shell(command: list[str]) -> str:
    return " ".join(shlex.quote(part) for part in command)


def kanin_imported_from(pythonpath: Path) -> Path:
    """The kanin package PYTHON imports with pythonpath first on its path.

    An installed (editable) kanin could shadow the tree we mean to run, and then two
    "different" brokers would be the same code; this shows which one is really used.
    """
    probe = [PYTHON, "-c", "import kanin; print(kanin.__file__)"]
    env = ENV | {"PYTHONPATH": str(pythonpath)}
    result = subprocess.run(probe, capture_output=True, text=True, env=env, check=True)
    return Path(result.stdout.strip()).parent


@dataclass
class PerfRun:
    command: list[str]
    summary: dict[str, Any]
    wall_s: float


def run_perf(uri: str, args: list[str], timeout_s: float = 900.0) -> PerfRun:
    command = [PYTHON, "-m", "kanin", "perf", "--uri", uri, "--json", "--quiet", *args]
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=ENV)
    wall_s = time.monotonic() - started
    try:
        summary = json.loads(result.stdout)
    except json.JSONDecodeError:
        summary = {
            "ok": False,
            "errors": [f"perf exit {result.returncode}: {result.stderr[-500:]}"],
        }
    summary["exit_code"] = result.returncode
    return PerfRun(command, summary, wall_s)


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process (all its threads) has used: /proc/PID/stat utime + stime."""
    ticks, _, _ = _stat_entry(Path(f"/proc/{pid}/stat").read_text())
    return ticks / os.sysconf("SC_CLK_TCK")


def delete_exchange(uri: str, name: str) -> None:
    import pika

    with pika.BlockingConnection(pika.URLParameters(uri)) as connection:
        connection.channel().exchange_delete(name)


def delete_queues(uri: str, names: list[str]) -> None:
    """Delete queues; RabbitMQ answers delete-ok for one that is already gone."""
    import pika

    with pika.BlockingConnection(pika.URLParameters(uri)) as connection:
        channel = connection.channel()
        for name in names:
            channel.queue_delete(name)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def message_count(uri: str, queue: str) -> int:
    return asyncio.run(topology.message_count(PerfOptions(endpoint=parse_uri(uri)), queue))


def wait_for_count(uri: str, queue: str, want: int, timeout_s: float) -> float | None:
    """Seconds until queue holds `want` messages (None if it never does in time)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            if message_count(uri, queue) >= want:
                return time.monotonic() - started
        except Exception:  # not accepting connections yet, or the queue is not back yet
            pass
        time.sleep(0.05)
    return None


@dataclass
class Kanin:
    """One `kanin server` subprocess on 127.0.0.1, a free port, its own data directory."""

    data_dir: Path
    stats_file: Path | None = None
    # Another kanin's sources (a directory holding kanin/) instead of ENV's PYTHONPATH.
    pythonpath: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.data_dir.with_suffix(".log")

    @property
    def command(self) -> list[str]:
        command = [
            PYTHON,
            "-m",
            "kanin",
            "server",
            "--port",
            "0",
            "--mgmt-port",
            "0",
            "--prometheus-port",
            "0",
            "--bind",
            "127.0.0.1",
            "--data-dir",
            str(self.data_dir),
        ]
        if self.stats_file is not None:
            command += ["--stats-file", str(self.stats_file)]
        return command

    @property
    def env(self) -> dict[str, str]:
        # Read at start, not at construction: snapshot_source() may set ENV's path later.
        tree = self.pythonpath or BROKER_TREE
        if tree is None:
            return ENV
        return ENV | {"PYTHONPATH": str(tree)}

    @property
    def uri(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout_s: float = 600.0) -> float:
        """Start; return the seconds until it logged that it is listening."""
        log = self.log_path.open("ab")
        offset = log.tell()
        started = time.monotonic()
        self.process = subprocess.Popen(self.command, stdout=log, stderr=log, env=self.env)
        log.close()
        while time.monotonic() - started < timeout_s:
            with self.log_path.open("rb") as reader:
                reader.seek(offset)
                match = LISTENING.search(reader.read().decode(errors="replace"))
            if match:
                self.port = int(match.group(1))
                return time.monotonic() - started
            if self.process.poll() is not None:
                raise RuntimeError(f"kanin exited during start; see {self.log_path}")
            time.sleep(0.01)
        raise RuntimeError(f"kanin did not listen within {timeout_s} s")

    def stop(self, timeout_s: float = 300.0) -> float:
        """SIGTERM; return the seconds until the process exited."""
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return time.monotonic() - started

    def error_lines(self) -> list[str]:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return [line for line in text.splitlines() if " ERROR " in line or "Traceback" in line]


class StatsSampler:
    """Reads kanin's --stats-file every 0.25 s on a thread while a run goes on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> StatsSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            try:
                sample = json.loads(self.path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if not self.samples or sample["time"] != self.samples[-1]["time"]:
                self.samples.append(sample)

    def window(self, start: float, end: float) -> dict[str, float] | None:
        """fsyncs/s and records per fsync between the first and last sample in [start, end]."""
        inside = [s for s in self.samples if start <= s["time"] <= end]
        if len(inside) < 2:
            return None
        first, last = inside[0], inside[-1]
        seconds = last["time"] - first["time"]
        rounds = last["commit_rounds"] - first["commit_rounds"]
        records = last["records_committed"] - first["records_committed"]
        return {
            "seconds": round(seconds, 3),
            "commit_rounds": rounds,
            "records": records,
            "fsyncs_per_s": round(rounds / seconds, 1) if seconds else 0.0,
            "records_per_fsync": round(records / rounds, 1) if rounds else 0.0,
        }


def rabbitmqctl(*args: str, timeout_s: float = 600.0) -> tuple[float, str]:
    """Run rabbitmqctl; return (seconds, output). Raises on failure."""
    started = time.monotonic()
    result = subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=timeout_s, check=True
    )
    return time.monotonic() - started, result.stdout


def rabbitmq_running() -> bool:
    try:
        rabbitmqctl("status", timeout_s=60.0)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return False
    return True


def ensure_rabbitmq() -> bool:
    """Start the local RabbitMQ unless it runs; True if this call started it.

    It inherits this process's open-files limit: raise_fd_limit() first, or RabbitMQ
    caps its sockets near 1,024 and stalls the handshakes of later connections.
    """
    if rabbitmq_running():
        return False
    subprocess.run(_rabbitmq_start_command(), check=True, timeout=60, cwd=_RABBITMQ_HOME)
    # await_startup needs the Erlang node to answer already; -detached returns before.
    deadline = time.monotonic() + 120.0
    while not rabbitmq_running() and time.monotonic() < deadline:
        time.sleep(1.0)
    rabbitmqctl("await_startup", timeout_s=300.0)
    return True


_RABBITMQ_HOME = "/var/lib/rabbitmq"


def _rabbitmq_start_command() -> list[str]:
    """Debian's rabbitmq-server wrapper switches user with `su`, whose PAM session resets
    the open-files limit to 1,024; as root, switch with setpriv instead (no PAM), so the
    node keeps the limit raise_fd_limit() gave us."""
    if os.geteuid() == 0 and shutil.which("setpriv"):
        return [
            "env",
            f"HOME={_RABBITMQ_HOME}",
            "setpriv",
            "--reuid=rabbitmq",
            "--regid=rabbitmq",
            "--init-groups",
            "/usr/lib/rabbitmq/bin/rabbitmq-server",
            "-detached",
        ]
    return ["rabbitmq-server", "-detached"]


def raise_fd_limit() -> int:
    """Lift this process's soft open-files limit to the hard one (children inherit it)."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def rabbitmq_sockets() -> tuple[int, int]:
    """(sockets in use, socket limit) from rabbitmqctl status."""
    _, status = rabbitmqctl("status")
    match = re.search(r"Sockets: (\d+), limit: (\d+)", status)
    if match is None:
        raise RuntimeError("no socket limit in rabbitmqctl status")
    return int(match.group(1)), int(match.group(2))


def rabbitmq_pid() -> int:
    _, status = rabbitmqctl("status")
    match = re.search(r"OS PID: (\d+)", status)
    if match is None:
        raise RuntimeError("no OS PID in rabbitmqctl status")
    return int(match.group(1))


def rabbitmq_data_dir() -> Path:
    _, status = rabbitmqctl("status")
    match = re.search(r"Node data directory: (\S+)", status)
    if match is None:
        raise RuntimeError("no data directory in rabbitmqctl status")
    return Path(match.group(1))


def dir_bytes(directory: Path) -> int:
    """Bytes in the files under directory (the data on disk, by file sizes)."""
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def rabbitmq_version() -> str:
    _, output = rabbitmqctl("version")
    return output.strip()


def fsync_probe(directory: Path, rounds: int = 100) -> float:
    """Median milliseconds of one 4 KB append + fsync on the disk holding directory."""
    path = directory / "fsync-probe.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    timings = []
    try:
        for _ in range(rounds):
            started = time.perf_counter()
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
            timings.append((time.perf_counter() - started) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    return round(statistics.median(timings), 3)


class ForeignLoad:
    """CPU used during a measurement by processes that are not part of it.

    The benchmark owns its own process tree (perf, the kanin server) and, while it
    loads RabbitMQ, beam.smp and its helpers. Everything else on the machine (other
    people's tests, say) is foreign: its share of the cores is reported beside each point,
    since the brokers' numbers drop when something else takes the CPU. On a virtual
    machine the host may also take it: `steal_percent` is the share of the cores the
    hypervisor gave to others meanwhile (/proc/stat's steal time), unseen by any process.
    """

    def __init__(self, count_rabbitmq_as_ours: bool) -> None:
        self.rabbitmq_ours = count_rabbitmq_as_ours
        self.before: dict[int, tuple[int, int, str]] = {}
        self.started = 0.0
        self.percent: float | None = None
        self.steal_before = 0
        self.steal_percent: float | None = None
        self.top: list[tuple[str, float]] = []  # the busiest foreign processes, % of cores

    def __enter__(self) -> ForeignLoad:
        self.before = _cpu_ticks()
        self.steal_before = _steal_ticks()
        self.started = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        after = _cpu_ticks()
        wall = time.monotonic() - self.started
        ours = _descendants(os.getpid(), after)
        by_name: dict[str, int] = {}
        for pid, (ticks, _, name) in after.items():
            if pid in ours or (self.rabbitmq_ours and name in _RABBITMQ_PROCESSES):
                continue
            used = ticks - self.before.get(pid, (0, 0, ""))[0]
            if used > 0:
                by_name[name] = by_name.get(name, 0) + used
        if not wall:
            return
        scale = 100.0 / os.sysconf("SC_CLK_TCK") / wall / len(os.sched_getaffinity(0))
        self.percent = round(sum(by_name.values()) * scale, 1)
        self.steal_percent = round((_steal_ticks() - self.steal_before) * scale, 1)
        busiest = sorted(by_name.items(), key=lambda item: -item[1])[:4]
        self.top = [(name, round(ticks * scale, 1)) for name, ticks in busiest]


_RABBITMQ_PROCESSES = {"beam.smp", "erl_child_setup", "epmd", "inet_gethost"}


def _steal_ticks() -> int:
    """Ticks the hypervisor ran others instead of this machine, all cores (0 if unknown)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8])  # cpu user nice system idle iowait irq softirq steal
    except (OSError, IndexError, ValueError):
        return 0


def _cpu_ticks() -> dict[int, tuple[int, int, str]]:
    """pid -> (user + system ticks, parent pid, command name) for every process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            table[int(entry.name)] = _stat_entry((entry / "stat").read_text())
        except OSError:
            continue
    return table


def _stat_entry(raw: str) -> tuple[int, int, str]:
    """(user + system ticks, parent pid, command name) from one /proc/PID/stat line."""
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12]), int(fields[1]), name


def _descendants(root: int, table: dict[int, tuple[int, int, str]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (_, parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def write_results(
    out: Path, stem: str, results: dict[str, Any], render: Callable[[dict[str, Any]], str]
) -> Path:
    """Write a run's raw numbers (STEM.json) and its report (STEM.md); the report's path."""
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1))
    report = out / f"{stem}.md"
    report.write_text(render(results))
    return report
