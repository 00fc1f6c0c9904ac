#!/usr/bin/python3
"""Merges training throughput of gradsync and PyTorch DDP into one JSON and a Markdown table.

Inputs, per model, given as --gradsync MODEL FILE and --ddp MODEL FILE:
- gradsync: the metrics JSON of `gradsync train --metrics FILE`; `summary.samples_per_s` is
  the global samples/s over the run, `config` the configuration it ran with.
- DDP: the JSON of benchmarks/peers/ddp_train.py: {"system": "pytorch-ddp", "model",
  "workers", "batch_size", "threads", "dataset", "steps", "samples_per_s", "seconds",
  "final_loss", ...}.
The table gives, per model, both systems' global samples/s and gradsync's ratio to DDP
(> 1: gradsync is faster). The header block states the setup, so that a figure copied from it
carries its conditions. Exits non-zero, after printing, if a result disagrees with the setup
asked for (worker count, per-worker batch, model, dataset). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

MODEL_ORDER = ("mlp", "cnn", "resnet20", "vgg11", "transformer", "dlrm")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gradsync", nargs=2, action="append", default=[],
                        metavar=("MODEL", "FILE"), help="gradsync metrics JSON of MODEL")
    parser.add_argument("--ddp", nargs=2, action="append", default=[],
                        metavar=("MODEL", "FILE"), help="ddp_train.py JSON of MODEL")
    parser.add_argument("--out", required=True, help="merged JSON to write")
    parser.add_argument("--markdown", help="also write the table here")
    parser.add_argument("--nproc", type=int, help="host CPU count (nproc)")
    parser.add_argument("--workers", type=int, help="worker count asked for")
    parser.add_argument("--batch-size", type=int, help="per-worker batch asked for")
    parser.add_argument("--steps", type=int, help="steps asked for")
    parser.add_argument("--warmup-steps", type=int, help="DDP's untimed steps before")
    parser.add_argument("--threads", type=int, help="compute threads per worker")
    parser.add_argument("--dataset", help="synthetic or fashion-mnist")
    parser.add_argument("--load", help="1/5/15-minute load average before the runs")
    parser.add_argument("--load-after", help="1/5/15-minute load average after the runs")
    parser.add_argument("--date", help="when the run happened")
    parser.add_argument("--command", help="the exact command line of the run")
    parser.add_argument("--run", action="append", default=[],
                        help="'name: command' of one program run, repeatable")
    args = parser.parse_args(argv)
    if not args.gradsync and not args.ddp:
        parser.error("give at least one --gradsync or --ddp result")
    return args


def load_json(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a JSON object")
    return doc


def gradsync_result(model: str, path: str) -> dict[str, Any]:
    doc = load_json(path)
    summary = doc.get("summary")
    if not isinstance(summary, dict) or "samples_per_s" not in summary:
        raise ValueError(f"{path}: no summary.samples_per_s (is it `gradsync train --metrics`?)")
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    return {"model": model, "path": path, "samples_per_s": float(summary["samples_per_s"]),
            "config": config, "metrics": doc}


def ddp_result(model: str, path: str) -> dict[str, Any]:
    doc = load_json(path)
    for key in ("system", "model", "workers", "batch_size", "samples_per_s"):
        if key not in doc:
            raise ValueError(f"{path}: missing '{key}'")
    if doc["system"] != "pytorch-ddp":
        raise ValueError(f"{path}: system is '{doc['system']}', not 'pytorch-ddp'")
    return {"model": model, "path": path, "samples_per_s": float(doc["samples_per_s"]),
            "config": doc, "metrics": doc}


def config_value(config: dict[str, Any], *keys: str) -> Any:
    """The first of keys present in config (spellings differ: batch_size / batch-size)."""
    for key in keys:
        if key in config:
            return config[key]
    return None


def check(args: argparse.Namespace, results: dict[str, dict[str, dict]]) -> list[str]:
    """Disagreements with the setup asked for; a key a system does not report is not checked."""
    wanted = {
        "model": None,  # Filled per model below.
        "workers": args.workers,
        "batch_size": args.batch_size,
        "dataset": args.dataset,
    }
    spellings = {
        "model": ("model",),
        "workers": ("workers", "world_size"),
        "batch_size": ("batch_size", "batch-size", "batchSize"),
        "dataset": ("dataset",),
    }
    problems = []
    for model, by_system in results.items():
        wanted["model"] = model
        for system, result in by_system.items():
            for key, value in wanted.items():
                got = config_value(result["config"], *spellings[key])
                if value is not None and got is not None and str(got) != str(value):
                    problems.append(f"{system} {model} ran with {key} {got}, not {value}")
    return problems


def cell(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def setup_lines(args: argparse.Namespace, systems: set[str]) -> list[str]:
    global_batch = args.batch_size * args.workers if args.batch_size and args.workers else "?"
    lines = ["## Training throughput, gradsync vs. PyTorch DDP (gloo)", ""]
    lines.append(f"- host: {args.nproc or '?'} CPUs (nproc); all workers are processes on this "
                 f"one host; load average (1/5/15 min) {args.load or '?'} before, "
                 f"{args.load_after or '?'} after")
    lines.append(f"- workers: {args.workers or '?'}; batch {args.batch_size or '?'} per worker "
                 f"(global {global_batch}); {args.threads or '?'} compute thread(s) per worker "
                 "(OMP_NUM_THREADS; DDP also torch.set_num_threads)")
    lines.append(f"- dataset: {args.dataset or '?'}; SGD lr 0.05 momentum 0.9 seed 0 for both")
    lines.append(f"- samples/s: global (all workers). DDP: {args.steps or '?'} steps timed "
                 f"between two barriers on rank 0 after {args.warmup_steps} untimed warm-up "
                 "step(s); gradsync: `summary.samples_per_s` of its metrics over its "
                 f"{args.steps or '?'} steps (warm-up only if its command line below has "
                 "--warmup-steps)")
    lines.append("- ratio: gradsync / DDP samples/s (> 1: gradsync is faster)")
    lines.append(f"- date: {args.date or '?'}")
    lines.append(f"- command: `{args.command or '?'}`")
    for run in args.run:
        lines.append(f"  - `{run}`")
    for system in ("gradsync", "ddp"):
        if system not in systems:
            lines.append(f"- {system}: not measured in this run")
    return lines


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    header = ["model", "gradsync samples/s", "DDP samples/s", "gradsync/DDP", "DDP final loss"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for row in rows:
        ratio = row["gradsync_over_ddp"]
        cells = [
            row["model"],
            cell(row["gradsync_samples_per_s"], ",.1f"),
            cell(row["ddp_samples_per_s"], ",.1f"),
            "n/a" if ratio is None else f"{ratio:.2f}×",
            cell(row["ddp_final_loss"], ".4f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def model_key(model: str) -> tuple[int, str]:
    order = MODEL_ORDER.index(model) if model in MODEL_ORDER else len(MODEL_ORDER)
    return order, model


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    results: dict[str, dict[str, dict]] = {}
    for system, pairs, reader in (("gradsync", args.gradsync, gradsync_result),
                                  ("ddp", args.ddp, ddp_result)):
        for model, path in pairs:
            by_system = results.setdefault(model, {})
            if system in by_system:
                raise ValueError(f"{path}: a second {system} result for '{model}'")
            by_system[system] = reader(model, path)
    rows = []
    for model in sorted(results, key=model_key):
        ours = results[model].get("gradsync", {}).get("samples_per_s")
        theirs = results[model].get("ddp", {}).get("samples_per_s")
        ddp_doc = results[model].get("ddp", {}).get("metrics", {})
        rows.append({
            "model": model,
            "gradsync_samples_per_s": ours,
            "ddp_samples_per_s": theirs,
            "gradsync_over_ddp": ours / theirs if ours is not None and theirs else None,
            "ddp_final_loss": ddp_doc.get("final_loss"),
        })
    systems = {system for by_system in results.values() for system in by_system}
    markdown = "\n".join(setup_lines(args, systems) + [""] + table_lines(rows)) + "\n"
    merged = {
        "benchmark": "train-peers",
        "setup": {"nproc": args.nproc, "workers": args.workers, "batch_size": args.batch_size,
                  "steps": args.steps, "warmup_steps": args.warmup_steps,
                  "threads": args.threads, "dataset": args.dataset, "load_before": args.load,
                  "load_after": args.load_after, "date": args.date, "command": args.command,
                  "runs": args.run},
        "rows": rows,
        "results": {model: {system: {"path": r["path"], "metrics": r["metrics"]}
                            for system, r in by_system.items()}
                    for model, by_system in results.items()},
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(markdown)
    print(markdown, end="")
    problems = check(args, results)
    for problem in problems:
        print(f"train_table: error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"train_table: error: {e}", file=sys.stderr)
        sys.exit(1)
