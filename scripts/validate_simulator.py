#!/usr/bin/env python3
"""Predicted vs measured step time on this machine (docs/simulator.md, "Validation").

For one model and worker count: measures a profile with `gradsync profile` under the same load
as training (--workers W concurrent processes), measures each compressor's codec speed with
`gradsync bench compress`, then for every configuration runs real `gradsync train` (synthetic
data, the in-transport --bandwidth limiter, one rank per emulated host) and `gradsync simulate`
on the measured profile, and reports both step times and the error. The simulated latency is
this host's per-message software latency, measured with a 4-byte `gradsync bench allreduce`.

With --compute emulate:PROFILE (a built-in profile or a JSON file) and --compute-scale X, the
training runs use emulated accelerator compute (`gradsync train --compute`: the profile's layer
times on a sleeping device, the real engine and network) and the simulator the same profile at
the same scale: no profile is measured, and the comparison isolates the network and scheduling
model from CPU contention (on this 2-core machine, CPU training's compute slows down while
communication runs beside it, which the simulator does not model).

The measured step time is the steady state: (total of a long run - total of a short run) /
(difference in steps), so the first steps' allocations and warm-up are not in it.

  scripts/validate_simulator.py [--build build] [--model vgg11] [--workers 2] [--batch 64]
      [--compute emulate:PROFILE --compute-scale X]
      [--short 3] [--long 13] [--out results/sim-validation]
      [--configs "fifo@200mbit wfbp@200mbit p3@200mbit wfbp@1gbit wfbp+fp16@200mbit ..."]
A configuration is SCHEDULE[+COMPRESS][+ps][+sync:SYNC]@BANDWIDTH[/N], e.g. wfbp+sync:odsgd@1gbit or
wfbp+sync:sharded:fc=exchange@1gbit or wfbp+hitopk:0.01@200mbit/2. /N trains hosts of N ranks
(`--ranks-per-host N`: --bandwidth shapes each rank's TCP links to other hosts, local ranks talk
through unshaped shared memory) and simulates hosts of N devices whose NIC carries N times
BANDWIDTH (the per-rank limiters together), with this machine's measured shared-memory rate and
latency between the devices of a host (delayed strategies train after 1 warm-up step, the
simulator predicts their steady state). Writes OUT/validation.json and prints a Markdown table.
Measurements already in OUT (profile, latency, codec and train JSON) are kept, so a second run
re-simulates the same measurements; delete OUT to measure again.
"""
import argparse
import json
import os
import subprocess
import sys

DEFAULT_CONFIGS = ("fifo@200mbit wfbp@200mbit fusion:25@200mbit p3@200mbit wfbp@1gbit "
                   "p3@1gbit wfbp+fp16@200mbit wfbp+topk:0.01@200mbit wfbp+ps@200mbit")


def run_unless(path, cmd, shm=False):
    """Runs `cmd` unless its output file `path` exists (a measurement kept from an earlier run)."""
    if not os.path.exists(path):
        run(cmd, shm)


def run(cmd, shm=False):
    """Runs `cmd`; local ranks talk over TCP unless `shm` (see main)."""
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    env = dict(os.environ, GRADSYNC_SHM="1" if shm else "0")
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-2000:]}")
    return done.stdout


def parse_config(text):
    spec, link = text.split("@")
    bandwidth, _, per_host = link.partition("/")
    parts = spec.split("+")
    # train's p3 keeps 40,000-element slices where simulate's "p3" would take the link's
    # (docs/algorithms.md, "The slice on a known link"): state train's, so both run the same.
    schedule = "p3:slice=40000" if parts[0] == "p3" else parts[0]
    config = {"label": text, "schedule": schedule, "bandwidth": bandwidth,
              "per_host": int(per_host or 1), "compress": "none", "ps": False, "sync": "ssgd"}
    for part in parts[1:]:
        if part == "ps":
            config["ps"] = True
        elif part.startswith("sync:"):
            config["sync"] = part[len("sync:"):]
        else:
            config["compress"] = part
    return config


def strategy_flags(config):
    """train's and simulate's --sync, --ps and --compress for a configuration."""
    flags = ["--schedule", config["schedule"], "--compress", config["compress"],
             "--sync", config["sync"]]
    if config["ps"]:
        flags.append("--ps")
    return flags


def file_label(args, config):
    label = config["label"].replace(":", "_").replace("=", "_").replace("/", "-per-host-")
    return label if args.compute == "real" else f"{label}-{args.compute[8:]}x{args.compute_scale:g}"


def codec_ns_per_element(gradsync, method, workers, out):
    """Encode once, decode every rank's encoding (allgather) or once (linear): ns per element."""
    path = os.path.join(out, f"codec-{method.replace(':', '_')}.json")
    run_unless(path, [gradsync, "bench", "compress", "--methods", method, "--sizes", "1M",
                      "--json", path])
    row = next(r for r in json.load(open(path)) if r["method"] == method)
    decodes = 1 if method.startswith(("fp16", "powersgd", "gradiveq")) else workers
    ns = 4 / row["encode_gbps"]
    if row["decode_gbps"] > 0:
        ns += decodes * 4 / row["decode_gbps"]
    return ns


def message_latency_us(gradsync, workers, out):
    """This host's per-message software latency: a 4-byte ring allreduce is 2 (W - 1) messages."""
    path = os.path.join(out, "latency.json")
    run_unless(path, [gradsync, "bench", "allreduce", "--workers", str(workers), "--min-bytes",
                      "4", "--max-bytes", "4", "--iters", "200", "--json", path])
    time_us = json.load(open(path))["results"][0]["time_us"]
    return time_us / (2 * (workers - 1))


def shm_link(gradsync, out):
    """The rate and per-message latency between two local ranks over shared memory (the links
    inside an emulated host): a 16 MiB and a 4-byte allreduce of 2 ranks."""
    path = os.path.join(out, "shm-link.json")
    run_unless(path, [gradsync, "bench", "allreduce", "--workers", "2", "--min-bytes", "4",
                      "--max-bytes", "16M", "--factor", "4194304", "--iters", "20",
                      "--json", path], shm=True)
    small, large = json.load(open(path))["results"][:2]
    return large["busbw_gbps"] * 8, small["time_us"] / 2


def measured_step_ms(gradsync, args, config, out):
    totals = {}
    for steps in (args.short, args.long):
        path = os.path.join(out, f"train-{file_label(args, config)}-{steps}.json")
        cmd = [gradsync, "train", "--workers", str(args.workers), "--steps", str(steps),
               "--bandwidth", config["bandwidth"], "--metrics", path, "--quiet",
               "--compress-warmup", "0", *strategy_flags(config)]
        if config["per_host"] > 1:
            cmd += ["--ranks-per-host", str(config["per_host"])]
        if args.compute == "real":
            cmd += ["--model", args.model, "--dataset", "synthetic", "--batch-size",
                    str(args.batch)]
        else:
            cmd += ["--compute", args.compute, "--compute-scale", str(args.compute_scale)]
        if config["sync"].split(":")[0] in ("odsgd", "ssdsgd", "cdsgd"):
            cmd += ["--delay-warmup", "1"]
        run_unless(path, cmd, shm=config["per_host"] > 1)
        per_step = json.load(open(path))["per_step"]
        totals[steps] = per_step["step_ms"] * steps
    return (totals[args.long] - totals[args.short]) / (args.long - args.short)


def host_nic(bandwidth, ranks):
    """`ranks` times a --bandwidth value (e.g. 200mbit x 2 = 400mbit)."""
    digits = bandwidth.rstrip("abcdefghijklmnopqrstuvwxyz")
    return f"{float(digits) * ranks:g}{bandwidth[len(digits):]}"


def predicted(gradsync, args, config, profile, codec_ns, latency_us, out):
    path = os.path.join(out, f"sim-{file_label(args, config)}.json")
    per_host = config["per_host"]
    cmd = [gradsync, "simulate", "--model-profile", profile, "--workers", str(args.workers),
           "--bandwidth", host_nic(config["bandwidth"], per_host),
           "--latency", f"{latency_us:.1f}us",
           "--codec-ns-per-element", str(codec_ns), "--json", path, *strategy_flags(config)]
    if per_host > 1:
        gbit, local_us = shm_link(gradsync, out)
        cmd += ["--gpus-per-host", str(per_host), "--local-bandwidth", f"{gbit:.2f}gbit",
                "--local-latency", f"{local_us:.1f}us"]
    if args.compute != "real":
        cmd += ["--compute-scale", str(args.compute_scale)]
    run(cmd)
    return json.load(open(path))["results"][0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--model", default="vgg11")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--short", type=int, default=3)
    parser.add_argument("--long", type=int, default=13)
    parser.add_argument("--out", default="results/sim-validation")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS)
    parser.add_argument("--compute", default="real",
                        help="real (measure a profile of --model) or emulate:PROFILE")
    parser.add_argument("--compute-scale", type=float, default=1.0)
    args = parser.parse_args()
    if args.compute != "real" and not args.compute.startswith("emulate:"):
        sys.exit("--compute is real or emulate:PROFILE")
    gradsync = os.path.join(args.build, "apps", "gradsync", "gradsync")
    # Local ranks over TCP (run()'s default): the training runs' bytes all cross the shaped links
    # the simulator models, and the latency measurement (no --bandwidth, so otherwise shared
    # memory) measures the same transport as they use. Hosts of several ranks (/N) use shared
    # memory inside, as the simulator's devices of a host do.
    os.makedirs(args.out, exist_ok=True)
    if args.compute == "real":
        profile = os.path.join(args.out, f"profile-{args.model}-{args.workers}.json")
        run_unless(profile, [gradsync, "profile", "--model", args.model, "--workers",
                             str(args.workers), "--batch-size", str(args.batch), "--output",
                             profile])
    else:
        profile = args.compute[len("emulate:"):]
    latency = message_latency_us(gradsync, args.workers, args.out)
    rows = []
    for text in args.configs.split():
        config = parse_config(text)
        codec = 0.0
        if config["compress"] != "none":
            codec = codec_ns_per_element(gradsync, config["compress"], args.workers, args.out)
        sim = predicted(gradsync, args, config, profile, codec, latency, args.out)
        measured = measured_step_ms(gradsync, args, config, args.out)
        error = (sim["step_ms"] - measured) / measured
        rows.append({"config": text, "measured_ms": measured, "predicted_ms": sim["step_ms"],
                     "predicted_compute_ms": sim["compute_ms"],
                     "predicted_exposed_ms": sim["exposed_comm_ms"],
                     "codec_ns_per_element": codec, "error": error})
        print(f"{text}: measured {measured:.0f} ms, predicted {sim['step_ms']:.0f} ms "
              f"({100 * error:+.1f}%)", file=sys.stderr, flush=True)
    workload = (f"{args.model}, batch {args.batch}, synthetic data" if args.compute == "real"
                else f"emulated compute ({args.compute}, compute x {args.compute_scale:g})")
    setup = (f"{workload}, {args.workers} workers on this machine, in-transport --bandwidth "
             f"limiter; steady-state step from runs of {args.short} and {args.long} steps; "
             f"simulated with the measured per-message latency {latency:.0f} us and codec costs")
    json.dump({"setup": setup, "profile": profile, "latency_us": latency, "rows": rows},
              open(os.path.join(args.out, "validation.json"), "w"), indent=1)
    print(f"Setup: {setup}.\n")
    print("| configuration | measured ms | predicted ms | error | predicted compute / exposed ms |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['config']} | {r['measured_ms']:.0f} | {r['predicted_ms']:.0f} | "
              f"{100 * r['error']:+.1f}% | {r['predicted_compute_ms']:.0f} / "
              f"{r['predicted_exposed_ms']:.0f} |")
    worst = max(abs(r["error"]) for r in rows)
    print(f"\nLargest error: {100 * worst:.1f}% (target: 10%).")


if __name__ == "__main__":
    main()
