"""Every finding's fix, verified: its diff applied to the file it names and the suite run on the result.

    python -m tools.verify_fixes [--subject NAME ...] [--key KEY ...] [--vllm-overlay DIR] [--together]
                                 [--whole] [--out DIR] [-- PYTEST_ARGS]

For each finding with a ``fix_diff`` (:class:`fixtures.protocol.FindingReport`) of the chosen subjects (default:
every subject's), the diff is laid over a copy of ``--vllm-overlay`` (the file under review; files the overlay
lacks come from the installed vLLM: :func:`fixtures.subjects.vllm.loading.fixes.fixed_overlay`) and one pytest run
on that overlay, under the ``ci`` profile, must show:

* the finding gone: its regression test does not pass (it fails saying the finding no longer reproduces, or is
  not applicable because vLLM would never run the input), and nothing announces the finding: its warning is
  made an error (``-W error:known finding KEY``);
* nothing else broken: the properties that passed over it (its ``properties``) pass.

``--together`` applies every chosen fix to one overlay and makes one such run (CI's: the ``vllm`` subject's
findings in one process); ``--whole`` adds the subject's whole verification (``-m verification``) to that run
(nightly).  The table goes to ``OUT/fixes.md`` and ``OUT/fixes.json``.  Exit status 0 when every fix holds, 1
otherwise, 2 on a diff that no longer applies.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from fixtures import ROOT
from fixtures.subjects import registered_findings
from fixtures.subjects.vllm.loading.fixes import FixError, fixed_overlay


@dataclass
class Outcome:
    keys: list[str]
    ok: bool
    why: list[str]
    command: str


def fixable(subjects: list[str] | None, keys: list[str] | None) -> list[tuple[str, object]]:
    """The findings with a fix diff, of ``subjects`` (None: every one), narrowed to ``keys`` where given."""
    chosen = [
        (s, f)
        for s, f in registered_findings()
        if getattr(f, "fix_diff", "") and (not subjects or s in subjects) and (not keys or f.key in keys)
    ]
    unknown = sorted(set(keys or ()) - {f.key for _, f in chosen})
    if unknown:
        raise SystemExit(f"verify_fixes: no finding with a fix diff has the key(s) {unknown}")
    return chosen


def outcomes_of(junit: Path) -> dict[str, str]:
    """Test node id -> passed, failed or skipped, from a JUnit report (a parametrised test: its worst case)."""
    order = {"passed": 0, "skipped": 1, "failed": 2}
    found: dict[str, str] = {}
    for case in ET.parse(junit).iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        node = f"{path}.py::{case.get('name', '').split('[')[0]}"
        state = (
            "failed"
            if case.find("failure") is not None or case.find("error") is not None
            else "skipped"
            if case.find("skipped") is not None
            else "passed"
        )
        if order[state] >= order[found.get(node, "passed")]:
            found[node] = state
    return found


def run_fixed(
    findings: list[tuple[str, object]], overlay: Path | None, work: Path, whole: bool, extra: list[str]
) -> Outcome:
    """One pytest run of ``findings``' regression tests and properties on their fixes, laid over ``overlay``."""
    subjects = sorted({s for s, _ in findings})
    if len(subjects) != 1:
        raise SystemExit(f"verify_fixes: fixes of one subject at a time, got {subjects}")
    fixed = work / "overlay"
    for _, finding in findings:
        fixed_overlay(finding.fix_diff, fixed, source=overlay if not fixed.exists() else fixed)
    regressions = sorted({f.regression_test for _, f in findings})
    properties = sorted({p for _, f in findings for p in f.properties})
    junit = work / "junit.xml"
    args = [
        sys.executable,
        "-m",
        "pytest",
        *regressions,
        *properties,
        f"--subject={subjects[0]}",
        f"--vllm-overlay={fixed}",
        f"--junitxml={junit}",
        "-p",
        "no:cacheprovider",
        *(f"-Werror:known finding {f.key}:fixtures.findings.KnownFindingWarning" for _, f in findings),
        *extra,
    ]
    env = {**os.environ, "HYPOTHESIS_PROFILE": os.environ.get("HYPOTHESIS_PROFILE", "ci")}
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    (work / "pytest.log").write_text(proc.stdout + proc.stderr)
    why = []
    if not junit.is_file():
        why.append(f"pytest wrote no report (exit {proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return Outcome([f.key for _, f in findings], False, why, shlex.join(args))
    states = outcomes_of(junit)
    for node in regressions:
        if states.get(node) == "passed":
            why.append(f"{node} still passes: the finding still reproduces with the fix")
        elif node not in states:
            why.append(f"{node} did not run")
    for node in properties:
        if states.get(node) != "passed":
            why.append(f"{node}: {states.get(node, 'did not run')} with the fix")
    if whole:
        args = [a for a in args if a not in (*regressions, *properties) and not a.startswith("--junitxml")]
        args[3:3] = ["-m", "verification"]
        proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
        (work / "pytest-whole.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            tail = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
            why.append(f"the whole verification exits {proc.returncode} with the fix: {'; '.join(tail[:5])}")
    return Outcome([f.key for _, f in findings], not why, why, shlex.join(args))


def report(outcomes: list[Outcome], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = ["| finding | fix holds | why not |", "| --- | --- | --- |"]
    for o in outcomes:
        rows.append(f"| {', '.join(f'`{k}`' for k in o.keys)} | {'yes' if o.ok else 'NO'} | {'; '.join(o.why)} |")
    (out / "fixes.md").write_text("\n".join(rows) + "\n")
    (out / "fixes.json").write_text(json.dumps([o.__dict__ for o in outcomes], indent=1) + "\n")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--subject", action="append", help="the subjects whose findings' fixes to verify (default: all)")
    ap.add_argument("--key", action="append", help="only these findings")
    ap.add_argument(
        "--vllm-overlay", type=Path, help="the overlay folder the fixes are laid over (the file under review)"
    )
    ap.add_argument("--missing", choices=("error", "skip"), default="error", help="an --vllm-overlay that is absent")
    ap.add_argument("--together", action="store_true", help="every fix in one overlay and one run")
    ap.add_argument("--whole", action="store_true", help="also the subject's whole verification (nightly)")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "fixes")
    args = ap.parse_args(argv)
    if args.vllm_overlay is not None and not args.vllm_overlay.is_dir():
        if args.missing == "skip":
            print(f"verify_fixes: skipped, --vllm-overlay {args.vllm_overlay} does not exist")
            return 0
        raise SystemExit(f"verify_fixes: --vllm-overlay {args.vllm_overlay} does not exist")
    findings = fixable(args.subject, args.key)
    groups: dict[str, list] = {}
    for subject, finding in findings:
        groups.setdefault(subject if args.together else finding.key, []).append((subject, finding))
    outcomes = []
    for name, group in groups.items():
        with tempfile.TemporaryDirectory(prefix=f"fix-{name}-") as tmp:
            try:
                outcome = run_fixed(group, args.vllm_overlay, Path(tmp), args.whole, extra)
            except FixError as exc:
                print(f"verify_fixes: {name}: the fix no longer applies: {exc}", file=sys.stderr)
                return 2
            args.out.mkdir(parents=True, exist_ok=True)
            for log in Path(tmp).glob("pytest*.log"):
                shutil.copy(log, args.out / f"{name}-{log.name}")
        print(f"{'holds' if outcome.ok else 'DOES NOT HOLD'}: {', '.join(outcome.keys)}")
        for line in outcome.why:
            print(f"  {line}")
        outcomes.append(outcome)
    report(outcomes, args.out)
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
