#!/usr/bin/python3
"""JSON, SVG plots and Markdown tables of the emulated-cluster experiments (scripts/experiments/).

    report.py setup --out FILE [--set KEY=VALUE]... [--run "NAME: COMMAND"]...
    report.py allreduce --dir DIR --input SYSTEM=FILE...  -> DIR/allreduce.{json,md,svg}
    report.py train --dir DIR                             -> DIR/train.{json,md}, DIR/train-MODEL.svg
    report.py tta --dir DIR [--target 0.85]               -> DIR/tta.{json,md,svg}
    report.py report --root DIR [--out DIR/report.md]     -> one report of the experiments found

DIR/setup.json (written by `setup`, from the runner) states the conditions; each table and plot
repeats them. train and tta read DIR/runs.tsv, one line per run: MODEL RATE CONFIG SYSTEM STATUS
JSON WALL_SECONDS (tab-separated), written by the runners. The plots are hand-written SVG (no plotting
library: Debian's python3 alone runs this), drawn by svg_plot.py; report_common.py holds the files,
units and setup block that the experiments share. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

# The sibling modules, whatever the working directory (and even under python3 -P); no
# __pycache__ left in the source tree.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True

from report_common import (dump, format_bytes, load, load_setup, mbits, md_row,  # noqa: E402
                           number, order, rate_label, read_runs, setup_markdown, svg_footer,
                           write_results, write_text)
from svg_plot import nice_ceiling, svg_chart  # noqa: E402


# ---------------------------------------------------------------------------------------------
# setup


def cmd_setup(args):
    setup = {}
    for kv in args.set:
        key, _, value = kv.partition("=")
        setup[key] = number(value) if key not in ("commit", "command") else value
    setup["runs"] = args.run
    dump(args.out, setup)
    return 0


# ---------------------------------------------------------------------------------------------
# (a) allreduce


def cmd_allreduce(args):
    setup = load_setup(args.dir)
    docs = {}
    for item in args.input:
        system, _, path = item.partition("=")
        docs[system] = load(path)
    systems = order(docs, ("gradsync", "openmpi", "openmpi-ring", "gloo"))
    link = mbits(str(setup.get("rate"))) if setup.get("rate") else None
    by_size = {}
    problems = []
    for system in systems:
        doc = docs[system]
        if doc.get("workers") != setup.get("hosts"):
            problems.append(f"{system} ran {doc.get('workers')} ranks, not {setup.get('hosts')}")
        for r in doc["results"]:
            row = by_size.setdefault(r["bytes"], {"bytes": r["bytes"], "busbw_gbit_s": {},
                                                  "time_us": {}, "wrong": {}})
            row["busbw_gbit_s"][system] = 8 * r["busbw_gbps"]  # GB/s (10^9 B) -> Gbit/s
            row["time_us"][system] = r["time_us"]
            row["wrong"][system] = r["wrong"]
            if r["wrong"]:
                problems.append(f"{system}: {r['wrong']} wrong elements at {r['bytes']} bytes")
    rows = [by_size[b] for b in sorted(by_size)]
    for row in rows:
        ours = row["busbw_gbit_s"].get("gradsync")
        for peer in [s for s in systems if s != "gradsync"]:
            theirs = row["busbw_gbit_s"].get(peer)
            row[f"gradsync_over_{peer}"] = ours / theirs if ours and theirs else None
        row["gradsync_of_link"] = ours / (link / 1e3) if ours and link else None

    peers = [s for s in systems if s != "gradsync"]
    md = [f"## (a) Allreduce bus bandwidth vs message size, {setup.get('hosts')} emulated hosts "
          f"at {setup.get('rate')}", ""]
    md += setup_markdown(setup, [
        f"- collective: float32 sum allreduce in place, one rank per host; {setup.get('iters')} "
        f"timed iterations per size after {setup.get('warmup')} warm-up; time = the slowest "
        "rank's mean; busbw = 2(n−1)/n × bytes / time, in Gbit/s (10^9 bit/s); results verified",
        "- gradsync: `gradsync bench allreduce` (its TCP transport, ring); Open MPI 4.1.4 "
        "`MPI_Allreduce` via `scripts/netem mpirun` (pml ob1, btl tcp,self on the shaped links"
        + (f", mpirun args `{setup['mpi_args']}`" if setup.get("mpi_args") else "") +
        "): `openmpi` with its own algorithm choice per size, `openmpi-ring` forced to its ring "
        "(`--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4`); Gloo: "
        "ring `gloo::allreduce` over its TCP transport, FileStore rendezvous",
        "- link rate line: the nominal rate; TCP payload over Ethernet tops out about 5% below "
        "it (headers; tbf counts whole packets), and tbf's burst lets short transfers exceed "
        "it a little"])
    for system in systems:
        md.append(f"- {system} transport: {docs[system].get('transport', '?')}")
    md.append("")
    header = (["size"] + [f"{s} busbw (Gbit/s)" for s in systems] +
              [f"gradsync/{p}" for p in peers] + (["gradsync / link rate"] if link else []))
    md.append(md_row(header))
    md.append("|" + "---:|" * len(header))
    for row in rows:
        cells = [format_bytes(row["bytes"])]
        for s in systems:
            v = row["busbw_gbit_s"].get(s)
            cells.append("n/a" if v is None else f"{v:.3f}" +
                         (f" ({row['wrong'][s]} WRONG)" if row["wrong"].get(s) else ""))
        for p in peers:
            r = row[f"gradsync_over_{p}"]
            cells.append("n/a" if r is None else f"{r:.2f}×")
        if link:
            r = row["gradsync_of_link"]
            cells.append("n/a" if r is None else f"{100 * r:.0f}%")
        md.append(md_row(cells))
    large = [r for r in rows if r["bytes"] >= 16 << 20 and "gradsync" in r["busbw_gbit_s"]]
    if large:
        low = min(large, key=lambda row: row["busbw_gbit_s"]["gradsync"])
        md.append("")
        text = (f"At ≥ 16 MiB: gradsync's lowest busbw is {low['busbw_gbit_s']['gradsync']:.3f} "
                f"Gbit/s ({format_bytes(low['bytes'])})")
        for p in peers:
            wins = sum(1 for r in large if (r[f"gradsync_over_{p}"] or 0) >= 1)
            text += f"; ≥ {p}'s at {wins} of {len(large)} sizes"
        md.append(text + ".")
    md.append("")
    md.append("![allreduce bus bandwidth vs size](allreduce.svg)")
    md.append("")
    markdown = "\n".join(md) + "\n"

    series = [{"name": s, "bold": s == "gradsync",
               "points": [(r["bytes"], r["busbw_gbit_s"][s]) for r in rows
                          if s in r["busbw_gbit_s"]]} for s in systems]
    refs = [(link / 1e3, f"link rate {setup.get('rate')}")] if link else []
    svg = svg_chart(series, title=f"Allreduce bus bandwidth, {setup.get('hosts')} emulated hosts "
                    f"at {setup.get('rate')}", xlabel="message size (log scale)",
                    ylabel="bus bandwidth (Gbit/s)",
                    xticks=[(r["bytes"], format_bytes(r["bytes"])) for r in rows],
                    refs=refs, footer=svg_footer(setup, f"float32 sum, {setup.get('iters')} "
                                                 "iterations per size, busbw = 2(n−1)/n·bytes/time"))
    write_text(os.path.join(args.dir, "allreduce.svg"), svg)
    write_results(args.dir, "allreduce", markdown,
                  {"experiment": "allreduce", "setup": setup,
                   "units": "busbw in Gbit/s (10^9 bit/s)", "rows": rows, "systems": docs})
    for p in problems:
        print(f"report: error: {p}", file=sys.stderr)
    return 1 if problems else 0


# ---------------------------------------------------------------------------------------------
# (b) training throughput vs link bandwidth


def run_figures(run):
    """samples/s and, for gradsync, per-step figures of one run."""
    doc = run["doc"]
    if doc is None:
        return None
    if run["system"] in ("ddp", "gradsync-python"):  # ddp_train.py's JSON, or gs_train.py's
        return {"samples_per_s": doc["samples_per_s"], "seconds": doc.get("seconds")}
    per = doc.get("per_step", {})
    return {"samples_per_s": doc["summary"]["samples_per_s"],
            "seconds": doc["summary"].get("seconds"),
            "step_ms": per.get("step_ms"), "compute_ms": per.get("compute_ms"),
            "comm_ms": per.get("comm_ms"), "exposed_comm_ms": per.get("exposed_comm_ms"),
            "mb_sent_per_step": per.get("bytes_sent", 0) / 1e6,
            "compression_ratio": per.get("compression_ratio")}


def config_series(config, points):
    """The plotted line of a configuration of (b) or (c): PyTorch DDP black, bold and dashed."""
    ddp = config == "ddp"
    return {"name": "PyTorch DDP" if ddp else config, "points": points, "dashed": ddp,
            "bold": ddp, "color": "#000000" if ddp else None}


def cmd_train(args):
    setup = load_setup(args.dir)
    runs = read_runs(args.dir)
    models = order([r["model"] for r in runs], ("mlp", "cnn", "resnet20", "vgg11"))
    rates = sorted(set(r["rate"] for r in runs), key=lambda r: mbits(r) or float("inf"))
    configs = order([r["config"] for r in runs], ("ddp",))
    table = {}
    for r in runs:
        table[(r["model"], r["rate"], r["config"])] = dict(run_figures(r) or {},
                                                          status=r["status"], path=r["path"],
                                                          wall_s=r["wall_s"])
    md = [f"## (b) Training throughput vs link bandwidth, {setup.get('hosts')} emulated hosts", ""]
    md += setup_markdown(setup, [
        f"- training: synthetic data (no I/O), batch {setup.get('batch_size')} per worker "
        f"(global {setup.get('batch_size', 0) * setup.get('hosts', 0)}), {setup.get('steps')} "
        f"steps, SGD lr 0.05 momentum 0.9 seed 0, {setup.get('threads')} compute thread per "
        "rank (OMP/OpenBLAS/torch), one rank per host",
        "- samples/s: global. gradsync: `summary.samples_per_s` of `gradsync train --metrics` "
        "(all its steps); PyTorch DDP (gloo backend, 25 MiB buckets, defaults): "
        f"benchmarks/peers/ddp_train.py, {setup.get('steps')} steps timed between two barriers "
        f"after {setup.get('ddp_warmup_steps')} untimed warm-up step(s)",
        "- configurations: `ddp` = PyTorch DDP; `fifo`, `wfbp`, `fusion:MB`, `p3` = gradsync "
        "schedule (dense); `sync:S` = gradsync --sync S; other names = gradsync --compress "
        "(schedule wfbp); `a+b` combines",
        "- ratio ×DDP: gradsync samples/s / DDP samples/s at the same model and rate "
        "(> 1: faster than DDP)"])
    md.append("")
    svgs = []
    for model in models:
        md.append(f"### {model}")
        md.append("")
        header = ["configuration"] + [f"{rate} samples/s (×DDP)" for rate in rates]
        md.append(md_row(header))
        md.append("|---|" + "---:|" * len(rates))
        for config in configs:
            cells = [config]
            for rate in rates:
                e = table.get((model, rate, config))
                if e is None:
                    cells.append("–")
                elif e["status"] != "ok":
                    cells.append(e["status"])
                else:
                    ddp = table.get((model, rate, "ddp"), {}).get("samples_per_s")
                    ratio = f" ({e['samples_per_s'] / ddp:.2f}×)" if ddp and config != "ddp" else ""
                    cells.append(f"{e['samples_per_s']:,.0f}{ratio}")
            if any(c != "–" for c in cells[1:]):
                md.append(md_row(cells))
        md.append("")
        md.append(f"gradsync per step on rank 0 (ms): compute / exposed communication / whole "
                  f"step, and MB sent per step ({model}):")
        md.append("")
        md.append(md_row(["configuration", *rates, "MB sent/step"]))
        md.append("|---|" + "---:|" * (len(rates) + 1))
        for config in configs:
            if config == "ddp":
                continue
            cells, sent = [config], None
            for rate in rates:
                e = table.get((model, rate, config))
                if not e or e["status"] != "ok":
                    cells.append("–")
                    continue
                cells.append(f"{e['compute_ms']:.0f} / {e['exposed_comm_ms']:.0f} / "
                             f"{e['step_ms']:.0f}")
                sent = e["mb_sent_per_step"]
            if any(c != "–" for c in cells[1:]):
                md.append(md_row(cells + ["–" if sent is None else f"{sent:.2f}"]))
        md.append("")
        series = []
        for config in configs:
            pts = [(mbits(rate), table[(model, rate, config)]["samples_per_s"]) for rate in rates
                   if (model, rate, config) in table and table[(model, rate, config)]["status"]
                   == "ok" and mbits(rate)]
            if pts:
                series.append(config_series(config, pts))
        if series:
            svg_name = f"train-{model}.svg"
            ticks = [(mbits(r), rate_label(mbits(r))) for r in rates if mbits(r)]
            svg = svg_chart(series, title=f"{model}: training throughput vs link bandwidth",
                            xlabel="link rate per host, each direction (log scale)",
                            ylabel="samples/s (global)", xticks=ticks,
                            height=max(520, 120 + 17 * len(series)),
                            footer=svg_footer(setup, f"{model}, synthetic data, batch "
                                              f"{setup.get('batch_size')}/worker, "
                                              f"{setup.get('steps')} steps, "
                                              f"{setup.get('threads')} thread/rank"))
            write_text(os.path.join(args.dir, svg_name), svg)
            svgs.append(svg_name)
            md.append(f"![{model} throughput vs bandwidth]({svg_name})")
            md.append("")
    failed = [r for r in runs if r["status"] != "ok"]
    if failed:
        md.append("Runs that did not complete: " + ", ".join(
            f"{r['model']} {r['rate']} {r['config']} ({r['status']}, log `{r['path']}`)"
            for r in failed))
        md.append("")
    write_results(args.dir, "train", "\n".join(md) + "\n",
                  {"experiment": "train", "setup": setup, "svgs": svgs,
                   "results": [{"model": m, "rate": r, "config": c, **v}
                               for (m, r, c), v in table.items()]})
    return 0


# ---------------------------------------------------------------------------------------------
# (c) time to accuracy


def time_to(evaluations, target):
    for e in evaluations:
        if e["test_accuracy"] >= target:
            return e["seconds"], e["step"]
    return None, None


def cmd_tta(args):
    setup = load_setup(args.dir)
    target = args.target if args.target is not None else float(setup.get("target", 0.85))
    runs = read_runs(args.dir)
    rows = []
    for r in runs:
        row = {"config": r["config"], "status": r["status"], "path": r["path"]}
        if r["doc"] is not None:
            doc = r["doc"]
            evals = doc["evaluations"]
            if r["system"] in ("ddp", "gradsync-python"):
                final, sps = doc.get("final_test_accuracy"), doc["samples_per_s"]
            else:
                final, sps = doc["summary"]["final_test_accuracy"], doc["summary"]["samples_per_s"]
            seconds, step = time_to(evals, target)
            row.update(evaluations=evals, seconds_to_target=seconds, step_to_target=step,
                       final_test_accuracy=final, samples_per_s=sps,
                       training_seconds=evals[-1]["seconds"] if evals else None)
        rows.append(row)
    rows.sort(key=lambda row: (row["config"] != "ddp",))
    ddp = next((row for row in rows if row["config"] == "ddp"), {})
    for row in rows:
        base, mine = ddp.get("seconds_to_target"), row.get("seconds_to_target")
        row["speedup_vs_ddp"] = base / mine if base and mine else None
    md = [f"## (c) Time to accuracy, Fashion-MNIST, {setup.get('model')} on "
          f"{setup.get('hosts')} emulated hosts at {setup.get('rate')}", ""]
    md += setup_markdown(setup, [
        f"- training: Fashion-MNIST (60,000 train images), {setup.get('model')}, batch "
        f"{setup.get('batch_size')} per worker, {setup.get('steps')} steps, SGD lr 0.05 momentum "
        f"0.9 seed 0, {setup.get('threads')} compute thread per rank, one rank per host",
        f"- evaluation, identical for both systems: every {setup.get('eval_every')} steps on the "
        f"first {setup.get('eval_samples')} test images, and at each epoch's and the run's end "
        "on all 10,000; BatchNorm running statistics averaged across ranks first; each rank "
        "scores every n-th image from its rank and the counts are summed. The time axis is "
        "rank 0's training time with every evaluation left out (DDP: ddp_train.py "
        "--eval-every, no warm-up steps, so its clock starts at its first step like gradsync's)",
        f"- time to {100 * target:g}%: training seconds at the first evaluation reaching it; "
        "speed-up = DDP's time / the configuration's time",
        "- configurations: `ddp` = PyTorch DDP (gloo); `py:NAME` = gradsync from Python "
        "(benchmarks/python/gs_train.py, gs.DistributedOptimizer) with NAME's options; "
        "others = `gradsync train` with that "
        "--schedule / --compress (see (b))"])
    md.append("")
    md.append(f"| configuration | time to {100 * target:g}% (s) | step | speed-up vs DDP | "
              "final accuracy (10,000 images) | training time (s) | samples/s |")
    md.append("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        if row["status"] != "ok":
            md.append(f"| {row['config']} | {row['status']} | | | | | |")
            continue
        s = row["seconds_to_target"]
        sp = row["speedup_vs_ddp"]
        md.append(f"| {row['config']} | {'not reached' if s is None else f'{s:.1f}'} | "
                  f"{row['step_to_target'] or '–'} | {'–' if sp is None else f'{sp:.2f}×'} | "
                  f"{100 * row['final_test_accuracy']:.2f}% | {row['training_seconds']:.1f} | "
                  f"{row['samples_per_s']:,.0f} |")
    md.append("")
    md.append("![test accuracy vs training time](tta.svg)")
    md.append("")
    series = [config_series(row["config"], [(e["seconds"], 100 * e["test_accuracy"])
                                            for e in row["evaluations"]])
              for row in rows if row["status"] == "ok"]
    if series:
        tmax = max(x for s in series for x, _ in s["points"])
        step = nice_ceiling(tmax / 6)
        ticks = [(step * i, f"{step * i:g}") for i in range(0, int(tmax / step) + 2)]
        svg = svg_chart(series, title=f"Test accuracy vs training time: {setup.get('model')}, "
                        f"Fashion-MNIST, {setup.get('hosts')} hosts at {setup.get('rate')}",
                        xlabel="training time, evaluations excluded (s)",
                        ylabel="test accuracy (%)", xticks=ticks, xlog=False,
                        refs=[(100 * target, f"target {100 * target:g}%")],
                        footer=svg_footer(setup, f"{setup.get('model')}, batch "
                                          f"{setup.get('batch_size')}/worker, "
                                          f"{setup.get('steps')} steps, eval every "
                                          f"{setup.get('eval_every')} steps"))
        write_text(os.path.join(args.dir, "tta.svg"), svg)
    write_results(args.dir, "tta", "\n".join(md) + "\n",
                  {"experiment": "tta", "setup": setup, "target": target, "rows": rows})
    return 0


# ---------------------------------------------------------------------------------------------
# report


def cmd_report(args):
    out = args.out or os.path.join(args.root, "report.md")
    parts = ["# gradsync vs its peers on emulated clusters", "",
             "Generated by `scripts/experiments/report.py report` from the experiments under "
             f"`{args.root}`; each section states its own setup and exact commands. Plots are "
             "SVG next to this file.", ""]
    found = 0
    for sub, md_name in (("allreduce", "allreduce.md"), ("train", "train.md"), ("tta", "tta.md")):
        path = os.path.join(args.root, sub, md_name)
        if not os.path.exists(path):
            parts += [f"<!-- {sub}: not run -->", ""]
            continue
        found += 1
        with open(path, encoding="utf-8") as f:
            text = f.read()
        # Images and links are relative to the section's folder: make them relative to here.
        text = re.sub(r"\]\((?!https?:|/)([^)]+)\)", lambda m: f"]({sub}/{m.group(1)})", text)
        parts.append(text.rstrip() + "\n")
    if not found:
        print(f"report: error: no experiment results under {args.root}", file=sys.stderr)
        return 1
    write_text(out, "\n".join(parts))
    print(f"report: wrote {out}")
    return 0


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("setup")
    p.add_argument("--out", required=True)
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--run", action="append", default=[])
    p = sub.add_parser("allreduce")
    p.add_argument("--dir", required=True)
    p.add_argument("--input", action="append", required=True, help="SYSTEM=FILE")
    p = sub.add_parser("train")
    p.add_argument("--dir", required=True)
    p = sub.add_parser("tta")
    p.add_argument("--dir", required=True)
    p.add_argument("--target", type=float)
    p = sub.add_parser("report")
    p.add_argument("--root", required=True)
    p.add_argument("--out")
    args = parser.parse_args(argv)
    return {"setup": cmd_setup, "allreduce": cmd_allreduce, "train": cmd_train, "tta": cmd_tta,
            "report": cmd_report}[args.command](args)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"report: error: {e}", file=sys.stderr)
        sys.exit(1)
