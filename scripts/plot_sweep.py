#!/usr/bin/env python3
"""Throughput vs bandwidth: one line per strategy, from bench_schedules.sh --json files.

Writes a self-contained SVG (no plotting library needed: Debian's python3 alone runs it) and
prints the same figures as a Markdown table with each strategy's speed-up over fifo. Files of
the same bandwidth are merged (a strategy measured in several keeps the first file's figures,
and its speed-up is over that file's fifo), so separate sweeps add lines to one plot.
  scripts/plot_sweep.py --svg OUT.svg [--speedup-svg OUT2.svg] [--title TEXT] SWEEP.json...
"""
import argparse
import json
import math
import re

COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666",
          "#1f78b4", "#b2df8a", "#fb9a99", "#cab2d6", "#ff7f00", "#6a3d9a", "#b15928"]


def mbits(text):
    """'50mbit', '1gbit', '2.5gbit' -> Mbit/s."""
    m = re.fullmatch(r"([0-9.]+)\s*([kmg])bit", text.strip().lower())
    if not m:
        raise SystemExit(f"plot_sweep: cannot read bandwidth '{text}' (expected e.g. 100mbit, 1gbit)")
    return float(m.group(1)) * {"k": 1e-3, "m": 1.0, "g": 1e3}[m.group(2)]


def nice_ceiling(value):
    """The smallest 1, 2 or 5 x 10^k that is at least value (for round axis ticks)."""
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= value)


def svg_chart(points, title, ylabel, width=720, height=440):
    """points: {strategy: [(mbit, y), ...]} -> SVG text (log-scale x axis)."""
    left, right, top, bottom = 70, 150, 40, 60
    xs = [x for line in points.values() for x, _ in line]
    ys = [y for line in points.values() for _, y in line]
    x0, x1 = math.log10(min(xs)), math.log10(max(xs))
    x1 = x1 if x1 > x0 else x0 + 1
    y1 = 5 * nice_ceiling(max(ys) / 5)
    px = lambda x: left + (math.log10(x) - x0) / (x1 - x0) * (width - left - right)
    py = lambda y: height - bottom - y / y1 * (height - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>']
    for x in sorted(set(xs)):  # x ticks at the measured bandwidths
        label = f"{x / 1e3:g} Gbit/s" if x >= 1e3 else f"{x:g} Mbit/s"
        out.append(f'<line x1="{px(x):.1f}" y1="{top}" x2="{px(x):.1f}" y2="{height - bottom}" stroke="#eee"/>')
        out.append(f'<text x="{px(x):.1f}" y="{height - bottom + 16}" text-anchor="middle">{label}</text>')
    for i in range(6):
        y = y1 * i / 5
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{width - right}" y2="{py(y):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 20}" text-anchor="middle">'
               'link bandwidth per rank (log scale)</text>')
    out.append(f'<text transform="translate(18,{(top + height - bottom) / 2}) rotate(-90)" '
               f'text-anchor="middle">{ylabel}</text>')
    for i, (name, line) in enumerate(points.items()):
        color = COLORS[i % len(COLORS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(line))
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in line:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        ly = top + 10 + 18 * i
        out.append(f'<line x1="{width - right + 12}" y1="{ly}" x2="{width - right + 32}" y2="{ly}" '
                   f'stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{width - right + 38}" y="{ly + 4}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out)


def merge(files):
    """One sweep per bandwidth, ascending; w["fifo"][s] is the fifo of the file s came from."""
    by_bandwidth = {}
    for doc in files:
        w = by_bandwidth.setdefault(mbits(doc["bandwidth"]),
                                    {"bandwidth": doc["bandwidth"], "strategies": {}, "fifo": {}})
        fifo = doc["strategies"]["fifo"]["samples_per_s"]
        for name, row in doc["strategies"].items():
            if name not in w["strategies"]:
                w["strategies"][name] = row
                w["fifo"][name] = fifo
    return [by_bandwidth[b] for b in sorted(by_bandwidth)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--svg", required=True, help="throughput vs bandwidth")
    parser.add_argument("--speedup-svg", help="also: each strategy's speed-up over fifo")
    parser.add_argument("--title", default="throughput vs bandwidth")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    sweeps = merge([json.load(open(f)) for f in args.files])
    strategies = list(dict.fromkeys(s for w in sweeps for s in w["strategies"]))
    points = {s: [(mbits(w["bandwidth"]), w["strategies"][s]["samples_per_s"])
                  for w in sweeps if s in w["strategies"]] for s in strategies}
    with open(args.svg, "w") as f:
        f.write(svg_chart(points, args.title, "throughput (samples/s)"))
    if args.speedup_svg:
        speedups = {s: [(mbits(w["bandwidth"]), w["strategies"][s]["samples_per_s"] / w["fifo"][s])
                        for w in sweeps if s in w["strategies"]] for s in strategies}
        with open(args.speedup_svg, "w") as f:
            f.write(svg_chart(speedups, args.title, "speed-up over fifo (×)"))
    print("| bandwidth | " + " | ".join(f"{s} (samples/s)" for s in strategies) +
          " | " + " | ".join(f"{s} × fifo" for s in strategies if s != "fifo") + " |")
    print("|---|" + "---:|" * (2 * len(strategies) - 1))
    for w in sweeps:
        row = w["strategies"]
        cells = [f"{row[s]['samples_per_s']:.0f}" if s in row else "-" for s in strategies]
        ratios = [f"{row[s]['samples_per_s'] / w['fifo'][s]:.2f}" if s in row else "-"
                  for s in strategies if s != "fifo"]
        print(f"| {w['bandwidth']} | " + " | ".join(cells + ratios) + " |")
    print(f"\nplot: {args.svg}" + (f", {args.speedup_svg}" if args.speedup_svg else ""))


if __name__ == "__main__":
    main()
