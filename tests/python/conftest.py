"""pytest fixtures for gradsync.torch: ranks as real processes over real sockets.

The package comes from GRADSYNC_PYTHONPATH (ctest sets it to BUILD/python), else build/python
of this checkout. Jobs run tests/python/rank_worker.py SCENARIO on every rank, started here with
the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT, a fresh GRADSYNC_JOB_TOKEN, a
short GRADSYNC_TIMEOUT) and one compute thread each; each rank writes its result as a
torch.save file, which run_job returns by rank.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

def pytest_configure(config):
    # `long`: cases make test leaves to make test-long (ctest python_long), CI's time.
    config.addinivalue_line("markers", "long: runs in make test-long only (ctest python_long)")


HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PACKAGE = Path(os.environ.get("GRADSYNC_PYTHONPATH", REPO / "build" / "python"))
sys.path.insert(0, str(PACKAGE))
sys.path.insert(0, str(HERE))

# Every wait of a test job is bounded by this (a lost rank is noticed sooner: at once).
JOB_TIMEOUT = "20s"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_pair() -> int:
    """A port P with P + 1 free too, below the kernel's ephemeral range (whose ports a
    connection may take at any time), for a store on P and gradsync's on P + 1."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(100):
        port = secrets.randbelow(low - 20000) + 20000
        try:
            for p in (port, port + 1):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
    raise RuntimeError("no free pair of ports")


def job_env(rank: int, size: int, port: int, token: str, extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update({
        "RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "GRADSYNC_JOB_TOKEN": token, "GRADSYNC_TIMEOUT": JOB_TIMEOUT,
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(PACKAGE), str(HERE), env.get("PYTHONPATH", "")]),
    })
    env.update(extra or {})
    return env


@dataclass
class Job:
    """A finished job: each rank's exit code, output and result (None if it wrote none)."""

    codes: list[int]
    outputs: list[str]
    results: list = field(default_factory=list)
    seconds: float = 0.0
    directory: Path = Path(".")

    def check(self) -> "Job":
        for rank, (code, output) in enumerate(zip(self.codes, self.outputs)):
            assert code == 0, f"rank {rank} exited with {code}:\n{output[-3000:]}"
        return self


def default_sigint() -> None:
    """A rank's Ctrl-C as a terminal's would be: a test run in the background (`cmd &` in a
    script) inherits SIGINT ignored, and Python then raises no KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_job(tmp_path: Path, size: int, scenario: str, *args: str, timeout: float = 120,
            signals: dict[int, int] | None = None, env: dict | None = None,
            worker: str = "rank_worker.py") -> Job:
    """Runs SCENARIO of `worker` (rank_worker.py: gradsync.torch's API; dist_worker.py:
    torch.distributed's) on `size` ranks (size 1: alone, no launcher variables) and waits for
    all; kills and fails the test on a hang. `signals`: {rank: signal} to send once every rank
    is under way (has written OUT/ready-RANK)."""
    port, token = free_port(), secrets.token_hex(16)
    out = tmp_path / f"{scenario}-{size}-{port}"
    out.mkdir()
    procs = []
    for rank in range(size):
        rank_env = job_env(rank, size, port, token, env) if size > 1 else dict(
            os.environ, PYTHONPATH=job_env(0, 1, port, token)["PYTHONPATH"],
            OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", GRADSYNC_TIMEOUT=JOB_TIMEOUT)
        log = open(out / f"rank{rank}.log", "w")
        procs.append((subprocess.Popen(
            [sys.executable, str(HERE / worker), scenario, str(out), *args],
            env=rank_env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=default_sigint), log))
    start = time.monotonic()
    pending = dict(signals or {})
    while any(p.poll() is None for p, _ in procs):
        elapsed = time.monotonic() - start
        if pending and all((out / f"ready-{r}").exists() for r in range(size)):
            for rank, sig in pending.items():
                procs[rank][0].send_signal(sig)
            pending = {}
        if elapsed > timeout:
            for p, _ in procs:
                p.kill()
            pytest.fail(f"{scenario} on {size} ranks hung for {timeout} s")
        time.sleep(0.05)
    seconds = time.monotonic() - start
    codes = []
    for p, log in procs:
        codes.append(p.wait())  # reaped: no zombie left behind
        log.close()
    outputs = [(out / f"rank{r}.log").read_text() for r in range(size)]
    results = []
    for rank in range(size):
        path = out / f"rank{rank}.pt"
        results.append(torch.load(path) if path.exists() else None)
    return Job(codes, outputs, results, seconds, out)


@pytest.fixture
def job(tmp_path):
    """run_job bound to the test's temporary directory."""
    return lambda *a, **k: run_job(tmp_path, *a, **k)


def max_relative_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """The largest difference between two models' parameters, relative to the element (at least
    1e-2), as the C++ tests measure it (tests/unit/torch/api_fixture.h)."""
    worst = 0.0
    for x, y in zip(a, b):
        scale = torch.maximum(x.abs(), y.abs()).clamp_min(1e-2)
        worst = max(worst, ((x - y).abs() / scale).max().item())
    return worst


def processes():
    """(pid, stat fields after the command name, command line) of every process still listed."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except OSError:
            continue
        yield int(entry.name), fields, cmdline


def live_processes(marker: str) -> list[str]:
    """Processes (zombies included) whose command line holds `marker`."""
    return [f"{pid} ({fields[0]}) {cmdline}" for pid, fields, cmdline in processes()
            if marker in cmdline and pid != os.getpid()]


def children(parent: int) -> list[int]:
    """The processes whose parent is `parent`, in pid order."""
    return sorted(pid for pid, fields, _ in processes() if int(fields[1]) == parent)


def signal_name(code: int) -> str:
    return signal.Signals(-code).name if code < 0 else str(code)
