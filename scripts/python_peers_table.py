#!/usr/bin/python3
"""The table of scripts/bench_python_peers.sh: from DIR/SYSTEM-MODEL-WORKERS-rR.json (each
system's own JSON: gs_train.py's and ddp_train.py's samples_per_s, `gradsync train --metrics`'
summary.samples_per_s), per model and worker count the median samples/s of each system and the
median over repeats of gradsync-python's ratio to each other system in the same repeat.
Standard library only."""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

SYSTEMS = ("gradsync-python", "pytorch-ddp", "pytorch-ddp+alloc", "gradsync-cli")
NAME = re.compile(r"^(?P<system>.+)-(?P<model>[a-z0-9]+)-(?P<workers>\d+)-r(?P<repeat>\d+)\.json$")


def samples_per_s(path: Path) -> float:
    data = json.loads(path.read_text())
    return data["summary"]["samples_per_s"] if "summary" in data else data["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--markdown", required=True)
    parser.add_argument("--setup", default="")
    parser.add_argument("--command", default="")
    args = parser.parse_args()
    runs = defaultdict(dict)  # (model, workers) -> repeat -> system -> samples/s
    for path in sorted(Path(args.dir).glob("*.json")):
        match = NAME.match(path.name)
        if match:
            key = (match["model"], int(match["workers"]))
            runs[key].setdefault(int(match["repeat"]), {})[match["system"]] = samples_per_s(path)
    rows, lines = [], [
        f"`{args.command}`", "", args.setup, "",
        "| model | workers | gradsync-python | DDP | DDP + allocator | gradsync CLI "
        "| python / DDP | python / DDP + allocator | python / CLI |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (model, workers), repeats in sorted(runs.items()):
        medians = {s: statistics.median(r[s] for r in repeats.values() if s in r)
                   for s in SYSTEMS if any(s in r for r in repeats.values())}
        ratios = {s: statistics.median(r["gradsync-python"] / r[s] for r in repeats.values()
                                       if s in r and "gradsync-python" in r)
                  for s in SYSTEMS[1:] if s in medians}
        rows.append({"model": model, "workers": workers, "repeats": len(repeats),
                     "samples_per_s": medians, "python_ratio": ratios,
                     "per_repeat": repeats})
        cell = lambda s: f"{medians[s]:,.1f}" if s in medians else "–"  # noqa: E731
        ratio = lambda s: f"{ratios[s]:.2f}×" if s in ratios else "–"  # noqa: E731
        lines.append(f"| {model} | {workers} | {cell(SYSTEMS[0])} | {cell(SYSTEMS[1])} | "
                     f"{cell(SYSTEMS[2])} | {cell(SYSTEMS[3])} | {ratio(SYSTEMS[1])} | "
                     f"{ratio(SYSTEMS[2])} | {ratio(SYSTEMS[3])} |")
    Path(args.out).write_text(json.dumps({"setup": args.setup, "command": args.command,
                                          "rows": rows}, indent=2) + "\n")
    Path(args.markdown).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
