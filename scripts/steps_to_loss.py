#!/usr/bin/env python3
"""Steps and training time to a held-out loss, from `gradsync train --eval-every N --metrics`
files (docs/performance.md, "Language model: convergence per H"): for each file, the first
evaluation at or below --target, the crossing interpolated linearly from the evaluation before
it, and the factor against a reference file's crossing (gradsync tune's convergence factor,
src/sim/convergence_costs.cc). A Markdown table.

  scripts/steps_to_loss.py --target 1.9939 [--reference results/lm-convergence/ssgd.json] FILE...
"""
import argparse
import json


def crossing(path, target):
    with open(path) as f:
        run = json.load(f)
    before = None
    for e in run["evaluations"]:
        if e["held_out_loss"] <= target:
            if before is None:
                return run, e["step"], e["seconds"], None, e
            share = (before["held_out_loss"] - target) / (before["held_out_loss"] - e["held_out_loss"])
            step = before["step"] + share * (e["step"] - before["step"])
            seconds = before["seconds"] + share * (e["seconds"] - before["seconds"])
            return run, step, seconds, before, e
        before = e
    return run, None, None, before, None


def label(run):
    config = run["config"]
    return config["sync"] + ("" if config["compress"] == "none" else " / " + config["compress"])


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=float, required=True)
    parser.add_argument("--reference", help="the run whose crossing is factor 1")
    parser.add_argument("files", nargs="+")
    a = parser.parse_args()
    reference = crossing(a.reference, a.target)[1] if a.reference else None
    print("| method | reaches the target at step | (evaluations around it) | training s | factor "
          "| final loss |")
    print("|---|---:|---|---:|---:|---:|")
    for path in a.files:
        run, step, seconds, before, after = crossing(path, a.target)
        final = run["summary"]["final_held_out_loss"]
        if step is None:
            steps = run["summary"]["steps"]
            bound = f"≥ {steps / reference:.2f}" if reference else "—"
            print(f"| {label(run)} | not within {steps} | | | {bound} | {final:.4f} |")
            continue
        around = (f"{before['held_out_loss']:.4f} at {before['step']}, " if before else "") + \
            f"{after['held_out_loss']:.4f} at {after['step']}"
        factor = f"{step / reference:.2f}" if reference else "—"
        print(f"| {label(run)} | {step:.0f} | {around} | {seconds:.1f} | {factor} | {final:.4f} |")


if __name__ == "__main__":
    main()
