#!/usr/bin/env python3
"""Measures gradsync model profiles (docs/simulator.md, "Model profiles") of torchvision's
resnet50 and vgg19 on one device, layer by layer, for `gradsync simulate --model-profile FILE`
and `gradsync train --compute emulate:FILE`.

What it measures, per training step on synthetic input (cross-entropy on random labels):
- Layers are those of the built-in profiles (src/sim/builtin_profiles.cc): every module with
  parameters in registration order, a BatchNorm joining the convolution before it, named after
  that convolution. Parameter-free work (ReLU, pooling, the residual add, flatten) lands in the
  next layer in forward order, resp. backward order; the loss lands in the last layer's forward.
- forward_s: from the end of the previous layer's forward (the first: from a mark just before
  the model call) to the forward hook of this layer's last module; the last layer's ends at the
  mark just before loss.backward().
- backward_s: from the previous gradient-ready mark in the order the marks came (the first: the
  mark before loss.backward()) to the mark when this layer's last parameter gradient is ready
  (register_post_accumulate_grad_hook where torch has it, else Tensor.register_hook).
- update_s: one torch.optim.SGD step with momentum (foreach default).
On CUDA the marks are CUDA events (no host sync inside a step; one after it to read them), on
a CPU they are host clocks. Each time is the median over --steps steps after --warmup untimed
ones, cudnn.benchmark on. The same number of steps runs without hooks, timed from before the
model call to after backward; the per-layer sum over that hook-free step is printed and written
into `source` as a check that the hooks neither add nor lose time.

--dtype fp32 is IEEE fp32 (TF32 off, as on the V100 of the built-ins), tf32 lets cuDNN and
matmuls use TF32, bf16 runs forward and loss under torch.autocast(bfloat16) (parameters,
gradients and the update stay fp32). Output: --out DIR/<device-slug>-<model>.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torchvision

# The per-device batch of each built-in profile, so that measured and built-in compare.
BUILTIN_BATCH = {"resnet50": 32, "vgg19": 32}
DTYPES = ("fp32", "tf32", "bf16")


@dataclass
class Layer:
    """One profile layer: its modules (forward order) and parameters (registration order)."""
    name: str
    modules: list = field(default_factory=list)
    params: list = field(default_factory=list)  # (full name, tensor)
    kind: str = ""


def build_model(name: str) -> torch.nn.Module:
    return getattr(torchvision.models, name)(num_classes=1000)


def profile_layers(model: torch.nn.Module) -> list[Layer]:
    """The built-in profiles' grouping: each module that owns parameters is a layer, except a
    BatchNorm, which joins the layer before it (its convolution)."""
    layers: list[Layer] = []
    for name, module in model.named_modules():
        params = [(f"{name}.{p}", t) for p, t in module.named_parameters(recurse=False)]
        if not params:
            continue
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and layers:
            layers[-1].modules.append(module)
            layers[-1].params += params
            continue
        kind = "linear" if isinstance(module, torch.nn.Linear) else ""
        layers.append(Layer(name, [module], params, kind))
    return layers


class Clock:
    """Marks on the device's timeline: CUDA events, or the host clock on a CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start, end) -> float:
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()


class LayerMarks:
    """Hooks that mark each layer's forward end and gradient-ready time in the current step."""

    def __init__(self, layers: list[Layer], clock: Clock):
        self.layers, self.clock = layers, clock
        self.handles = []
        self.reset()
        for i, layer in enumerate(layers):
            self.handles.append(layer.modules[-1].register_forward_hook(self._forward_hook(i)))
            for _, param in layer.params:
                self.handles.append(self._grad_hook(param, i))

    def reset(self):
        self.forward = [None] * len(self.layers)
        self.ready = [None] * len(self.layers)
        self.pending = [len(layer.params) for layer in self.layers]

    def remove(self):
        for handle in self.handles:
            handle.remove()

    def _forward_hook(self, i):
        def hook(module, inputs, output):
            self.forward[i] = self.clock.mark()
        return hook

    def _grad_ready(self, i):
        self.pending[i] -= 1
        if self.pending[i] == 0:
            self.ready[i] = self.clock.mark()

    def _grad_hook(self, param, i):
        if hasattr(param, "register_post_accumulate_grad_hook"):
            return param.register_post_accumulate_grad_hook(lambda p: self._grad_ready(i))
        return param.register_hook(lambda grad: self._grad_ready(i))


def autocast_for(dtype: str, device: torch.device):
    if dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return nullcontext()


def set_tf32(enabled: bool):
    """TF32 for cuDNN convolutions and cuBLAS matmuls: torch >= 2.9's fp32_precision (the old
    flags warn there, and mixing the two raises), else allow_tf32."""
    conv, matmul = getattr(torch.backends.cudnn, "conv", None), torch.backends.cuda.matmul
    if hasattr(conv, "fp32_precision") and hasattr(matmul, "fp32_precision"):
        conv.fp32_precision = matmul.fp32_precision = "tf32" if enabled else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = matmul.allow_tf32 = enabled


def train_step(model, batch, clock: Clock, amp):
    """One forward + backward; returns the marks (start, before backward, end)."""
    images, labels = batch
    model.zero_grad(set_to_none=True)
    start = clock.mark()
    with amp():
        loss = torch.nn.functional.cross_entropy(model(images), labels)
    before_backward = clock.mark()
    loss.backward()
    return start, before_backward, clock.mark()


def layer_times(marks: LayerMarks, start, before_backward, clock: Clock):
    """This step's (forward_s, backward_s) per layer from the hooks' marks."""
    n = len(marks.layers)
    ends = marks.forward[:-1] + [before_backward]
    forward = [clock.seconds(start if i == 0 else ends[i - 1], ends[i]) for i in range(n)]
    at = [clock.seconds(before_backward, mark) for mark in marks.ready]
    backward, previous = [0.0] * n, 0.0
    for i in sorted(range(n), key=lambda k: at[k]):
        backward[i], previous = at[i] - previous, at[i]
    return forward, backward


def measure_steps(model, layers, batch, clock, amp, args):
    """Median per-layer times over hooked steps, and the median hook-free step."""
    for _ in range(args.warmup):
        train_step(model, batch, clock, amp)
    plain = []
    for _ in range(args.steps):
        start, _, end = train_step(model, batch, clock, amp)
        clock.sync()
        plain.append(clock.seconds(start, end))
    marks = LayerMarks(layers, clock)
    samples = []
    try:
        for _ in range(args.steps):
            marks.reset()
            start, before_backward, _ = train_step(model, batch, clock, amp)
            clock.sync()
            if any(m is None for m in marks.forward + marks.ready):
                raise RuntimeError("a layer's forward or gradient hook did not fire")
            samples.append(layer_times(marks, start, before_backward, clock))
    finally:
        marks.remove()
    forward = [statistics.median(s[0][i] for s in samples) for i in range(len(layers))]
    backward = [statistics.median(s[1][i] for s in samples) for i in range(len(layers))]
    return forward, backward, statistics.median(plain)


def measure_update(model, clock: Clock, steps: int) -> float:
    """Median SGD-with-momentum step; the first, which creates the momentum buffers, untimed."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    optimizer.step()
    times = []
    for _ in range(steps):
        start = clock.mark()
        optimizer.step()
        end = clock.mark()
        clock.sync()
        times.append(clock.seconds(start, end))
    return statistics.median(times)


def device_name(device: torch.device, dtype: str) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} ({dtype})"
    cpu = platform.processor() or platform.machine()
    try:
        found = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
        cpu = found.group(1).strip() if found else cpu
    except OSError:
        pass
    return f"{cpu}, {torch.get_num_threads()} torch threads ({dtype})"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def profile_model(name: str, dtype: str, device: torch.device, args, command: str) -> dict:
    torch.manual_seed(0)
    batch_size = args.batch or BUILTIN_BATCH[name]
    model = build_model(name).to(device).train()
    layers = profile_layers(model)
    images = torch.randn(batch_size, 3, args.image_size, args.image_size, device=device)
    labels = torch.randint(0, 1000, (batch_size,), device=device)
    clock = Clock(device)
    if device.type == "cuda":
        set_tf32(dtype == "tf32")
    forward, backward, step = measure_steps(
        model, layers, (images, labels), clock, lambda: autocast_for(dtype, device), args)
    update = measure_update(model, clock, max(args.steps, 1))
    ratio = (sum(forward) + sum(backward)) / step
    print(f"{name} {dtype} batch {batch_size}: per-layer forward {sum(forward) * 1e3:.3f} ms + "
          f"backward {sum(backward) * 1e3:.3f} ms = {ratio:.4f} x the hook-free step "
          f"{step * 1e3:.3f} ms; update {update * 1e3:.3f} ms")
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "none (CPU)"
    source = (f"measured by `{command}` (model {name}, dtype {dtype}, image "
              f"{args.image_size}x{args.image_size}, median of {args.steps} steps after "
              f"{args.warmup}), torch {torch.__version__}, torchvision {torchvision.__version__}, "
              f"GPU {gpu}; per-layer sum / hook-free forward+backward step = {ratio:.4f} "
              f"({step * 1e3:.3f} ms)")
    return {
        "name": name, "device": device_name(device, dtype), "source": source,
        "batch_size": batch_size, "update_s": update,
        "layers": [{"name": layer.name, **({"kind": layer.kind} if layer.kind else {}),
                    "forward_s": f, "backward_s": b,
                    "tensors": [{"name": p, "dims": list(t.shape)} for p, t in layer.params]}
                   for layer, f, b in zip(layers, forward, backward)],
    }


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet50,vgg19",
                        help=f"comma-separated, of {','.join(BUILTIN_BATCH)}")
    parser.add_argument("--dtype", default="fp32", help=f"comma-separated, of {','.join(DTYPES)}")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    parser.add_argument("--batch", type=int, default=0, help="per step (0: the built-in's)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=20, help="timed steps (median)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--out", default=".", help="directory for <device-slug>-<model>.json")
    args = parser.parse_args(argv)
    args.models, args.dtypes = args.models.split(","), args.dtype.split(",")
    for value, known in [(m, BUILTIN_BATCH) for m in args.models] + \
                        [(d, DTYPES) for d in args.dtypes]:
        if value not in known:
            parser.error(f"unknown {value!r} (valid: {', '.join(known)})")
    if args.steps < 1 or args.warmup < 0 or args.batch < 0:
        parser.error("--steps must be >= 1, --warmup and --batch >= 0")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_profile: no CUDA device (run with --device cpu for a CPU profile)")
    torch.backends.cudnn.benchmark = True
    command = "python3 scripts/gpu_profile.py " + " ".join(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for dtype in args.dtypes:
        for name in args.models:
            profile = profile_model(name, dtype, device, args, command)
            path = out / f"{slug(profile['device'])}-{name}.json"
            path.write_text(json.dumps(profile, indent=1) + "\n")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
