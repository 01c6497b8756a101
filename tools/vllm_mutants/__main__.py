"""``python -m tools.vllm_mutants``: the command line (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from fixtures.subjects.vllm.loading.overlay import PACKAGE
from tools.fresh_run import ROOT
from tools.vllm_mutants import __doc__ as PACKAGE_DOC
from tools.vllm_mutants.discover import SCOPES, MutantError
from tools.vllm_mutants.equivalent import EQUIVALENT, check_equivalent_table
from tools.vllm_mutants.generate import every_id, generate, sample, select
from tools.vllm_mutants.report import (
    MergeError,
    build_report,
    merge,
    reclassify,
    render_list,
    render_markdown,
    summary_lines,
)
from tools.vllm_mutants.run import run_mutants, shard


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.vllm_mutants", description=PACKAGE_DOC.split("\n\n")[0])
    ap.add_argument("--vllm-overlay", type=Path, metavar="DIR", help="the change, in vLLM's layout")
    ap.add_argument(
        "--base",
        type=Path,
        metavar="DIR",
        help="the change's base, in vLLM's layout (default: the installed vllm)",
    )
    ap.add_argument(
        "--vllm-base",
        type=Path,
        metavar="DIR",
        help="given to every run as --vllm-base: the change's base as the oracle of what the change leaves alone "
        "(tests/nope/test_downstream_route.py); not implied by --base (its runs cost time where the change's own "
        "lines are killed without it: docs/measurements-log.md)",
    )
    ap.add_argument(
        "--scope",
        choices=SCOPES,
        help="lines: the statements the diff against the base adds or modifies (default with --base); "
        "function: every statement of every changed function (default without --base)",
    )
    ap.add_argument("--max-mutants", type=int, metavar="N", help="take N mutants evenly spaced over the order")
    ap.add_argument("--only", action="append", default=[], metavar="PATTERN", help="run mutants whose id matches")
    ap.add_argument("--shard-id", type=int, default=0, metavar="K", help="run shard K of --num-shards (from 0)")
    ap.add_argument("--num-shards", type=int, default=1, metavar="N", help="split the mutants into N shards")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="REPORT", help="join shard reports (report.json)")
    ap.add_argument("--jobs", type=int, default=2, help="pytest processes at a time (default 2)")
    ap.add_argument(
        "--control-workers",
        type=int,
        default=1,
        metavar="N",
        help="run the control under pytest-xdist with N workers (default 1: one process, the least CPU)",
    )
    ap.add_argument("--timeout", type=float, default=900, help="the most seconds one run may take (default 900)")
    ap.add_argument(
        "--profile", default="mutants", help="hypothesis profile (default mutants), always without shrinking"
    )
    ap.add_argument("--launcher", choices=("auto", "fork", "fresh"), default="auto", help="how runs start")
    ap.add_argument(
        "--baseline",
        choices=("release", "none"),
        default="release",
        help="the runs' --baseline: release (as the verification against an overlay: every step also through the "
        "installed release, compared bit for bit) or none (the suite's own oracles alone)",
    )
    ap.add_argument(
        "--claim",
        action="append",
        default=[],
        metavar="CAP",
        help="a fast path the change claims, passed to every run (pytest's --claim: a mutant that drops it fails)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "vllm-mutants", help="report folder")
    ap.add_argument("--list", action="store_true", help="list the mutants (per function, per operator) and stop")
    ap.add_argument("--diffs", action="store_true", help="with --list: print each mutant's diff")
    ap.add_argument(
        "--reach-from",
        type=Path,
        metavar="REACH_JSON",
        help="no control run: take the reach (and the verdict that the unmutated overlay passes) from the "
        "reach plugin's file of a verification session run earlier under the same --profile (its xdist "
        "workers' files beside it are read too)",
    )
    ap.add_argument("--all-tests", action="store_true", help="run every test of PATHS, not only those that reach")
    ap.add_argument("--skip-equivalent", action="store_true", help="do not run mutants listed as equivalent")
    ap.add_argument("--keep-trees", action="store_true", help="keep each mutant's overlay tree in OUT/trees")
    ap.add_argument("--no-equivalent", action="store_true", help="do not apply EQUIVALENT (another overlay's code)")
    ap.add_argument(
        "--rebuild-report",
        action="store_true",
        help="run nothing: write the report again from OUT/report.json, applying EQUIVALENT as it is now",
    )
    ap.add_argument(
        "--missing",
        choices=("error", "skip"),
        default="error",
        help="when --vllm-overlay or --base does not exist: error (default), or say so and stop with status 0 "
        "(CI's default trees beside the checkout)",
    )
    ap.add_argument("paths", nargs="*", default=["tests"], help="test paths (default: tests)")
    return ap


def main(argv=None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    out = args.out.resolve()
    equivalent = {} if args.no_equivalent else EQUIVALENT
    if args.merge:
        try:
            report = merge([json.loads(Path(p).read_text()) for p in args.merge])
        except (OSError, ValueError, KeyError, MergeError) as exc:
            print(f"error: --merge: {exc}", file=sys.stderr)
            return 2
        return _write(report, out)
    if args.rebuild_report:
        try:
            report = reclassify(json.loads((out / "report.json").read_text()), equivalent)
        except (OSError, KeyError, ValueError) as exc:
            print(f"error: --rebuild-report: {exc}", file=sys.stderr)
            return 2
        return _write(report, out)
    if args.vllm_overlay is None:
        ap.error("--vllm-overlay is required (unless --merge or --rebuild-report)")
    absent = [
        f"{name} {path}"
        for name, path in (
            ("--vllm-overlay", args.vllm_overlay),
            ("--base", args.base),
            ("--vllm-base", args.vllm_base),
        )
        if path and not path.exists()
    ]
    if absent and args.missing == "skip":
        print(f"skipped: {', '.join(absent)} does not exist; no mutant ran")
        return 0
    if not (args.vllm_overlay / PACKAGE).is_dir():
        ap.error(f"--vllm-overlay={args.vllm_overlay}: no folder {PACKAGE}/ in it")
    if args.base is not None and not (args.base / PACKAGE).is_dir():
        ap.error(f"--base={args.base}: no folder {PACKAGE}/ in it")
    scope = args.scope or ("lines" if args.base else "function")
    try:
        generation = generate(args.vllm_overlay, args.base, scope=scope)
        check_equivalent_table(equivalent, every_id(args.vllm_overlay))
        selected = shard(
            sample(select(generation.mutants, args.only), args.max_mutants), args.shard_id, args.num_shards
        )
    except (MutantError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.list:
        print(render_list(generation, selected, args.diffs))
        return 0
    runnable = [m for m in selected if not (args.skip_equivalent and m.id in equivalent)]
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"vllm mutants: {len(runnable)} of {len(generation.mutants)} ({scope} scope), {args.jobs} at a time", flush=True
    )
    start = time.perf_counter()
    run = run_mutants(
        runnable,
        args.vllm_overlay,
        out,
        paths=args.paths,
        profile=args.profile,
        jobs=args.jobs,
        timeout=args.timeout,
        mode=args.launcher,
        extra=(
            "--subject=vllm",
            f"--baseline={args.baseline}",
            *(f"--claim={cap}" for cap in args.claim),
            *([f"--vllm-base={args.vllm_base}"] if args.vllm_base else []),
        ),
        all_tests=args.all_tests,
        keep_trees=args.keep_trees,
        reach_from=reach_files(args.reach_from) if args.reach_from else None,
        control_workers=args.control_workers,
    )
    cpu = (run["control"] or {}).get("cpu_seconds") or 0.0
    cpu += sum(r.get("cpu_seconds") or 0.0 for r in run["results"].values())
    for m in selected:
        if m not in runnable:
            run["results"][m.id] = {"status": "survived", "not_run": True, "detail": "not run (--skip-equivalent)"}
    report = build_report(
        generation,
        selected,
        run,
        args.vllm_overlay,
        equivalent=equivalent,
        wall=time.perf_counter() - start,
        cpu=cpu,
        profile=args.profile,
        jobs=args.jobs,
        base=args.base,
        shard=(args.shard_id, args.num_shards) if args.num_shards > 1 else None,
        baseline=args.baseline,
    )
    return _write(report, out)


def reach_files(path: Path) -> list[Path]:
    """``path`` and the files its xdist workers wrote beside it (``STEM.gwN.json``)."""
    found = [path] if path.exists() else []
    return found + sorted(path.parent.glob(f"{path.stem}.gw*{path.suffix}"))


def _write(report: dict, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(render_markdown(report))
    print("\n".join(summary_lines(report["summary"])))
    for problem in report["summary"]["problems"]:
        print(f"PROBLEM: {problem}")
    print(f"written: {out / 'report.md'}, {out / 'report.json'}")
    return 0 if report["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
