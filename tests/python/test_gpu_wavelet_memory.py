"""scripts/gpu_wavelet_memory.py and scripts/gpu_waves.py (docs/simulator.md, "Checking the
memory model on a GPU") on this machine's CPU: two tick-tock waves, launched by one host thread
(`events`) or a thread per wave (`threads`), give exactly one wave at twice the batch (the
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
WAVES = REPO / "scripts" / "gpu_waves.py"
GRADSYNC = Path(os.environ.get("GRADSYNC_BIN", REPO / "build" / "apps" / "gradsync" / "gradsync"))


def load_script(path=WAVES):
    spec = importlib.util.spec_from_file_location(path.stem, path)
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


CUDA = pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (a GPU machine's check)"))


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("launch", ["events", "threads"])
def test_two_waves_equal_one_wave_at_twice_the_batch_and_keep_the_gates(launch, device):
    script = load_script()
    dev = script.Device(torch.device(device))
    rounds = 5
    batches = [(x.to(device), y.to(device)) for x, y in small_batches(2, 6)]
    waves_model, one_model = small_model(3).to(device), small_model(3).to(device)
    runner = script.WaveRunner(
        waves_model, torch.optim.SGD(waves_model.parameters(), lr=0.5, momentum=0.9),
        batches, dev, launch)
    base = dev.mark()
    runner.run(2)
    runner.run(rounds - 2)  # the rounds go on where the last run() stopped
    joined = (torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]))
    script.one_wave(one_model, torch.optim.SGD(one_model.parameters(), lr=0.5, momentum=0.9),
                    joined, rounds)
    dev.sync()
    for ours, reference in zip(waves_model.parameters(), one_model.parameters()):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    assert not torch.equal(next(waves_model.parameters()).cpu(),
                           next(small_model(3).parameters()))

    timeline = runner.timeline(base)
    passes, updates = timeline["passes"], {u["round"]: u for u in timeline["updates"]}
    assert sorted(updates) == list(range(rounds))
    for phase in ("forward", "backward"):
        gate = sorted((p for p in passes if p["phase"] == phase), key=lambda p: p["start"])
        assert [(p["round"], p["wave"]) for p in gate] == [(r, w) for r in range(rounds)
                                                           for w in range(2)], phase
        for a, b in zip(gate, gate[1:]):
            assert b["start"] >= a["end"], (phase, a, b)  # one pass at a time
    if launch == "events" and device == "cpu":  # the host's order: tick F, tock F, tick B,
        # tock B, update, every round (on a GPU, tick's backward may start before tock's forward)
        order = sorted([(p["start"], p["phase"], p["wave"], p["round"]) for p in passes]
                       + [(u["start"], "update", None, r) for r, u in updates.items()])
        assert [step[1:] for step in order] == [
            step for r in range(rounds) for step in (("forward", 0, r), ("forward", 1, r),
                                                     ("backward", 0, r), ("backward", 1, r),
                                                     ("update", None, r))]
    for p in passes:
        if p["phase"] == "forward" and p["round"] > 0:  # after the last round's update
            assert p["start"] >= updates[p["round"] - 1]["end"], p
        if p["phase"] == "backward":  # the update after both backwards
            assert updates[p["round"]]["start"] >= p["end"], p
    assert script.schedule_summary(timeline)["max_same_gate_overlap_s"] <= 0


@pytest.mark.parametrize("launch", ["events", "threads"])
def test_a_failing_wave_stops_the_other_without_a_hang(launch):
    script = load_script()
    model = small_model(1)
    batches = small_batches(2, 4)
    batches[1] = (batches[1][0], batches[1][1] + 100)  # labels out of range: tock's loss fails
    runner = script.WaveRunner(model, torch.optim.SGD(model.parameters(), lr=0.1), batches,
                               script.Device(torch.device("cpu")), launch)
    start = time.monotonic()
    with pytest.raises((IndexError, RuntimeError)):
        runner.run(3)
    assert time.monotonic() - start < 10
    assert runner.updated == -1  # round 0's update never came


def test_an_unknown_launch_is_refused():
    script = load_script()
    model = small_model(1)
    with pytest.raises(ValueError, match="launch 'fibers'"):
        script.WaveRunner(model, torch.optim.SGD(model.parameters(), lr=0.1),
                          small_batches(2, 4), script.Device(torch.device("cpu")), "fibers")


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
         "--launch", "events,threads", "--cudnn-benchmark", "off",
         "--out", str(out), "--predicted", str(predicted)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    measured = json.loads((out / "wavelet-memory-resnet50.json").read_text())
    configs = measured["configs"]
    assert [(c["waves"], c["batch_per_wave"], c["launch"]) for c in configs.values()] == [
        (1, 2, None), (1, 4, None), (2, 2, "events"), (2, 2, "threads")]
    for config in configs.values():
        assert config["samples_per_s"] > 0 and config["peak_allocated_bytes"] is None
        assert config["left_over_bytes_after_release"] is None
    for launch in ("events", "threads"):
        assert configs[f"2 waves at B, {launch}"]["schedule"]["max_same_gate_overlap_s"] <= 0
    assert "torch " in measured["source"] and "GPU none (CPU)" in measured["source"]
    assert "cuDNN benchmark off, 2 waves launched by events and threads" in measured["source"]
    assert measured["parameter_bytes"] == 4 * 25557032  # torchvision resnet50, 1000 classes
    ratio = f"{prediction['ratio']:.3f}"
    for launch in ("events", "threads"):
        assert f"| 2 waves at 2, {launch} | n/a | n/a | " \
            f"{prediction['waves']['peak_bytes'] / 1e9:.3f} |" in done.stdout, done.stdout
        assert f"{launch}: peak(2 waves of 2) / peak(one wave of 4): allocated n/a, reserved " \
            f"n/a; simulator {ratio} (predicted)" in done.stdout, done.stdout
