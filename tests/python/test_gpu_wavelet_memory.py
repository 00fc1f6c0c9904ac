"""scripts/gpu_wavelet_memory.py (docs/simulator.md, "Checking the memory model on a GPU") on
this machine's CPU: its two tick-tock waves give exactly one wave at twice the batch (the
trainer's accumulate consistency) and keep the gates' order; a failing wave stops the other
without a hang; the whole script runs on resnet50 at batch 2 and prints the simulator's
prediction next to it. Needs torchvision (python3-torchvision, scripts/setup.sh); skipped
without it."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import REPO

torchvision = pytest.importorskip("torchvision")

SCRIPT = REPO / "scripts" / "gpu_wavelet_memory.py"
GRADSYNC = Path(os.environ.get("GRADSYNC_BIN", REPO / "build" / "apps" / "gradsync" / "gradsync"))


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_wavelet_memory", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def small_model(seed: int) -> torch.nn.Module:
    """No BatchNorm or dropout, so that two half-batches give exactly the full batch's mean."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 10))


def small_batches(waves: int, batch: int):
    generator = torch.Generator().manual_seed(7)
    return [(torch.randn(batch, 3, 4, 4, generator=generator),
             torch.randint(0, 10, (batch,), generator=generator)) for _ in range(waves)]


def test_two_waves_equal_one_wave_at_twice_the_batch_and_keep_the_gates():
    script = load_script()
    dev = script.Device(torch.device("cpu"))
    rounds, batches = 5, small_batches(2, 6)
    waves_model, one_model = small_model(3), small_model(3)
    runner = script.WaveRunner(
        waves_model, torch.optim.SGD(waves_model.parameters(), lr=0.5, momentum=0.9),
        batches, dev)
    base = dev.mark()
    runner.run(2)
    runner.run(rounds - 2)  # the rounds go on where the last run() stopped
    joined = (torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]))
    script.one_wave(one_model, torch.optim.SGD(one_model.parameters(), lr=0.5, momentum=0.9),
                    joined, rounds)
    for ours, reference in zip(waves_model.parameters(), one_model.parameters()):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    assert not torch.equal(next(waves_model.parameters()), next(small_model(3).parameters()))

    timeline = runner.timeline(base)
    passes, updates = timeline["passes"], {u["round"]: u for u in timeline["updates"]}
    assert sorted(updates) == list(range(rounds))
    for phase in ("forward", "backward"):
        gate = sorted((p for p in passes if p["phase"] == phase), key=lambda p: p["start"])
        assert [(p["round"], p["wave"]) for p in gate] == [(r, w) for r in range(rounds)
                                                           for w in range(2)], phase
        for a, b in zip(gate, gate[1:]):
            assert b["start"] >= a["end"], (phase, a, b)  # one pass at a time
    for p in passes:
        if p["phase"] == "forward" and p["round"] > 0:  # after the last round's update
            assert p["start"] >= updates[p["round"] - 1]["end"], p
        if p["phase"] == "backward":  # the update after both backwards
            assert updates[p["round"]]["start"] >= p["end"], p
    assert script.schedule_summary(timeline)["max_same_gate_overlap_s"] <= 0


def test_a_failing_wave_stops_the_other_without_a_hang():
    script = load_script()
    model = small_model(1)
    batches = small_batches(2, 4)
    batches[1] = (batches[1][0], batches[1][1] + 100)  # labels out of range: tock's loss fails
    runner = script.WaveRunner(model, torch.optim.SGD(model.parameters(), lr=0.1), batches,
                               script.Device(torch.device("cpu")))
    start = time.monotonic()
    with pytest.raises((IndexError, RuntimeError)):
        runner.run(3)
    assert time.monotonic() - start < 10
    assert runner.updated == -1  # tick waited for round 0's update, which never came


def test_resnet50_on_the_cpu_prints_the_measurement_next_to_the_prediction(tmp_path):
    predicted = tmp_path / "predicted.json"
    made = subprocess.run(
        [sys.executable, str(SCRIPT), "--models", "resnet50", "--batch", "2",
         "--write-predicted", str(predicted), "--gradsync", str(GRADSYNC)],
        capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stdout + made.stderr
    prediction = json.loads(predicted.read_text())["models"]["resnet50"]
    assert prediction["one_wave"]["batch_per_wave"] == 4
    assert prediction["waves"]["batch_per_wave"] == 2 and prediction["waves"]["waves"] == 2
    assert 0.5 < prediction["ratio"] <= 1

    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--models", "resnet50", "--batch", "2",
         "--image-size", "64", "--steps", "1", "--warmup", "0", "--repeats", "1",
         "--out", str(out), "--predicted", str(predicted)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    measured = json.loads((out / "wavelet-memory-resnet50.json").read_text())
    configs = measured["configs"]
    assert [(c["waves"], c["batch_per_wave"]) for c in configs.values()] == [(1, 2), (1, 4), (2, 2)]
    for config in configs.values():
        assert config["samples_per_s"] > 0 and config["peak_allocated_bytes"] is None
    assert configs["2 waves at B"]["schedule"]["max_same_gate_overlap_s"] <= 0
    assert "torch " in measured["source"] and "GPU none (CPU)" in measured["source"]
    assert measured["parameter_bytes"] == 4 * 25557032  # torchvision resnet50, 1000 classes
    ratio = f"{prediction['ratio']:.3f}"
    assert f"| 2 waves at 2 | n/a | n/a | {prediction['waves']['peak_bytes'] / 1e9:.3f} |" \
        in done.stdout, done.stdout
    assert f"allocated n/a, reserved n/a; simulator {ratio} (predicted)" in done.stdout
