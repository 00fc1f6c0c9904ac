#!/usr/bin/env python3
"""Peak device memory and throughput of two tick-tock waves of B against one wave of 2B (and
of B) on one CUDA device (issue 23, item 5), for torchvision's resnet50 and vgg19 (fp32, TF32 off,
1000 classes, B = 32 as the built-in profiles; synthetic input; SGD with momentum), next to
`gradsync simulate --waves 2`'s prediction. docs/simulator.md, "Checking the memory model on a
GPU", says what runs; in short: the two waves are the trainer's `--waves 2 --wave-consistency
accumulate` on ONE model (scripts/gpu_waves.py: a CUDA stream each, the gates of
torch/waves/gates.h kept on the device by events, per-wave torch.autograd.grad, one SGD step per
round from the mean), launched by one host thread (--launch events) and/or a thread per wave
(--launch threads); peaks are torch.cuda.max_memory_allocated/reserved over --steps after
--warmup, each configuration from the weights alone (release() checks it).

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
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

import torch
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_profile import BUILTIN_BATCH, build_model, set_tf32  # noqa: E402
from gpu_waves import LAUNCHES, Device, WaveRunner, one_wave, schedule_summary  # noqa: E402

GB = 1e9
LEFT_OVER_TOLERANCE_BYTES = 4 << 20  # after release(): the weights plus this, else a warning


def configs(launches) -> list:
    return ["one wave at B", "one wave at 2B", *(f"2 waves at B, {how}" for how in launches)]


def release(dev: Device, model=None):
    """Frees what the last configuration left cached, so that the next starts from the weights,
    and returns the bytes still allocated beyond `model`'s (None on a CPU). cuBLAS keeps a
    workspace (32 MiB on Hopper) per (handle, stream) it has run on, allocated from the caching
    allocator and never freed: on an H100 (torch 2.11) each 2-wave configuration's new streams
    and threads left 196 MiB, which every later peak carried (the +0.206 GB per repeat); after
    torch._C._cuda_clearCublasWorkspaces() nothing beyond the weights was left. So each
    configuration's peak is its own, its workspaces included."""
    dev.sync()
    gc.collect()
    if not dev.cuda:
        return None
    clear_cublas = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear_cublas:
        clear_cublas()
    torch.cuda.empty_cache()
    # the caching allocator rounds every block up to 512 bytes
    weights = 0 if model is None else sum(-(-t.numel() * t.element_size() // 512) * 512
                                          for t in model.state_dict().values() if t.is_cuda)
    left_over = torch.cuda.memory_allocated(dev.device) - weights
    if left_over > LEFT_OVER_TOLERANCE_BYTES:
        print(f"warning: {left_over / 2**20:.1f} MiB still allocated after release(), beyond "
              f"the weights' {weights / GB:.3f} GB: the next peaks include it", flush=True)
    return left_over


def measure(config: str, model, initial: dict, args, dev: Device) -> dict:
    """One configuration from the initial weights: warm-up, then the timed, peak-tracked steps."""
    model.load_state_dict(initial)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    generator = torch.Generator().manual_seed(1)
    waves = 2 if config.startswith("2 waves") else 1
    per_wave = 2 * args.batch if config == "one wave at 2B" else args.batch
    shape = (per_wave, 3, args.image_size, args.image_size)
    batches = [(torch.randn(shape, generator=generator).to(dev.device),
                torch.randint(0, 1000, (per_wave,), generator=generator).to(dev.device))
               for _ in range(waves)]
    launch = config.rpartition(", ")[2] if waves > 1 else None
    runner = WaveRunner(model, optimizer, batches, dev, launch) if waves > 1 else None
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
    result = {"config": config, "waves": waves, "batch_per_wave": per_wave, "launch": launch,
              "steps": args.steps, "seconds": seconds,
              "samples_per_s": args.steps * waves * per_wave / seconds,
              "peak_allocated_bytes": allocated, "peak_reserved_bytes": reserved}
    if runner:
        result["schedule"] = schedule_summary(runner.timeline(base, since=args.warmup))
    model.zero_grad(set_to_none=True)
    return result  # its optimizer, data and runner go with this frame; then release()


def measure_model(name: str, args, dev: Device) -> dict:
    torch.manual_seed(0)
    model = build_model(name).to(dev.device).train()
    initial = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    runs = {config: [] for config in configs(args.launch)}
    for _ in range(args.repeats):  # interleaved, so that drift hits every configuration alike
        for config in runs:
            result = measure(config, model, initial, args, dev)
            result["left_over_bytes_after_release"] = release(dev, model)
            runs[config].append(result)
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
    simulated = lambda config: predicted and (  # noqa: E731
        predicted["one_wave"] if config == "one wave at 2B" else
        predicted["waves"] if config.startswith("2 waves") else {}).get("peak_bytes")
    lines = [f"\n{model} (parameters {ratio(result['parameter_bytes'])} GB in fp32)\n",
             "| config | peak allocated GB | peak reserved GB | simulator's peak GB (predicted) "
             "| samples/s | x one wave at B |", "|---|---|---|---|---|---|"]
    for config, row in rows.items():
        label = config.replace("2B", str(2 * batch)).replace("B", str(batch))
        lines.append(f"| {label} | {ratio(row['peak_allocated_bytes'])} | "
                     f"{ratio(row['peak_reserved_bytes'])} | {ratio(simulated(config))} | "
                     f"{row['samples_per_s']:.1f} | {row['samples_per_s'] / base:.2f}x |")
    one = rows["one wave at 2B"]
    for waves in (row for row in rows.values() if row["waves"] > 1):
        lines.append(f"\n{waves['launch']}: peak(2 waves of {batch}) / peak(one wave of "
                     f"{2 * batch}): allocated "
                     f"{ratio(waves['peak_allocated_bytes'], one['peak_allocated_bytes'])}, "
                     f"reserved {ratio(waves['peak_reserved_bytes'], one['peak_reserved_bytes'])}"
                     f"; simulator {ratio(predicted and predicted['ratio'], 1)} (predicted)")
        schedule = waves["schedule"]
        lines.append(f"{waves['launch']}: {100 * schedule['tock_forward_beside_tick_backward']:.1f}"
                     f"% of tock's forward beside tick's backward; two passes of one gate "
                     f"overlapped by {max(0.0, schedule['max_same_gate_overlap_s']) * 1e3:.3f} ms "
                     f"at most")
    return "\n".join(lines)


def quiet_accumulate_grad_stream_mismatch():
    """Both waves' graphs are alive at once (tock's forward beside tick's backward), so they
    share each parameter's AccumulateGrad node, created on tick's stream; torch >= 2.9 warns
    when tock's backward feeds it from tock's stream. Harmless here: autograd.grad(inputs=)
    never runs the node; the engine at most makes tick's stream wait for tock's gradient and
    record_streams it there, and tick's stream then holds nothing that the gates do not
    already order after tock's backward (its next work is the next round's forward, after the
    update, after both backwards). It is inherent to two waves on one set of weights."""
    graph = torch.autograd.graph
    if hasattr(graph, "set_warn_on_accumulate_grad_stream_mismatch"):
        graph.set_warn_on_accumulate_grad_stream_mismatch(False)


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
    parser.add_argument("--launch", default="events", type=lambda text: text.split(","),
                        help="how the 2 waves are launched, comma-separated (a row each): "
                        "events (one host thread, CUDA-event gates), threads (a thread a wave)")
    parser.add_argument("--cudnn-benchmark", default="on", choices=("on", "off"),
                        help="torch.backends.cudnn.benchmark (its workspaces count in the peaks)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--out", default=".", help="directory for wavelet-memory-<model>.json")
    parser.add_argument("--predicted", help="the simulator's figures (--write-predicted)")
    parser.add_argument("--write-predicted", help="write the simulator's figures here, then exit")
    parser.add_argument("--gradsync", default="build/apps/gradsync/gradsync")
    args = parser.parse_args(argv)
    if any(model not in BUILTIN_BATCH for model in args.models):
        parser.error(f"unknown model in {args.models} (valid: {', '.join(BUILTIN_BATCH)})")
    if not args.launch or any(how not in LAUNCHES for how in args.launch):
        parser.error(f"bad --launch {args.launch} (valid: {', '.join(LAUNCHES)})")
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
        quiet_accumulate_grad_stream_mismatch()
    torch.backends.cudnn.benchmark = args.cudnn_benchmark == "on"
    gpu = torch.cuda.get_device_name(dev.device) if dev.cuda else "none (CPU)"
    source = (f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC: `python3 "
              f"scripts/gpu_wavelet_memory.py {' '.join(argv)}`; torch {torch.__version__} "
              f"(CUDA {torch.version.cuda}), torchvision {torchvision.__version__}, GPU {gpu}; "
              f"fp32 (TF32 off), cuDNN benchmark {args.cudnn_benchmark}, 2 waves launched by "
              f"{' and '.join(args.launch)}, image {args.image_size}, {args.warmup} warm-up + "
              f"{args.steps} timed steps per configuration, {args.repeats} interleaved repeats (max peak, "
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
