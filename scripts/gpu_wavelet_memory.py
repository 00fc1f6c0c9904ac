#!/usr/bin/env python3
"""Peak device memory and throughput of two tick-tock waves of B against one wave of 2B (and
of B) on one CUDA device (issue 23, item 5), for torchvision's resnet50 and vgg19 (fp32, TF32 off,
1000 classes, B = 32 as the built-in profiles; synthetic input; SGD with momentum), next to
`gradsync simulate --waves 2`'s prediction. docs/simulator.md, "Checking the memory model on a
GPU", says what runs; in short: the two waves are the trainer's `--waves 2 --wave-consistency
accumulate` on ONE model (threads, a CUDA stream each, the gates of torch/wave_gates.h kept on
the device by events, per-wave torch.autograd.grad, one SGD step per round from the mean);
peaks are torch.cuda.max_memory_allocated/reserved over --steps after --warmup.

  scripts/gpu_wavelet_memory.py --out DIR --predicted benchmarks/wavelet/simulator-predicted.json
  scripts/gpu_wavelet_memory.py --write-predicted FILE --gradsync build/apps/gradsync/gradsync
prints a Markdown table per model and writes DIR/wavelet-memory-<model>.json, resp. writes the
simulator's figures. --device cpu runs it on a CPU (peaks n/a), as the python_test suite does.
"""

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from contextlib import contextmanager, nullcontext
from datetime import datetime, timezone
from itertools import pairwise
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_profile import BUILTIN_BATCH, build_model, set_tf32  # noqa: E402

GB = 1e9
WAIT_TIMEOUT_S = 300.0  # no gate or update wait is unbounded
CONFIGS = ("one wave at B", "one wave at 2B", "2 waves at B")


class Device:
    """A CUDA device's event marks, or on a CPU (all in order on the host) the host clock."""

    def __init__(self, device: torch.device):
        self.device, self.cuda = device, device.type == "cuda"

    def mark(self, stream=None):
        """A CUDA event recorded on `stream` (the current one if None), or the host clock."""
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def wait(self, stream, mark):
        if self.cuda and mark is not None:
            stream.wait_event(mark)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)


class TickTockGates:
    """WaveGates (torch/wave_gates.h) for threads: a forward and a backward gate, passed by the
    waves in turn, wave 0 first, and on the device (a pass's stream waits for the previous pass's
    end). Thread-safe; a wait ends within WAIT_TIMEOUT_S or at abort(). `passes`: every pass."""

    def __init__(self, waves: int, dev: Device):
        self.waves, self.dev = waves, dev
        self.cond = threading.Condition()
        self.turn = {"forward": 0, "backward": 0}
        self.last_end = {"forward": None, "backward": None}
        self.error, self.passes = None, []

    def wait(self, ready, what: str):
        """Waits (holding self.cond) until ready() or an abort."""
        if not self.cond.wait_for(lambda: self.error is not None or ready(), WAIT_TIMEOUT_S):
            raise TimeoutError(f"gpu_wavelet_memory: {what} waited {WAIT_TIMEOUT_S:.0f} s")
        if self.error is not None:
            raise RuntimeError(f"gpu_wavelet_memory: {what}: another wave failed") from self.error

    def abort(self, error: BaseException):
        with self.cond:
            self.error = error
            self.cond.notify_all()

    @contextmanager
    def passing(self, phase: str, wave: int, rnd: int, stream):
        with self.cond:
            self.wait(lambda: self.turn[phase] == wave, f"wave {wave}'s {phase} gate")
            previous = self.last_end[phase]
        self.dev.wait(stream, previous)
        start = self.dev.mark(stream)
        yield
        end = self.dev.mark(stream)
        with self.cond:
            self.last_end[phase] = end
            self.turn[phase] = (wave + 1) % self.waves
            self.passes.append((wave, rnd, phase, start, end))
            self.cond.notify_all()


class WaveRunner:
    """K tick-tock waves on one model, accumulate consistency; batches[w]: wave w's (images,
    labels). run() blocks until its rounds are enqueued (a device sync waits for their end)."""

    def __init__(self, model, optimizer, batches, dev: Device):
        self.model, self.optimizer, self.batches, self.dev = model, optimizer, batches, dev
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.waves = len(batches)
        self.streams = [torch.cuda.Stream(dev.device) if dev.cuda else None for _ in batches]
        self.gates = TickTockGates(self.waves, dev)
        # the first round of the next run(); the last round whose update is enqueued
        self.next_round, self.updated, self.update_end = 0, -1, None
        self.handed_in = {}  # round -> [(wave, gradients, ready mark)]
        self.updates = []  # (round, start mark, end mark)

    def run(self, rounds: int):
        first, self.next_round = self.next_round, self.next_round + rounds
        errors = []

        def wave_thread(wave):
            try:
                self._wave_loop(wave, range(first, first + rounds))
            except BaseException as error:  # re-raised below
                errors.append(error)
                self.gates.abort(error)

        caller = torch.cuda.current_stream(self.dev.device) if self.dev.cuda else None
        for stream in self.streams if caller else []:  # after the caller's weights and data
            stream.wait_stream(caller)
        threads = [threading.Thread(target=wave_thread, args=(w,)) for w in range(self.waves)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        for stream in self.streams if caller else []:  # the caller's later work after the waves
            caller.wait_stream(stream)

    def _wave_loop(self, wave: int, rounds):
        stream, (images, labels) = self.streams[wave], self.batches[wave]
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            for rnd in rounds:
                with self.gates.cond:
                    self.gates.wait(lambda: self.updated >= rnd - 1, f"wave {wave}'s round {rnd}")
                    update_end = self.update_end
                self.dev.wait(stream, update_end)
                with self.gates.passing("forward", wave, rnd, stream):
                    loss = F.cross_entropy(self.model(images), labels)
                with self.gates.passing("backward", wave, rnd, stream):
                    grads = torch.autograd.grad(loss, self.params)
                del loss
                self._hand_in(rnd, wave, list(grads), stream)
                del grads  # not held into the next round's forward

    def _hand_in(self, rnd: int, wave: int, grads, stream):
        ready = self.dev.mark(stream)
        with self.gates.cond:
            entries = self.handed_in.setdefault(rnd, [])
            entries.append((wave, grads, ready))
            if len(entries) < self.waves:
                return
            del self.handed_in[rnd]
        self._update(rnd, sorted(entries, key=lambda entry: entry[0]), stream)

    def _update(self, rnd: int, entries, stream):
        """One SGD step from the mean of the waves' gradients, on this wave's stream."""
        for _, grads, ready in entries:
            self.dev.wait(stream, ready)
            for grad in grads if stream is not None else []:  # used (wave 0's written) here
                grad.record_stream(stream)
        start = self.dev.mark(stream)
        mean = entries[0][1]  # summed into wave 0's gradients, in wave order
        for _, grads, _ in entries[1:]:
            for total, grad in zip(mean, grads):
                total.add_(grad)
        for param, total in zip(self.params, mean):
            param.grad = total.mul_(1.0 / self.waves)
        self.optimizer.step()
        for param in self.params:
            param.grad = None
        end = self.dev.mark(stream)
        with self.gates.cond:
            self.updated, self.update_end = rnd, end
            self.updates.append((rnd, start, end))
            self.gates.cond.notify_all()

    def timeline(self, base, since: int = 0) -> dict:
        """Seconds since `base` of the passes and updates of rounds >= since (after a sync)."""
        s = lambda m: base.elapsed_time(m) / 1e3 if self.dev.cuda else m - base  # noqa: E731
        return {"passes": [{"wave": w, "round": r, "phase": p, "start": s(a), "end": s(b)}
                           for w, r, p, a, b in self.gates.passes if r >= since],
                "updates": [{"round": r, "start": s(a), "end": s(b)}
                            for r, a, b in self.updates if r >= since]}


def schedule_summary(timeline: dict) -> dict:
    """The share of tock's forward time beside tick's backward of the same round, and the
    largest overlap of two passes of one gate (<= 0 when the gates hold)."""
    at = {(p["wave"], p["round"], p["phase"]): p for p in timeline["passes"]}
    beside = tock = 0.0
    for (wave, rnd, phase), p in at.items():
        q = at.get((0, rnd, "backward"))
        if wave == 1 and phase == "forward" and q:
            tock += p["end"] - p["start"]
            beside += max(0.0, min(p["end"], q["end"]) - max(p["start"], q["start"]))
    by_start = sorted(timeline["passes"], key=lambda p: p["start"])
    same_gate = [a["end"] - b["start"] for phase in ("forward", "backward")
                 for a, b in pairwise(p for p in by_start if p["phase"] == phase)]
    return {"tock_forward_beside_tick_backward": beside / tock if tock else 0.0,
            "max_same_gate_overlap_s": max(same_gate, default=0.0)}


def one_wave(model, optimizer, batch, steps: int):
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(batch[0]), batch[1]).backward()
        optimizer.step()


def release(dev: Device):
    """Frees what the last configuration cached, so that the next starts from the weights."""
    dev.sync()
    gc.collect()
    if dev.cuda:
        torch.cuda.empty_cache()


def measure(config: str, model, initial: dict, args, dev: Device) -> dict:
    """One configuration from the initial weights: warm-up, then the timed, peak-tracked steps."""
    model.load_state_dict(initial)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    generator = torch.Generator().manual_seed(1)
    waves = 2 if config == "2 waves at B" else 1
    per_wave = 2 * args.batch if config == "one wave at 2B" else args.batch
    shape = (per_wave, 3, args.image_size, args.image_size)
    batches = [(torch.randn(shape, generator=generator).to(dev.device),
                torch.randint(0, 1000, (per_wave,), generator=generator).to(dev.device))
               for _ in range(waves)]
    runner = WaveRunner(model, optimizer, batches, dev) if waves > 1 else None
    step = runner.run if runner else lambda n: one_wave(model, optimizer, batches[0], n)
    step(args.warmup)
    dev.sync()
    if dev.cuda:
        torch.cuda.reset_peak_memory_stats(dev.device)
    base, start = dev.mark(), time.perf_counter()
    step(args.steps)
    dev.sync()
    seconds = time.perf_counter() - start
    allocated, reserved = (None, None) if not dev.cuda else (
        torch.cuda.max_memory_allocated(dev.device), torch.cuda.max_memory_reserved(dev.device))
    result = {"config": config, "waves": waves, "batch_per_wave": per_wave, "steps": args.steps,
              "seconds": seconds, "samples_per_s": args.steps * waves * per_wave / seconds,
              "peak_allocated_bytes": allocated, "peak_reserved_bytes": reserved}
    if runner:
        result["schedule"] = schedule_summary(runner.timeline(base, since=args.warmup))
    model.zero_grad(set_to_none=True)
    return result  # its optimizer, data and runner go with this frame; then release()


def measure_model(name: str, args, dev: Device) -> dict:
    torch.manual_seed(0)
    model = build_model(name).to(dev.device).train()
    initial = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    runs = {config: [] for config in CONFIGS}
    for _ in range(args.repeats):  # interleaved, so that drift hits every configuration alike
        for config in CONFIGS:
            runs[config].append(measure(config, model, initial, args, dev))
            release(dev)
    params = sum(p.numel() for p in model.parameters())
    del model, initial
    release(dev)
    rows = {}
    for config, results in runs.items():
        peak = {key: None if results[0][key] is None else max(r[key] for r in results)
                for key in ("peak_allocated_bytes", "peak_reserved_bytes")}
        rows[config] = {**results[0], **peak, "repeats": results,
                        "samples_per_s": statistics.median(r["samples_per_s"] for r in results)}
    return {"model": name, "parameter_bytes": 4 * params, "configs": rows}


def ratio(a, b=GB) -> str:  # by default bytes as GB; n/a where either is unknown
    return "n/a" if a is None or b is None else f"{a / b:.3f}"


def table(result: dict, predicted: dict | None, batch: int) -> str:
    rows, model = result["configs"], result["model"]
    base = rows["one wave at B"]["samples_per_s"]
    simulated = {"one wave at 2B": predicted and predicted["one_wave"]["peak_bytes"],
                 "2 waves at B": predicted and predicted["waves"]["peak_bytes"]}
    lines = [f"\n{model} (parameters {ratio(result['parameter_bytes'])} GB in fp32)\n",
             "| config | peak allocated GB | peak reserved GB | simulator's peak GB (predicted) "
             "| samples/s | x one wave at B |", "|---|---|---|---|---|---|"]
    for config, row in rows.items():
        label = config.replace("2B", str(2 * batch)).replace("B", str(batch))
        lines.append(f"| {label} | {ratio(row['peak_allocated_bytes'])} | "
                     f"{ratio(row['peak_reserved_bytes'])} | {ratio(simulated.get(config))} | "
                     f"{row['samples_per_s']:.1f} | {row['samples_per_s'] / base:.2f}x |")
    waves, one = rows["2 waves at B"], rows["one wave at 2B"]
    lines.append(f"\npeak(2 waves of {batch}) / peak(one wave of {2 * batch}): allocated "
                 f"{ratio(waves['peak_allocated_bytes'], one['peak_allocated_bytes'])}, reserved "
                 f"{ratio(waves['peak_reserved_bytes'], one['peak_reserved_bytes'])}; simulator "
                 f"{ratio(predicted and predicted['ratio'], 1)} (predicted)")
    schedule = waves["schedule"]
    lines.append(f"schedule: {100 * schedule['tock_forward_beside_tick_backward']:.1f}% of tock's "
                 f"forward beside tick's backward; two passes of one gate overlapped by "
                 f"{max(0.0, schedule['max_same_gate_overlap_s']) * 1e3:.3f} ms at most")
    return "\n".join(lines)


def write_predicted(args):
    """The simulator's figures for --models at --batch per wave, as --predicted reads them."""
    models = {}
    for name in args.models:
        flags = ["simulate", "--model-profile", name, "--waves", "2", "--batch", str(args.batch)]
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            subprocess.run([args.gradsync, *flags, "--json", out.name], check=True,
                           stdout=subprocess.DEVNULL)
            doc = json.load(open(out.name))
        models[name] = {"command": "gradsync " + " ".join(flags), "device": doc["device"],
                        "one_wave": doc["one_wave"], "waves": doc["waves"],
                        "ratio": doc["waves"]["peak_bytes"] / doc["one_wave"]["peak_bytes"]}
    out = {"batch_per_wave": args.batch, "note": "gradsync simulate's prediction", "models": models}
    Path(args.write_predicted).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.write_predicted}")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet50,vgg19", type=lambda text: text.split(","),
                        help="comma-separated")
    parser.add_argument("--batch", type=int, default=32, help="B, per wave")
    parser.add_argument("--steps", type=int, default=20, help="timed steps (rounds)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps (rounds) first")
    parser.add_argument("--repeats", type=int, default=3, help="of the 3 configurations, in turn")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--out", default=".", help="directory for wavelet-memory-<model>.json")
    parser.add_argument("--predicted", help="the simulator's figures (--write-predicted)")
    parser.add_argument("--write-predicted", help="write the simulator's figures here, then exit")
    parser.add_argument("--gradsync", default="build/apps/gradsync/gradsync")
    args = parser.parse_args(argv)
    if any(model not in BUILTIN_BATCH for model in args.models):
        parser.error(f"unknown model in {args.models} (valid: {', '.join(BUILTIN_BATCH)})")
    if args.batch < 1 or args.steps < 1 or args.warmup < 0 or args.repeats < 1:
        parser.error("--batch, --steps and --repeats must be >= 1, --warmup >= 0")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.write_predicted:
        write_predicted(args)
        return 0
    dev = Device(torch.device(args.device))
    if dev.cuda and not torch.cuda.is_available():
        sys.exit("gpu_wavelet_memory: no CUDA device (--device cpu runs it on the CPU)")
    predicted = json.loads(Path(args.predicted).read_text()) if args.predicted else None
    if predicted and predicted["batch_per_wave"] != args.batch:
        print(f"note: --predicted is for batch {predicted['batch_per_wave']}, not shown")
        predicted = None
    if dev.cuda:
        set_tf32(False)
    torch.backends.cudnn.benchmark = True
    gpu = torch.cuda.get_device_name(dev.device) if dev.cuda else "none (CPU)"
    source = (f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC: `python3 "
              f"scripts/gpu_wavelet_memory.py {' '.join(argv)}`; torch {torch.__version__} "
              f"(CUDA {torch.version.cuda}), torchvision {torchvision.__version__}, GPU {gpu}; "
              f"fp32 (TF32 off), image {args.image_size}, {args.warmup} warm-up + {args.steps} "
              f"timed steps per configuration, {args.repeats} interleaved repeats (max peak, "
              f"median samples/s)")
    print(source)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    failed = []
    for name in args.models:
        try:
            result = measure_model(name, args, dev)
        except Exception:  # the next model still runs: a device run may be the only one
            traceback.print_exc()
            failed.append(name)
            continue
        guess = predicted["models"].get(name) if predicted else None
        result.update(source=source, predicted=guess)
        print(table(result, guess, args.batch), flush=True)
        path = Path(args.out) / f"wavelet-memory-{name}.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {path}")
    return f"gpu_wavelet_memory: {', '.join(failed)} failed (above)" if failed else 0


if __name__ == "__main__":
    sys.exit(main())
