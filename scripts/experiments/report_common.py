"""What report.py's experiments share: files (JSON, runs.tsv), units and the setup block that each
table and plot repeats. Standard library only."""

from __future__ import annotations

import json
import os
import re

SHAPING = ("scripts/netem: one network namespace per host on a Linux bridge, each host's veth "
           "shaped with tc tbf in both directions ({shaping}, queue bound 5 ms); no added delay "
           "(this kernel has no netem qdisc): round trip is the veth's, about 70 µs")
CPU_NOTE = ("All hosts are namespaces of one {nproc}-CPU machine: the ranks share its cores, so "
            "compute and the kernel's TCP work are CPU-bound well below what K real hosts would "
            "do. CPU compute is about 100× slower than a datacenter GPU, so the emulated "
            "bandwidth is scaled down accordingly (100 Mbit/s here ≈ 10 Gbit/s with V100s).")


# ---------------------------------------------------------------------------------------------
# Files


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def dump(path, doc):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


def write_text(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def load_setup(directory):
    """DIR/setup.json, written by `report.py setup` from the runner."""
    return load(os.path.join(directory, "setup.json"))


def write_results(directory, name, markdown, doc):
    """DIR/NAME.md and DIR/NAME.json, and the Markdown on stdout."""
    write_text(os.path.join(directory, f"{name}.md"), markdown)
    dump(os.path.join(directory, f"{name}.json"), doc)
    print(markdown, end="")


def read_runs(directory):
    """DIR/runs.tsv -> [{model, rate, config, system, status, path, doc}], the last line of a
    (model, rate, config) winning (a re-run replaces an earlier one)."""
    runs = {}
    with open(os.path.join(directory, "runs.tsv"), encoding="utf-8") as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            model, rate, config, system, status, path = fields[:6]
            wall = number(fields[6]) if len(fields) > 6 else None
            doc = None
            if status == "ok":
                if not os.path.isabs(path):
                    path = os.path.join(directory, path)
                doc = load(path)
            runs[(model, rate, config)] = {"model": model, "rate": rate, "config": config,
                                           "system": system, "status": status, "path": path,
                                           "wall_s": wall, "doc": doc}
    return list(runs.values())


# ---------------------------------------------------------------------------------------------
# Values and units


def mbits(rate):
    """'100mbit', '1gbit', '2.5gbit', 'none' -> Mbit/s (None for unshaped)."""
    if rate == "none":
        return None
    m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)bit", rate.strip().lower())
    if not m:
        raise ValueError(f"cannot read rate '{rate}' (expected e.g. 100mbit, 1gbit)")
    return float(m.group(1)) * {"k": 1e-3, "": 1e-6, "m": 1.0, "g": 1e3}[m.group(2)]


def rate_label(mbit):
    return f"{mbit / 1e3:g} Gbit/s" if mbit >= 1e3 else f"{mbit:g} Mbit/s"


def format_bytes(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def number(text):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def order(values, first=()):
    """Unique values in first-seen order, those listed in `first` ahead."""
    seen = list(dict.fromkeys(values))
    return [v for v in first if v in seen] + [v for v in seen if v not in first]


def md_row(cells):
    """One Markdown table row."""
    return "| " + " | ".join(cells) + " |"


# ---------------------------------------------------------------------------------------------
# Setup block (Markdown, and the SVG footer)


def link_rates(setup):
    """The link rate(s) of the setup, as the runner wrote them."""
    return setup.get("rates") or setup.get("rate")


def setup_markdown(setup, what):
    """Bullets stating the conditions of one experiment; `what` adds experiment-specific ones,
    followed by the note on the shared CPUs."""
    s = setup
    rates = link_rates(s)
    lines = [f"- emulated cluster: {s.get('hosts', '?')} hosts, link rate {rates} per host "
             "in each direction",
             "- shaping: " + SHAPING.format(shaping=s.get("shaping") or f"rate {rates}"),
             f"- machine: {s.get('nproc', '?')} CPUs (nproc), load average (1/5/15 min) "
             f"{s.get('load_before', '?')} before, {s.get('load_after', '?')} after (which "
             "includes these runs' own load)"]
    lines += what
    lines.append("- " + CPU_NOTE.format(nproc=s.get("nproc", "?")))
    lines += [f"- date: {s.get('date', '?')}; commit `{s.get('commit', '?')}`",
              f"- command: `{s.get('command', '?')}`"]
    runs = s.get("runs") or []
    if runs:
        lines.append(f"- the {len(runs)} program runs (log name: command):")
        lines.append("  <details><summary>commands</summary>")
        lines.append("")
        lines += [f"  - `{r}`" for r in runs]
        lines.append("")
        lines.append("  </details>")
    return lines


def svg_footer(setup, extra):
    return [f"{setup.get('hosts', '?')} emulated hosts at {link_rates(setup)} (scripts/netem, "
            f"tc tbf both directions, no added delay) on one {setup.get('nproc', '?')}-CPU "
            "machine; " + extra,
            f"{setup.get('date', '?')}, commit {setup.get('commit', '?')}; "
            f"{setup.get('command', '?')}"]
