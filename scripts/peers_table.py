#!/usr/bin/python3
"""Merges allreduce results of gradsync and its peers into one JSON and a Markdown table.

Each input is the JSON that `gradsync bench allreduce`, peers_mpi_allreduce or
peers_gloo_allreduce writes:
  {"system": "gradsync"|"openmpi"|"gloo", "collective": "allreduce", "workers": N,
   "transport": "...", "results": [{"bytes", "count", "time_us", "algbw_gbps",
   "busbw_gbps", "cpu_s_per_gb", "wrong"}, ...]}
The table gives, per size, each system's bus bandwidth and gradsync's ratios to the peers
(> 1: gradsync is faster), and a second table each system's CPU seconds (all ranks' processes,
user + system) per GB that all ranks sent, when the inputs have it. The header block states the setup, so that a figure copied from
it carries its conditions. Exits non-zero, after printing, if any result is wrong or the
inputs disagree on the worker count. Standard library only: run with /usr/bin/python3.
"""

import argparse
import json
import sys

SYSTEMS = ("gradsync", "openmpi", "gloo")
PEERS = ("openmpi", "gloo")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", help="result JSON files, one per system")
    parser.add_argument("--out", required=True, help="merged JSON to write")
    parser.add_argument("--markdown", help="also write the table here")
    parser.add_argument("--nproc", type=int, help="host CPU count (nproc)")
    parser.add_argument("--workers", type=int, help="worker count asked for")
    parser.add_argument("--iters", type=int, help="timed iterations per size")
    parser.add_argument("--warmup", type=int, help="warm-up iterations per size (peers)")
    parser.add_argument("--date", help="when the run happened")
    parser.add_argument("--command", help="the exact command line of the run")
    parser.add_argument("--run", action="append", default=[],
                        help="'system: command' of one program, repeatable")
    return parser.parse_args(argv)


def load(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    for key in ("system", "collective", "workers", "transport", "results"):
        if key not in doc:
            raise ValueError(f"{path}: missing '{key}'")
    if doc["collective"] != "allreduce":
        raise ValueError(f"{path}: collective is '{doc['collective']}', not 'allreduce'")
    return doc


def format_bytes(n):
    """1048576 -> '1 MiB', 1572864 -> '1.5 MiB'."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def merge(docs):
    """Rows by size: {bytes, busbw_gbps: {system: x}, wrong: {system: n}, ratios}."""
    by_size = {}
    for system, doc in docs.items():
        for result in doc["results"]:
            row = by_size.setdefault(result["bytes"], {
                "bytes": result["bytes"], "count": result["count"],
                "busbw_gbps": {}, "time_us": {}, "cpu_s_per_gb": {}, "wrong": {}})
            row["busbw_gbps"][system] = result["busbw_gbps"]
            if "cpu_s_per_gb" in result:
                row["cpu_s_per_gb"][system] = result["cpu_s_per_gb"]
            row["time_us"][system] = result["time_us"]
            row["wrong"][system] = result["wrong"]
    rows = [by_size[size] for size in sorted(by_size)]
    for row in rows:
        ours = row["busbw_gbps"].get("gradsync")
        for peer in PEERS:
            theirs = row["busbw_gbps"].get(peer)
            ok = ours is not None and theirs
            row[f"gradsync_over_{peer}"] = ours / theirs if ok else None
    return rows


def cell(value, fmt):
    return "n/a" if value is None else format(value, fmt)


def setup_lines(args, docs):
    lines = ["## Allreduce bus bandwidth, peers side by side", ""]
    lines.append(f"- host: {args.nproc if args.nproc else '?'} CPUs (nproc); "
                 "all workers are processes on this one host")
    lines.append(f"- workers: {args.workers if args.workers else '?'}; "
                 "float32 sum, in place, sizes doubling")
    lines.append(f"- iterations: {args.iters} timed per size after {args.warmup} warm-up; "
                 "time = max over ranks of the mean per iteration; "
                 "busbw = bytes / time × 2(n−1)/n")
    lines.append(f"- date: {args.date or '?'}")
    lines.append(f"- command: `{args.command or '?'}`")
    for run in args.run:
        lines.append(f"  - `{run}`")
    for system in SYSTEMS:
        if system in docs:
            lines.append(f"- {system} transport: {docs[system]['transport']}")
        else:
            lines.append(f"- {system}: not measured in this run")
    return lines


def table_lines(rows):
    header = ["size"] + [f"{s} busbw (GB/s)" for s in SYSTEMS] + \
             [f"gradsync/{p}" for p in PEERS]
    lines = ["| " + " | ".join(header) + " |",
             "|" + "---:|" * len(header)]
    for row in rows:
        cells = [format_bytes(row["bytes"])]
        for system in SYSTEMS:
            text = cell(row["busbw_gbps"].get(system), ".3f")
            wrong = row["wrong"].get(system, 0)
            cells.append(text + (f" ({wrong} WRONG)" if wrong else ""))
        for peer in PEERS:
            ratio = row[f"gradsync_over_{peer}"]
            cells.append("n/a" if ratio is None else f"{ratio:.2f}×")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def cpu_lines(rows):
    """CPU seconds per GB moved, per system, and each peer's over gradsync's (> 1: gradsync
    spends less CPU per byte)."""
    if not any(row["cpu_s_per_gb"] for row in rows):
        return []
    header = ["size"] + [f"{s} CPU (s/GB)" for s in SYSTEMS] + \
             [f"{p}/gradsync" for p in PEERS]
    lines = ["", "CPU seconds (user + system, all ranks' processes) per GB sent by all ranks:", "",
             "| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for row in rows:
        cpu = row["cpu_s_per_gb"]
        cells = [format_bytes(row["bytes"])] + [cell(cpu.get(s), ".3f") for s in SYSTEMS]
        for peer in PEERS:
            ok = cpu.get("gradsync") and cpu.get(peer) is not None
            cells.append(f"{cpu[peer] / cpu['gradsync']:.2f}×" if ok else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def check(args, docs, rows):
    """Problems that make the comparison invalid."""
    problems = []
    for system, doc in docs.items():
        if args.workers and doc["workers"] != args.workers:
            problems.append(f"{system} ran {doc['workers']} workers, not {args.workers}")
    for row in rows:
        for system, wrong in row["wrong"].items():
            if wrong:
                problems.append(f"{system}: {wrong} wrong elements at {row['bytes']} bytes")
    return problems


def main(argv):
    args = parse_args(argv)
    docs = {}
    for path in args.inputs:
        doc = load(path)
        if doc["system"] in docs:
            raise ValueError(f"{path}: a second result for '{doc['system']}'")
        docs[doc["system"]] = doc
    rows = merge(docs)
    markdown = "\n".join(setup_lines(args, docs) + [""] + table_lines(rows) +
                         cpu_lines(rows)) + "\n"
    merged = {
        "collective": "allreduce",
        "setup": {"nproc": args.nproc, "workers": args.workers, "iters": args.iters,
                  "warmup": args.warmup, "date": args.date, "command": args.command,
                  "runs": args.run},
        "systems": docs,
        "rows": rows,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(markdown)
    print(markdown, end="")
    problems = check(args, docs, rows)
    for problem in problems:
        print(f"peers_table: error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (OSError, ValueError, KeyError) as e:
        print(f"peers_table: error: {e}", file=sys.stderr)
        sys.exit(1)
