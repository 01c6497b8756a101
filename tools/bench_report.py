#!/usr/bin/env python3
"""Render a pytest-benchmark JSON file into a Markdown report and a PNG plot.

    python tools/bench_report.py reports/bench-bench.json --out reports/bench-bench

writes ``OUT.md`` (tables: build() time per step, host vs device path, by n
and M, with Triton launches per step; NoPE query assembly, copy vs zero-copy)
and ``OUT.png`` (time per step against n, both paths, one line per M).  The
PNG needs matplotlib; without it the Markdown is still written and says so.
Only the standard library is needed otherwise.

``--stat`` picks the statistic of the rounds shown (default ``min``, the
least disturbed by other load on a shared machine; ``median`` is the other
common choice).  The tables show both.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def load(path: Path) -> dict:
    data = json.loads(path.read_text())
    if "benchmarks" not in data:
        raise SystemExit(f"{path}: not a pytest-benchmark JSON file (no 'benchmarks')")
    return data


def by_kind(data: dict, kind: str) -> list[dict]:
    return [b for b in data["benchmarks"] if b.get("extra_info", {}).get("kind") == kind]


STAT = "min"


def stat(bench: dict | None) -> float | None:
    return bench["stats"][STAT] if bench else None


def both(bench: dict | None) -> str:
    if not bench:
        return "—"
    return f"{fmt_time(bench['stats']['min'])} / {fmt_time(bench['stats']['median'])}"


def build_table(rows: list[dict]) -> list[str]:
    cells: dict[tuple[int, int], dict[str, dict]] = defaultdict(dict)
    for b in rows:
        info = b["extra_info"]
        cells[(info["m"], info["n"])][info["path"]] = b
    lines = [
        f"| M | n | host path (min / median) | device path (min / median) | device / host ({STAT}) "
        "| launches/step host | launches/step device |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (m, n), paths in sorted(cells.items()):
        host, dev = paths.get("host"), paths.get("device")
        h, d = stat(host), stat(dev)
        ratio = f"{d / h:.0f}x" if h and d else "—"
        lh = host["extra_info"]["triton_launches_per_step"] if host else "—"
        ld = dev["extra_info"]["triton_launches_per_step"] if dev else "—"
        lines.append(f"| {m} | {n} | {both(host)} | {both(dev)} | {ratio} | {lh} | {ld} |")
    return lines


def nope_table(rows: list[dict]) -> list[str]:
    cells: dict[tuple[int, int], dict[str, dict]] = defaultdict(dict)
    for b in rows:
        info = b["extra_info"]
        cells[(info["heads"], info["tokens"])][info["variant"]] = b
    lines = [
        f"| H | T | ql_nope size | copy path (min / median) | zero-copy (min / median) | saved per call ({STAT}) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (h, t), variants in sorted(cells.items()):
        copy, zero = variants.get("copy"), variants.get("zero_copy")
        c, z = stat(copy), stat(zero)
        size = (copy or zero)["extra_info"]["bytes"]
        saved = fmt_time(c - z) if c is not None and z is not None else "—"
        lines.append(f"| {h} | {t} | {size / 2**20:.3g} MiB | {both(copy)} | {both(zero)} | {saved} |")
    return lines


def plot(rows: list[dict], out: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (tox -e bench installs it)."
    series: dict[tuple[str, int], list[tuple[int, float]]] = defaultdict(list)
    for b in rows:
        info = b["extra_info"]
        series[(info["path"], info["m"])].append((info["n"], stat(b)))
    ms = sorted({m for _, m in series})
    styles = ["-", "--", ":", "-."]
    colors = {"host": "tab:blue", "device": "tab:red"}
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for (path, m), points in sorted(series.items()):
        points.sort()
        xs, ys = [p[0] for p in points], [p[1] * 1e3 for p in points]
        ax.plot(
            xs,
            ys,
            styles[ms.index(m) % len(styles)],
            color=colors.get(path, "black"),
            marker="o",
            label=f"{path} path, M={m}",
        )
    device = rows[0]["extra_info"]["device"]
    ax.set_xscale("log", base=2)
    ns = sorted({n for points in series.values() for n, _ in points})
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_yscale("log")
    ax.set_xlabel("n = decode tokens in the step")
    ax.set_ylabel(f"time per build() step, {STAT} over rounds [ms]")
    note = " (CPU: host-side cost; device path = Triton interpreter)" if device == "cpu" else " (GPU, synchronised)"
    ax.set_title(f"build() per pure-decode step: host vs device path{note}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return f"![time per step against n]({out.name})"


def render(data: dict, out: Path) -> str:
    machine = data.get("machine_info", {})
    build = by_kind(data, "build_step")
    nope = by_kind(data, "nope_query_standin")
    lines = [
        "# Benchmark report",
        "",
        f"Machine: {machine.get('cpu', {}).get('brand_raw', machine.get('processor', '?'))}, "
        f"Python {machine.get('python_version', '?')}; run {data.get('datetime', '?')}.",
        f"Times: min / median over the rounds pytest-benchmark ran, after warm-up steps; ratios and the "
        f"plot use the {STAT}.",
        "",
    ]
    if build:
        device = build[0]["extra_info"]["device"]
        lines += ["## build() per pure-decode step", ""]
        if device == "cpu":
            lines += [
                "CPU run: host-side cost only. The device path's kernel runs under the Triton "
                "interpreter (one program per decode request), so its times say nothing about GPU "
                "kernel time and its sweep is capped at small n; the host path numbers are its real "
                "host work (numpy cumsum and the M + 1 staging buffer).",
                "",
            ]
        else:
            lines += ["GPU run: each timed step ends with a device synchronisation.", ""]
        lines += build_table(build) + ["", plot(build, out.with_suffix(".png")), ""]
    if nope:
        lines += [
            "## NoPE query assembly, copy vs zero-copy (local stand-in, not a subject's forward)",
            "",
            *nope_table(nope),
            "",
        ]
    if not build and not nope:
        lines.append("No benchmarks of a known kind in this file.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", type=Path, help="pytest-benchmark JSON (--benchmark-json)")
    parser.add_argument("--out", type=Path, required=True, help="output prefix: writes OUT.md and OUT.png")
    parser.add_argument(
        "--stat", choices=("min", "median", "mean"), default="min", help="statistic for ratios and plot"
    )
    args = parser.parse_args(argv)
    global STAT
    STAT = args.stat
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = render(load(args.json), args.out)
    args.out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
