#!/usr/bin/env python3
"""CPR (partial recovery) on a simulated clock: the paper's overhead comparison, the negative
control and the AUC-change-against-PLS plot (docs/performance.md, "Partial recovery (CPR)").

Every run trains DLRM for real (threads: 2 workers, 8 embedding servers) on the Criteo-like log;
time is simulated with production-like ratios (a step of 3 minutes, saves and loads of 5 minutes,
restarts of 3 minutes, a day between failures), and every recovery mode replays the same failure
trace (the same --inject-failures seed). Phases: main (no failure, full, partial, cpr-mfu, cpr-ssu at PLS target 0.05), control (the same
under uniform access: the negative control), sweep (partial and cpr-mfu at other PLS targets),
stress (2 servers, failures every 6 h: larger PLS). Writes OUT/cpr.json (with --merge, adds to
it) and OUT/auc_vs_pls.svg (from every run in the file) and prints the Markdown tables.
  scripts/bench_cpr.py --build build --out results/cpr [--seeds 1] [--steps 3000]
                       [--phases main,control,sweep,stress] [--merge]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

COMMON = ["--model", "dlrm", "--transport", "loopback", "--workers", "2",
          "--batch-size", "256", "--embedding-rows", "20000", "--lr", "0.1", "--momentum", "0",
          "--test-samples", "32768", "--quiet"]
CLOCK = "step=180s,save=5min,load=5min,restart=3min"
MTBF = "24h"


def run(binary, args, scratch):
    """One gradsync train run; returns its metrics."""
    metrics = os.path.join(scratch, "metrics.json")
    ckpt = os.path.join(scratch, "ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    cmd = [binary, "train"] + COMMON + args + ["--metrics", metrics, "--checkpoint-dir", ckpt]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_cpr: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    with open(metrics) as f:
        return json.load(f)


def configuration(mode, seed, steps, zipf, pls, failures=True, servers=8, mtbf=MTBF):
    args = ["--steps", str(steps), "--seed", str(seed), "--zipf", str(zipf),
            "--servers", str(servers)]
    if failures:
        args += ["--recovery", mode, "--cpr", f"pls={pls}", "--sim-clock", CLOCK,
                 "--inject-failures", f"mtbf={mtbf},seed={seed}"]
    return args


def row(name, m, baseline):
    r, s = m["recovery"], m["summary"]
    return {"mode": name, "auc": s["test_auc"], "log_loss": s["test_log_loss"],
            "delta_auc": s["test_auc"] - baseline["summary"]["test_auc"],
            "pls": r["pls"], "overhead": r["overhead_fraction"], "failures": r["failures"],
            "full_saves": r["full_saves"], "partial_saves": r["partial_saves"],
            "saved_rows": r["saved_rows"], "interval": r["plan"]["interval_steps"],
            "expected_overhead": r["plan"]["expected_overhead"],
            "save_s": r["save_s"], "load_s": r["load_s"], "restart_s": r["restart_s"],
            "redone_s": r["redone_s"], "total_s": r["total_s"],
            "push_bytes": m["per_step"]["push_bytes"],
            "touched_row_bytes": m["per_step"]["touched_row_bytes"]}


def table(rows, title):
    print(f"\n{title}\n")
    print("| mode | failures | overhead (planned) | PLS | test AUC | ΔAUC vs no failure "
          "| saves (full/partial) | save interval (steps) |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        none = r["mode"] == "no failure"  # no simulated clock: its overhead is not comparable
        overhead = "—" if none else (f"{100 * r['overhead']:.2f}% "
                                     f"({100 * r['expected_overhead']:.2f}%)")
        interval = "—" if none else f"{r['interval']:.0f}"
        print(f"| {r['mode']} | {r['failures']} | {overhead} | {r['pls']:.4f} | {r['auc']:.4f} | "
              f"{r['delta_auc']:+.4f} | {r['full_saves']}/{r['partial_saves']} | {interval} |")


def scatter_svg(series, title, file):
    """ΔAUC (y, may be negative) against PLS (x): one colour per recovery mode, dashed for the
    8-server configuration."""
    colors = {"partial": "#d95f02", "cpr-mfu": "#1b9e77", "cpr-ssu": "#7570b3"}
    points = [p for s in series for p in s["points"]]
    xmax = max(x for x, _ in points) * 1.1 or 1
    ylo = min(0.0, min(y for _, y in points)) * 1.15 - 1e-4
    yhi = max(0.0, max(y for _, y in points)) * 1.15 + 1e-4
    w, h, left, top, plot_w, plot_h = 900, 460, 80, 40, 520, 340
    px = lambda x: left + x / xmax * plot_w
    py = lambda y: top + (yhi - y) / (yhi - ylo) * plot_h
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left + plot_w / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>',
           f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
           f'<line x1="{left}" y1="{py(0):.1f}" x2="{left + plot_w}" y2="{py(0):.1f}" '
           'stroke="#555" stroke-dasharray="5,4"/>']
    for i in range(6):
        x, y = xmax * i / 5, ylo + (yhi - ylo) * i / 5
        out.append(f'<text x="{px(x):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{x:.3f}</text>')
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:+.4f}</text>')
    out.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h + 36}" text-anchor="middle">'
               'portion of lost samples (PLS, measured)</text>')
    out.append(f'<text transform="translate(16,{top + plot_h / 2}) rotate(-90)" '
               'text-anchor="middle">test AUC change against the run without failures</text>')
    for i, s in enumerate(series):
        c = colors.get(s["name"].split(",")[0], "#666666")
        dash = ' stroke-dasharray="6,4"' if "8 servers" in s["name"] else ""
        pts = sorted(s["points"])
        if len(pts) > 1:
            line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            out.append(f'<polyline points="{line}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{c}"/>')
        ly = top + 10 + 18 * i
        lx = left + plot_w + 14
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 22}" y2="{ly}" stroke="{c}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<circle cx="{lx + 11}" cy="{ly}" r="4" fill="{c}"/>')
        out.append(f'<text x="{lx + 30}" y="{ly + 4}">{s["name"]}</text>')
    out.append("</svg>")
    with open(file, "w") as f:
        f.write("\n".join(out) + "\n")


def sweep_points(report):
    """(PLS, ΔAUC) per series, from every skewed-access run with failures."""
    series = {}
    for run_ in report["runs"]:
        if run_["zipf"] == 0:
            continue
        for r in run_["rows"]:
            mode = r["mode"].split(" ")[0]
            if mode not in ("partial", "cpr-mfu", "cpr-ssu"):
                continue
            name = mode + (", 2 servers, MTBF 6h" if run_.get("stress") else ", 8 servers, MTBF 24h")
            series.setdefault(name, []).append((r["pls"], r["delta_auc"]))
    return [{"name": k, "points": v} for k, v in sorted(series.items())]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--out", default="results/cpr")
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--phases", default="main,control,sweep,stress")
    parser.add_argument("--merge", action="store_true", help="add to OUT/cpr.json")
    parser.add_argument("--plot-only", action="store_true", help="redraw the plot of OUT/cpr.json")
    a = parser.parse_args()
    phases = set() if a.plot_only else set(a.phases.split(","))
    if a.plot_only:
        a.merge = True
    binary = os.path.join(a.build, "apps", "gradsync", "gradsync")
    os.makedirs(a.out, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="bench-cpr-")
    path = os.path.join(a.out, "cpr.json")
    report = {"clock": CLOCK, "mtbf": MTBF, "steps": a.steps, "common": COMMON, "runs": []}
    if a.merge and os.path.exists(path):
        with open(path) as f:
            report = json.load(f)
    for seed in [int(s) for s in a.seeds.split(",")] if phases else []:
        baselines = {}
        for zipf in (1.1, 0.0):
            if zipf > 0 and not phases & {"main", "sweep", "stress"}:
                continue
            if zipf == 0 and "control" not in phases:
                continue
            baseline = run(binary, configuration(None, seed, a.steps, zipf, 0, False), scratch)
            baselines[zipf] = baseline
            if (zipf > 0 and "main" in phases) or zipf == 0:
                modes = ["full", "partial", "cpr-mfu", "cpr-ssu"] if zipf > 0 else ["partial", "cpr-mfu"]
                rows = [row("no failure", baseline, baseline)]
                for mode in modes:
                    rows.append(row(mode, run(binary, configuration(mode, seed, a.steps, zipf, 0.05),
                                              scratch), baseline))
                kind = "skewed" if zipf > 0 else "uniform: negative control"
                table(rows, f"seed {seed}, zipf {zipf} ({kind}), 8 servers, MTBF {MTBF}, PLS target 0.05")
                report["runs"].append({"seed": seed, "zipf": zipf, "rows": rows})
        for phase, servers, mtbf, targets in (("sweep", 8, MTBF, (0.01, 0.02, 0.1, 0.2)),
                                              ("stress", 2, "6h", (0.05, 0.1, 0.2, 0.4))):
            if phase not in phases:
                continue
            baseline = baselines[1.1]
            rows = [row("no failure", baseline, baseline)]
            for pls in targets:
                for mode in ("partial", "cpr-mfu"):
                    m = run(binary, configuration(mode, seed, a.steps, 1.1, pls, True, servers, mtbf),
                            scratch)
                    rows.append(row(f"{mode} pls={pls}", m, baseline))
            table(rows, f"seed {seed}, {phase}: {servers} servers, MTBF {mtbf}, PLS targets {targets}")
            report["runs"].append({"seed": seed, "zipf": 1.1, phase: True, "rows": rows[1:]})
    if phases:
        with open(path, "w") as f:
            json.dump(report, f, indent=1)
    scatter_svg(sweep_points(report), "DLRM: test AUC change against PLS (simulated clock)",
                os.path.join(a.out, "auc_vs_pls.svg"))
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nwrote {path} and {a.out}/auc_vs_pls.svg")


if __name__ == "__main__":
    main()
