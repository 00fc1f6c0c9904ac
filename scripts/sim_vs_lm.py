#!/usr/bin/env python3
"""The simulator's outer rounds (sim/outer_rounds.h) against measured language-model runs
(docs/simulator.md, "Validation"): for each `gradsync train --model gpt --metrics` file in DIR
(bench_lm.py's output, e.g. results/lm-10mbit), a gpt profile whose step computes what the run
computed (its mean step less its exposed communication: scripts/lm_profile.py), simulated with
the run's --sync, workers and link; a Markdown table of the predicted and measured exposed
communication and step per method.

  scripts/sim_vs_lm.py --build build --dir results/lm-10mbit --bandwidth 10mbit [--latency 50us]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lm_profile  # noqa: E402


def predict(build, run, bandwidth, latency, workdir):
    config, per_step = run["config"], run["per_step"]
    computed_ms = per_step["step_ms"] - per_step["exposed_comm_ms"]
    args = argparse.Namespace(layers=2, width=128, heads=4, context=64)
    layers = lm_profile.gpt_layers(args)
    profile = lm_profile.profile("gpt", "this machine's CPU", "sim_vs_lm.py", layers,
                                 computed_ms / 1e3, config["batch_size"], 0, codecs_on_cpu=True)
    path = os.path.join(workdir, "gpt.json")
    with open(path, "w") as f:
        json.dump(profile, f)
    out = os.path.join(workdir, "prediction.json")
    command = [os.path.join(build, "apps", "gradsync", "gradsync"), "simulate", "--model-profile",
               path, "--workers", str(config["workers"]), "--bandwidth", bandwidth, "--latency",
               latency, "--sync", config["sync"], "--steps", "400", "--json", out]
    if config["compress"] != "none":
        command += ["--compress", config["compress"]]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return computed_ms, json.load(f)["results"][0]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--dir", required=True)
    parser.add_argument("--bandwidth", required=True)
    parser.add_argument("--latency", default="50us")
    a = parser.parse_args()
    print("| --sync / --compress | computed (ms) | exposed, measured | exposed, predicted | step, measured | "
          "step, predicted | step error |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as workdir:
        for path in sorted(glob.glob(os.path.join(a.dir, "*.json"))):
            with open(path) as f:
                run = json.load(f)
            computed, p = predict(a.build, run, a.bandwidth, a.latency, workdir)
            measured = run["per_step"]
            error = p["step_ms"] / measured["step_ms"] - 1
            method = run["config"]["sync"]
            if run["config"]["compress"] != "none":
                method += " / " + run["config"]["compress"]
            print(f"| {method} | {computed:.1f} | {measured['exposed_comm_ms']:.1f} "
                  f"| {p['exposed_comm_ms']:.1f} | {measured['step_ms']:.1f} | {p['step_ms']:.1f} "
                  f"| {error:+.1%} |")


if __name__ == "__main__":
    main()
