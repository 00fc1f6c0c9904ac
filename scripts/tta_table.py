#!/usr/bin/python3
"""Markdown table of time-to-accuracy from `gradsync train --metrics` files (one per method).

Time to target = training time (evaluations excluded) at the first evaluation reaching the
target accuracy; "not reached" when none did within the run. The speed-up column compares
with the row whose method is "none" (dense SSGD), if present."""
import argparse
import json


def time_to(evaluations, target):
    for e in evaluations:
        if e["test_accuracy"] >= target:
            return e["seconds"], e["step"]
    return None, None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    rows = []
    for path in args.files:
        doc = json.load(open(path))
        seconds, step = time_to(doc["evaluations"], args.target)
        rows.append((doc["config"]["compress"], seconds, step, doc))
    dense = next((r[1] for r in rows if r[0] == "none"), None)
    print(f"| method | time to {100 * args.target:.0f}% (s) | steps | speed-up vs dense | final accuracy | samples/s | MB sent per step | ratio | encode + decode (ms/step) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for method, seconds, step, doc in rows:
        s, p = doc["summary"], doc["per_step"]
        reached = f"{seconds:.0f}" if seconds is not None else "not reached"
        speedup = f"{dense / seconds:.2f}x" if dense and seconds else "-"
        print(f"| {method} | {reached} | {step if step else '-'} | {speedup} | "
              f"{100 * s['final_test_accuracy']:.2f}% | {s['samples_per_s']:.0f} | "
              f"{p['bytes_sent'] / 1e6:.2f} | {p.get('compression_ratio', 1):.1f} | "
              f"{p.get('encode_ms', 0) + p.get('decode_ms', 0):.1f} |")


if __name__ == "__main__":
    main()
