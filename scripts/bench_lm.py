#!/usr/bin/env python3
"""The language model across synchronization methods (docs/performance.md, "Language model:
DiLoCo against data-parallel training"): `gradsync train --model gpt` on Debian's fortunes with
the same workers, batch and steps (so the same tokens) for each --sync method, and a Markdown
table of the held-out loss, the bytes each worker sent per step and the training time, each
against ssgd (data-parallel, DDP's algorithm). Real CPU training on this host.

  scripts/bench_lm.py [--build build] [--workers 4] [--steps 600] [--batch 16]
      [--methods "ssgd localsgd:50 diloco:10 diloco:50 diloco:200"] [--bandwidth 100mbit]
      [--out results/lm]

A method is a --sync value, or SYNC/COMPRESS for --sync SYNC --compress COMPRESS (diloco's
compressed pseudo-gradients: "diloco:50,outer_lr=1,outer_momentum=0/topk:0.05"); COMPRESS+momentum
adds --compress-momentum (1-bit Adam: "ssgd/onebit+momentum"), and COMPRESS+sign --optimizer
sign with --compress-warmup 0 (DeMo, which has no dense start: "ssgd/demo:32,ef_decay=0.999+sign").

With --bandwidth every rank is an emulated host of its own whose TCP links are shaped to it
(`gradsync train --bandwidth`). Runs already in OUT are kept (delete OUT to measure again).
"""
import argparse
import json
import os
import subprocess
import sys


def run(build, out, method, args):
    path = os.path.join(out, method.replace(":", "_").replace(",", "_").replace("/", "+") +
                        ".json")
    if not os.path.exists(path):
        sync, _, compress = method.partition("/")
        command = [os.path.join(build, "apps", "gradsync", "gradsync"), "train", "--model", "gpt",
                   "--workers", str(args.workers), "--steps", str(args.steps), "--batch-size",
                   str(args.batch), "--sync", sync, "--quiet", "--metrics", path]
        compress, plus, mode = compress.partition("+")
        if compress:
            command += ["--compress", compress]
        if mode == "momentum":
            command += ["--compress-momentum"]
        elif mode == "sign":
            command += ["--optimizer", "sign", "--compress-warmup", "0"]
        elif plus:
            sys.exit(f"unknown mode '+{mode}' in {method}: +momentum or +sign")
        if args.bandwidth:
            command += ["--bandwidth", args.bandwidth]
        print("$", " ".join(command), flush=True)
        subprocess.run(command, check=True)
    with open(path) as f:
        return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--methods", default="ssgd localsgd:50 diloco:10 diloco:50 diloco:200")
    parser.add_argument("--bandwidth", default="")
    parser.add_argument("--out", default="results/lm")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    runs = {m: run(args.build, args.out, m, args) for m in args.methods.split()}
    base = runs.get("ssgd")
    print(f"\n{args.workers} workers x {args.batch} windows of 64 bytes, {args.steps} steps"
          f"{', ' + args.bandwidth + ' links' if args.bandwidth else ''}:\n")
    print("| --sync | held-out loss (nats/token) | vs ssgd | bits/byte | bytes sent per step "
          "| vs ssgd | training time (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for method, doc in runs.items():
        loss = doc["summary"]["final_held_out_loss"]
        sent = doc["per_step"]["bytes_sent"]
        seconds = doc["summary"]["seconds"]
        vs_loss = f"{100 * (loss / base['summary']['final_held_out_loss'] - 1):+.1f}%" if base else ""
        vs_bytes = f"1/{base['per_step']['bytes_sent'] / sent:.0f}" if base and sent > 0 else ""
        print(f"| {method} | {loss:.4f} | {vs_loss} | {doc['summary']['final_bits_per_byte']:.3f} "
              f"| {sent:,.0f} | {vs_bytes} | {seconds:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
