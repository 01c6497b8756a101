#!/usr/bin/env python3
"""Render pytest-benchmark JSON files into one Markdown report and one PNG plot.

    python tools/bench_report.py reports/bench-bench.json --out reports/bench-bench
    python tools/bench_report.py ref.json vllm.json --out /tmp/bench/report

writes ``OUT.md`` (tables: build() time per step, host vs device path, by n
and M, with Triton launches per step, one table per subject and, with more
than one subject, a side-by-side table; the host path's wait with the GPU
stream stalled; NoPE query assembly, copy vs zero-copy) and ``OUT.png`` (time
per step against n: one series per subject, path and M).  Subjects are told
apart by ``extra_info["subject_label"]`` (e.g. ``vllm 0.33.0 + overlay
vllm-pr``), else ``extra_info["subject"]``.  Several JSON files are merged; a
benchmark present in more than one (same test id, subject and device) is
taken from the last file given, and the report says how many were replaced.  The PNG
needs matplotlib; without it the Markdown is still written and says so.  Only
the standard library is needed otherwise.

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


UNNAMED_SUBJECT = "(subject not recorded)"


# Set by render() when the merged files hold runs on more than one device: subjects are then
# told apart per device too ("reference (cpu)", "reference (cuda)").
SHOW_DEVICE = False


def subject_of(bench: dict) -> str:
    info = bench.get("extra_info", {})
    label = info.get("subject_label") or info.get("subject") or UNNAMED_SUBJECT
    return f"{label} ({info.get('device', '?')})" if SHOW_DEVICE else label


def merge(sources: list[tuple[Path, dict]]) -> dict:
    """One pytest-benchmark-like dict from several files; a later file's benchmark replaces an earlier one's."""
    if len(sources) == 1:
        return sources[0][1]
    merged: dict[tuple, dict] = {}
    replaced = 0
    for path, data in sources:
        for b in data["benchmarks"]:
            info = b.get("extra_info", {})
            key = (
                b.get("fullname") or json.dumps(info, sort_keys=True, default=str),
                subject_of(b),
                info.get("device"),
            )
            replaced += key in merged
            merged.pop(key, None)
            merged[key] = {**b, "source": str(path)}
    first = sources[0][1]
    return {
        "machine_info": first.get("machine_info", {}),
        "datetime": first.get("datetime", "?"),
        "benchmarks": list(merged.values()),
        "sources": [
            {"path": str(path), "datetime": data.get("datetime", "?"), "machine": machine_name(data)}
            for path, data in sources
        ],
        "replaced": replaced,
    }


def machine_name(data: dict) -> str:
    machine = data.get("machine_info", {})
    return machine.get("cpu", {}).get("brand_raw", machine.get("processor", "?"))


def by_kind(data: dict, kind: str) -> list[dict]:
    return [b for b in data["benchmarks"] if b.get("extra_info", {}).get("kind") == kind]


def by_subject(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows per subject, subjects in order of first appearance."""
    out: dict[str, list[dict]] = {}
    for b in rows:
        out.setdefault(subject_of(b), []).append(b)
    return out


STAT = "min"


def stat(bench: dict | None) -> float | None:
    return bench["stats"][STAT] if bench else None


def both(bench: dict | None) -> str:
    if not bench:
        return "—"
    return f"{fmt_time(bench['stats']['min'])} / {fmt_time(bench['stats']['median'])}"


OPS = ("launches", "h2d", "d2h")


def ops_of(bench: dict | None) -> dict | None:
    """The ledger counts of a steady step (``device_ops_per_step``; docs/performance.md), if recorded."""
    return (bench or {}).get("extra_info", {}).get("device_ops_per_step")


def show_ops(ops: dict | None) -> str:
    return ", ".join(f"{k} {ops[k]}" for k in OPS) if ops else "—"


def saved_ops(general: dict | None, host: dict | None) -> str:
    """What a steady host-path step saves against ``general`` (a device path's ledger counts)."""
    return ", ".join(f"{k} {general[k] - host[k]}" for k in OPS) if general and host else "—"


def build_table(rows: list[dict]) -> list[str]:
    cells: dict[tuple[int, int], dict[str, dict]] = defaultdict(dict)
    for b in rows:
        info = b["extra_info"]
        cells[(info["m"], info["n"])][info["path"]] = b
    lines = [
        f"| M | n | host path (min / median) | device path (min / median) | device / host ({STAT}) "
        "| launches/step host | launches/step device | device ops/step host | device ops/step device "
        "| saved by the host path | saved against the baseline's device path (the release) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- |",
    ]
    for (m, n), paths in sorted(cells.items()):
        host, dev = paths.get("host"), paths.get("device")
        h, d = stat(host), stat(dev)
        ratio = f"{d / h:.0f}x" if h and d else "—"
        lh = host["extra_info"]["triton_launches_per_step"] if host else "—"
        ld = dev["extra_info"]["triton_launches_per_step"] if dev else "—"
        oh, od = ops_of(host), ops_of(dev)
        ob = (host or {}).get("extra_info", {}).get("baseline_device_ops_per_step")
        lines.append(
            f"| {m} | {n} | {both(host)} | {both(dev)} | {ratio} | {lh} | {ld} | {show_ops(oh)} | {show_ops(od)} "
            f"| {saved_ops(od, oh)} | {saved_ops(ob, oh)} |"
        )
    return lines


def side_by_side_table(rows: list[dict]) -> list[str]:
    """One row per (M, n): every subject's host and device path time (the chosen statistic)."""
    subjects = list(by_subject(rows))
    cells: dict[tuple[int, int], dict[tuple[str, str], dict]] = defaultdict(dict)
    for b in rows:
        info = b["extra_info"]
        cells[(info["m"], info["n"])][(subject_of(b), info["path"])] = b
    columns = [(subject, path) for path in ("host", "device") for subject in subjects]
    lines = [
        "| M | n | " + " | ".join(f"{subject}, {path} ({STAT})" for subject, path in columns) + " |",
        "| ---: | ---: | " + " | ".join("---:" for _ in columns) + " |",
    ]
    for (m, n), found in sorted(cells.items()):
        lines.append(f"| {m} | {n} | " + " | ".join(fmt_time(stat(found.get(c))) for c in columns) + " |")
    return lines


def fmt_opt(info: dict, key: str) -> str:
    return fmt_time(info[key]) if isinstance(info.get(key), int | float) else "—"


def stall_table(rows: list[dict]) -> list[str]:
    lines = [
        "| subject | stall queued | M | n | stall (measured) | build() host time (min / median) "
        "| event wait (min / median / max) | waits per round | stall still running after build() |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    order = {subject: i for i, subject in enumerate(by_subject(rows))}

    def key(b):
        info = b["extra_info"]
        return (order[subject_of(b)], info.get("stall", ""), info["m"], info["n"])

    for b in sorted(rows, key=key):
        info = b["extra_info"]
        waits = (
            f"{info['waits_per_round_min']}–{info['waits_per_round_max']}"
            if info.get("waits_per_round_min") != info.get("waits_per_round_max")
            else str(info.get("waits_per_round_min", "—"))
        )
        pending = (
            f"{info['stall_pending_after_build']} / {info['rounds']}"
            if "stall_pending_after_build" in info and "rounds" in info
            else "—"
        )
        lines.append(
            f"| {subject_of(b)} | {info.get('stall', '?').replace('_', ' ')} | {info['m']} | {info['n']} "
            f"| {fmt_opt(info, 'stall_measured_s')} | {both(b)} "
            f"| {fmt_opt(info, 'wait_min_s')} / {fmt_opt(info, 'wait_median_s')} / {fmt_opt(info, 'wait_max_s')} "
            f"| {waits} | {pending} |"
        )
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


SERIES_COLORS = {
    "host": ["tab:blue", "tab:green", "tab:purple", "tab:cyan"],
    "device": ["tab:red", "tab:orange", "tab:brown", "tab:pink"],
}
SUBJECT_MARKERS = ["o", "s", "^", "D"]


def plot(rows: list[dict], out: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (tox -e bench installs it)."
    subjects = list(by_subject(rows))
    series: dict[tuple[str, str, int], list[tuple[int, float]]] = defaultdict(list)
    for b in rows:
        info = b["extra_info"]
        series[(subject_of(b), info["path"], info["m"])].append((info["n"], stat(b)))
    ms = sorted({m for _, _, m in series})
    styles = ["-", "--", ":", "-."]
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=120)
    for (subject, path, m), points in sorted(series.items(), key=lambda kv: (subjects.index(kv[0][0]), kv[0][1:])):
        points.sort()
        i = subjects.index(subject)
        palette = SERIES_COLORS.get(path, ["black"])
        xs, ys = [p[0] for p in points], [p[1] * 1e3 for p in points]
        ax.plot(
            xs,
            ys,
            styles[ms.index(m) % len(styles)],
            color=palette[i % len(palette)],
            marker=SUBJECT_MARKERS[i % len(SUBJECT_MARKERS)],
            label=f"{path} path, M={m}" if len(subjects) == 1 else f"{subject}: {path} path, M={m}",
        )
    devices = {b["extra_info"].get("device") for b in rows}
    ax.set_xscale("log", base=2)
    ns = sorted({n for points in series.values() for n, _ in points})
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_yscale("log")
    ax.set_xlabel("n = decode tokens in the step")
    ax.set_ylabel(f"time per build() step, {STAT} over rounds [ms]")
    if devices == {"cpu"}:
        note = " (CPU: host-side cost; device path = Triton interpreter)"
    elif devices == {"cuda"}:
        note = " (GPU, synchronised)"
    else:
        note = " (CPU and GPU runs mixed)"
    who = "" if len(subjects) == 1 else "\n" + " vs ".join(subjects)
    ax.set_title(f"build() per pure-decode step: host vs device path{note}{who}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2 if len(series) > 6 else 1)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return f"![time per step against n]({out.name})"


def header(data: dict) -> list[str]:
    if "sources" not in data:
        machine = data.get("machine_info", {})
        return [
            f"Machine: {machine_name(data)}, Python {machine.get('python_version', '?')}; "
            f"run {data.get('datetime', '?')}."
        ]
    lines = ["Merged from:", ""]
    lines += [f"- `{src['path']}`: {src['machine']}; run {src['datetime']}." for src in data["sources"]]
    if data.get("replaced"):
        lines += ["", f"{data['replaced']} benchmark(s) present in more than one file were taken from the last one."]
    return lines + [""]


def timed_notes(rows: list[dict]) -> list[str]:
    timed = sorted({b["extra_info"]["timed"] for b in rows if b["extra_info"].get("timed")})
    return [f"Timed: `{t}`." for t in timed]


def render(data: dict, out: Path) -> str:
    global SHOW_DEVICE
    SHOW_DEVICE = len({b.get("extra_info", {}).get("device") for b in data["benchmarks"]} - {None}) > 1
    build = by_kind(data, "build_step")
    stalled = by_kind(data, "stalled_wait")
    nope = by_kind(data, "nope_query_standin")
    lines = [
        "# Benchmark report",
        "",
        *header(data),
        f"Times: min / median over the rounds pytest-benchmark ran, after warm-up steps; ratios and the "
        f"plot use the {STAT}.",
        "",
    ]
    if build:
        devices = {b["extra_info"].get("device") for b in build}
        lines += ["## build() per pure-decode step", ""]
        if "cpu" in devices:
            lines += [
                "CPU run: host-side cost only. The device path's kernel runs under the Triton "
                "interpreter (one program per decode request), so its times say nothing about GPU "
                "kernel time and its sweep is capped at small n; the host path numbers are its real "
                "host work (numpy cumsum and the M + 1 staging buffer).",
                "",
            ]
        if devices - {"cpu"}:
            lines += ["GPU run: each timed step ends with a device synchronisation.", ""]
        groups = by_subject(build)
        for subject, rows in groups.items():
            if len(groups) > 1 or subject != UNNAMED_SUBJECT:
                lines += [f"### {subject}", "", *timed_notes(rows), ""]
            lines += build_table(rows) + [""]
        if len(groups) > 1:
            lines += ["### Side by side", "", *side_by_side_table(build), ""]
        lines += [plot(build, out.with_suffix(".png")), ""]
    if stalled:
        lines += [
            "## Host path's event wait with the GPU stream stalled",
            "",
            "Each round: the previous host-path step (its upload and event), then `torch.cuda._sleep` "
            "queued on the stream after that upload (`after upload`; the control `before upload` queues "
            "it before, so the event is behind the stall); then the next build() is timed on the host, "
            "without synchronisation. The event wait is timed separately inside build() (per round: "
            "min / median / max). Last column: rounds in which the stall was still running when build() "
            "returned.",
            "",
            *stall_table(stalled),
            "",
        ]
    if nope:
        lines += [
            "## NoPE query assembly, copy vs zero-copy (local stand-in, not a subject's forward)",
            "",
            *nope_table(nope),
            "",
        ]
    if not build and not stalled and not nope:
        lines.append("No benchmarks of a known kind in this file.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "json", type=Path, nargs="+", help="pytest-benchmark JSON (--benchmark-json); several are merged"
    )
    parser.add_argument("--out", type=Path, required=True, help="output prefix: writes OUT.md and OUT.png")
    parser.add_argument(
        "--stat", choices=("min", "median", "mean"), default="min", help="statistic for ratios and plot"
    )
    args = parser.parse_args(argv)
    global STAT
    STAT = args.stat
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = render(merge([(path, load(path)) for path in args.json]), args.out)
    args.out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
