"""Hand-written SVG line charts for report.py (no plotting library: Debian's python3 alone runs
this). Standard library only."""

from __future__ import annotations

import html
import math
import textwrap

COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#1f78b4",
          "#b2df8a", "#fb9a99", "#cab2d6", "#ff7f00", "#6a3d9a", "#b15928", "#8dd3c7", "#bc80bd",
          "#80b1d3", "#fdb462", "#fccde5", "#d9d9d9"]


def nice_ceiling(value):
    """The least m × 10^k ≥ value, m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8): axis top, tick step."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * power >= value)


def svg_chart(series, *, title, xlabel, ylabel, xticks, footer, xlog=True, refs=(),
              width=880, height=520):
    """series: [{name, points: [(x, y)], dashed?}] -> SVG text. xticks: [(x, label)];
    refs: [(y, label)] drawn as grey dashed horizontal lines."""
    legend_w = 190
    footer = [part for line in footer for part in textwrap.wrap(line, int(width / 5.4))]
    left, right, top = 70, legend_w + 20, 44
    bottom = 66 + 14 * len(footer)
    xs = [x for s in series for x, _ in s["points"]] + [x for x, _ in xticks]
    ys = [y for s in series for _, y in s["points"]] + [y for y, _ in refs]
    tx = (lambda x: math.log(x)) if xlog else (lambda x: x)
    x0, x1 = tx(min(xs)), tx(max(xs))
    if x1 <= x0:
        x1 = x0 + 1
    pad = 0.04 * (x1 - x0)
    x0, x1 = x0 - pad, x1 + pad
    y1 = nice_ceiling(max(ys) * 1.05 if ys else 1)
    plot_w, plot_h = width - left - right, height - top - bottom
    px = lambda x: left + (tx(x) - x0) / (x1 - x0) * plot_w
    py = lambda y: top + plot_h - y / y1 * plot_h
    esc = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left + plot_w / 2}" y="24" text-anchor="middle" font-size="15">'
           f'{esc(title)}</text>']
    for x, label in xticks:
        out.append(f'<line x1="{px(x):.1f}" y1="{top}" x2="{px(x):.1f}" y2="{top + plot_h}" '
                   'stroke="#eee"/>')
        out.append(f'<text x="{px(x):.1f}" y="{top + plot_h + 16}" text-anchor="middle">'
                   f'{esc(label)}</text>')
    for i in range(6):
        y = y1 * i / 5
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{left + plot_w}" y2="{py(y):.1f}" '
                   'stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
               'stroke="#999"/>')
    out.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h + 36}" text-anchor="middle">'
               f'{esc(xlabel)}</text>')
    out.append(f'<text transform="translate(18,{top + plot_h / 2}) rotate(-90)" '
               f'text-anchor="middle">{esc(ylabel)}</text>')
    for y, label in refs:
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{left + plot_w}" y2="{py(y):.1f}" '
                   'stroke="#555" stroke-dasharray="6,4"/>')
        out.append(f'<text x="{left + 6}" y="{py(y) - 5:.1f}" fill="#555">{esc(label)}</text>')
    for i, s in enumerate(series):
        color = s.get("color") or COLORS[i % len(COLORS)]
        dash = ' stroke-dasharray="8,4"' if s.get("dashed") else ""
        width_ = 3 if s.get("bold") else 2
        pts = sorted(s["points"])
        if len(pts) > 1:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                       f'stroke-width="{width_}"{dash}/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        ly = top + 8 + 17 * i
        lx = left + plot_w + 14
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 22}" y2="{ly}" stroke="{color}" '
                   f'stroke-width="{width_}"{dash}/>')
        out.append(f'<text x="{lx + 28}" y="{ly + 4}">{esc(s["name"])}</text>')
    for i, line in enumerate(footer):
        out.append(f'<text x="10" y="{height - 14 * (len(footer) - i) + 2}" font-size="10" '
                   f'fill="#444">{esc(line)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
