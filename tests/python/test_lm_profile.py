"""scripts/lm_profile.py (docs/simulator.md, "INTELLECT-1's setting"): its gpt holds the tensors
of the gpt that examples/python/train_gpt.py trains (gradsync's `--model gpt`), its Llama
configuration holds Llama-3-8B's published parameter count, and `gradsync simulate` takes its
profile under Streaming DiLoCo with the fragments the outer optimizer forms from the real
model (largest sync 98,304 elements, docs/performance.md)."""

import importlib.util
import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

from conftest import REPO

GRADSYNC = Path(os.environ.get("GRADSYNC_BIN", REPO / "build" / "apps" / "gradsync" / "gradsync"))


def load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lm_profile = load(REPO / "scripts" / "lm_profile.py")


def test_gpt_profile_has_the_trained_models_tensors():
    sys.path.insert(0, str(REPO / "examples" / "python"))
    try:
        example = load(REPO / "examples" / "python" / "train_gpt.py")
    finally:
        sys.path.pop(0)
    model = example.Gpt(layers=2, width=128, heads=4, context=64)
    trained = sorted(tuple(p.shape) for p in model.parameters())
    layers = lm_profile.gpt_layers(Namespace(layers=2, width=128, heads=4, context=64))
    profiled = sorted(tuple(t["dims"]) for _, tensors, _ in layers for t in tensors)
    assert profiled == trained
    assert sum(lm_profile.elements(t) for _, t, _ in layers) == 470_528


def test_llama_profile_counts_llama3_8b(tmp_path):
    out = tmp_path / "llama.json"
    subprocess.run([sys.executable, str(REPO / "scripts" / "lm_profile.py"), "llama", "--layers",
                    "32", "--width", "4096", "--heads", "32", "--kv-heads", "8", "--mlp", "14336",
                    "--vocab", "128256", "--context", "8192", "--out", str(out)], check=True,
                   capture_output=True)
    profile = json.loads(out.read_text())
    tensors = [t for layer in profile["layers"] for t in layer["tensors"]]
    parameters = 0
    for t in tensors:
        n = 1
        for d in t["dims"]:
            n *= d
        parameters += n
    assert parameters == 8_030_261_248  # Llama-3-8B's published count
    compute = sum(l["forward_s"] + l["backward_s"] for l in profile["layers"])
    # 6 x 7.5B non-embedding parameters + attention, x 131,072 tokens, at 40% of 989 TFLOP/s
    assert 15 < compute < 19


def test_simulate_takes_the_gpt_profile_with_the_real_fragments(tmp_path):
    profile = tmp_path / "gpt.json"
    subprocess.run([sys.executable, str(REPO / "scripts" / "lm_profile.py"), "gpt",
                    "--compute-ms", "90", "--out", str(profile)], check=True, capture_output=True)
    result = tmp_path / "sim.json"
    subprocess.run([str(GRADSYNC), "simulate", "--model-profile", str(profile), "--workers", "4",
                    "--bandwidth", "10mbit", "--sync", "diloco:50,fragments=5,delay=1",
                    "--steps", "100", "--json", str(result)], check=True, capture_output=True)
    row = json.loads(result.read_text())["results"][0]
    # The largest fragment, 98,304 floats, all-reduced by 4 ranks: 2 x 3/4 of its bytes each.
    assert row["largest_sync_bytes"] == 2 * 3 / 4 * 98_304 * 4
    assert row["step_ms"] > 90
