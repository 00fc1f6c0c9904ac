"""scripts/gpu_profile.py (docs/simulator.md, "Measured accelerator profiles") on this machine's
CPU: its profile must have exactly the layers, tensor names and shapes of the built-in profile
of the same model (as `gradsync simulate --write-profile` dumps it), and `gradsync simulate`
must accept it. Needs torchvision (python3-torchvision, scripts/setup.sh); skipped without it."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

torchvision = pytest.importorskip("torchvision")

SCRIPT = REPO / "scripts" / "gpu_profile.py"
GRADSYNC = Path(os.environ.get("GRADSYNC_BIN", REPO / "build" / "apps" / "gradsync" / "gradsync"))


def gradsync(*args: str) -> str:
    done = subprocess.run([str(GRADSYNC), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"gradsync {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout


def builtin(model: str, tmp_path: Path) -> dict:
    path = tmp_path / f"builtin-{model}.json"
    gradsync("simulate", "--model-profile", model, "--write-profile", str(path))
    return json.loads(path.read_text())


def structure(layers: list[dict]) -> list:
    """What must match the built-in: layer names, kinds, tensor names and shapes, in order."""
    return [(layer["name"], layer.get("kind", ""),
             [(t["name"], list(t["dims"])) for t in layer["tensors"]]) for layer in layers]


def test_resnet50_cpu_profile_has_the_builtin_layers_and_loads(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--models", "resnet50", "--batch", "2",
         "--image-size", "64", "--steps", "1", "--warmup", "0", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    [path] = out.glob("*-resnet50.json")
    measured = json.loads(path.read_text())
    expected = builtin("resnet50", tmp_path)
    assert structure(measured["layers"]) == structure(expected["layers"])
    assert measured["batch_size"] == 2 and measured["device"].endswith("(fp32)")
    assert "per-layer sum / hook-free forward+backward step" in measured["source"]
    for layer in measured["layers"]:
        assert layer["forward_s"] > 0 and layer["backward_s"] >= 0, layer["name"]
    assert sum(layer["backward_s"] for layer in measured["layers"]) > 0
    assert measured["update_s"] > 0
    printed = gradsync("simulate", "--model-profile", str(path), "--workers", "2")
    assert "resnet50 on 2 workers" in printed, printed


def test_vgg19_layers_match_the_builtin(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_profile", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = script  # its dataclasses look their module up there
    spec.loader.exec_module(script)
    layers = script.profile_layers(script.build_model("vgg19"))
    measured = [{"name": layer.name, "kind": layer.kind,
                 "tensors": [{"name": n, "dims": list(t.shape)} for n, t in layer.params]}
                for layer in layers]
    expected = builtin("vgg19", tmp_path)
    assert structure(measured) == structure(expected["layers"])
    assert expected["batch_size"] == script.BUILTIN_BATCH["vgg19"]
    assert builtin("resnet50", tmp_path)["batch_size"] == script.BUILTIN_BATCH["resnet50"]


@pytest.mark.parametrize("path", sorted((REPO / "benchmarks" / "profiles").glob("*.json")),
                         ids=lambda p: p.stem)
def test_shipped_profiles_have_the_builtin_layers_and_add_up(path, tmp_path):
    """The measured profiles in benchmarks/profiles: the built-in's layers, a split whose sum
    the script checked against a hook-free step (within 1%: launch-bound ones are not shipped),
    and `gradsync simulate` accepts them."""
    shipped = json.loads(path.read_text())
    model = shipped["name"]
    assert structure(shipped["layers"]) == structure(builtin(model, tmp_path)["layers"])
    ratio = float(shipped["source"].split("per-layer sum / hook-free forward+backward step = ")[1]
                  .split()[0])
    assert abs(ratio - 1) < 0.01, (path.name, ratio)
    printed = gradsync("simulate", "--model-profile", str(path), "--workers", "2")
    assert f"{model} on 2 workers" in printed, printed
