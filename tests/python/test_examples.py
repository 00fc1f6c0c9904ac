"""The Python examples as a user runs them (examples/python/), on the real Fashion-MNIST, a few
dozen steps each: train.py (p3, top-k) under `gradsync launch`, train_ddp.py (DDP with
gs.ddp_comm_hook, PowerSGD) under torchrun, and on the "gradsync" backend under torchrun and
`gradsync launch`, parameter_server.py with a separate server rank.
Each must end with its test accuracy well above chance (10%). train_gpt.py (the language model
on Debian's fortunes) must end with a held-out loss far below uniform bytes' ln 256 = 5.55."""

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PACKAGE, REPO, free_port_pair, live_processes

EXAMPLES = REPO / "examples" / "python"
GRADSYNC = Path(os.environ.get("GRADSYNC_BIN", REPO / "build" / "apps" / "gradsync" / "gradsync"))
DATA = Path("/usr/share/datasets/fashion-mnist")

pytestmark = pytest.mark.skipif(not (DATA / "t10k-images-idx3-ubyte.gz").exists(),
                                reason=f"Fashion-MNIST not in {DATA} (dataset-fashion-mnist)")


def run(command: list[str], **env) -> str:
    environment = dict(os.environ, PYTHONPATH=str(PACKAGE), OMP_NUM_THREADS="1",
                       GRADSYNC_TIMEOUT="30s", PYTHONDONTWRITEBYTECODE="1", **env)
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=240)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(command)} failed ({done.returncode}):\n{output[-4000:]}"
    return output


def accuracy(output: str) -> float:
    found = re.findall(r"test accuracy ([0-9.]+)%", output)
    assert found, output[-2000:]
    return float(found[-1])


def torchrun(script: str, *args: str) -> str:
    # Debian's torchrun 1.13 fails under Python 3.11 unless --redirects and --tee are given
    # non-zero values (docs/python.md, "torchrun"). Its static rendezvous: the agent's store
    # holds MASTER_PORT, torch.distributed uses it, gradsync takes MASTER_PORT + 1.
    return run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_port", str(free_port_pair()), "--redirects", "1", "--tee", "1",
                str(EXAMPLES / script), *args],
               GRADSYNC_JOB_TOKEN=secrets.token_hex(16), GLOO_SOCKET_IFNAME="lo")


def launch(ranks: int, script: str, *args: str) -> str:
    """`gradsync launch -n RANKS -- python3 examples/python/SCRIPT ARGS`: its output."""
    return run([str(GRADSYNC), "launch", "-n", str(ranks), "--", sys.executable,
                str(EXAMPLES / script), *args])


@pytest.mark.skipif(not GRADSYNC.exists(), reason=f"{GRADSYNC} not built")
def test_train_under_gradsync_launch():
    output = launch(2, "train.py", "--steps", "40", "--schedule", "p3", "--compression",
                    "topk:0.05")
    assert accuracy(output) > 50, output
    assert live_processes(str(EXAMPLES / "train.py")) == []


def test_ddp_hook_under_torchrun():
    assert accuracy(torchrun("train_ddp.py", "--steps", "40", "--compression", "powersgd:4")) > 50


def test_ddp_on_the_gradsync_backend_under_torchrun():
    assert accuracy(torchrun("train_ddp.py", "--steps", "40", "--backend", "gradsync")) > 50


@pytest.mark.skipif(not GRADSYNC.exists(), reason=f"{GRADSYNC} not built")
def test_ddp_on_the_gradsync_backend_under_gradsync_launch():
    output = launch(2, "train_ddp.py", "--steps", "40", "--backend", "gradsync",
                    "--compression", "topk:0.05")
    assert accuracy(output) > 50, output


@pytest.mark.skipif(not GRADSYNC.exists(), reason=f"{GRADSYNC} not built")
def test_parameter_server_with_a_separate_server_rank():
    output = launch(3, "parameter_server.py", "--steps", "40", "--servers", "1", "--sync",
                    "ssgd")
    assert accuracy(output) > 50, output


@pytest.mark.skipif(not GRADSYNC.exists(), reason=f"{GRADSYNC} not built")
@pytest.mark.skipif(not Path("/usr/share/games/fortunes/fortunes").exists(),
                    reason="Debian's fortunes not installed (scripts/setup.sh installs it)")
def test_gpt_with_adamw_under_gradsync_launch():
    # 60 steps of 2 x 16 windows: 2.85 nats/token here (a letter-frequency model: about 3.0).
    output = launch(2, "train_gpt.py", "--steps", "60", "--batch-size", "16", "--warmup-steps",
                    "10")
    found = re.findall(r"held-out loss ([0-9.]+) nats/token", output)
    assert found, output[-2000:]
    assert float(found[-1]) < 3.1, output
