"""The random-seed gate: each subject's verification under a fresh random seed, as a developer runs it locally.

    python -m tools.seed_gate [--seed N] [--rotate] [--subjects NAME,...] [--vllm-overlay DIR]
                              [--vllm-base DIR] [--claim CAP ...] [--out DIR] [-- PYTEST_ARGS]

CI's verification runs are derandomised (the ``ci`` profile: the same examples
every run); a developer's run draws new ones (the ``dev`` profile, a random
seed).  Every subject the suite ships is right as far as the suite knows
(the reference, the post-change file with the change's claims, the sparse MLA
siblings of the installed vLLM, and the installed release's own file), so any FAILED property here is a false alarm
of the suite's, and any suite error its own bug: either fails the gate.

The first line printed names the seed and the subjects it drives, and how to
rerun exactly that.  ``--rotate`` drives one subject, chosen by the seed (CI:
a fresh seed per run, so the subjects take turns); without it, every subject.
Each run is ``pytest -m verification`` under ``HYPOTHESIS_PROFILE=dev`` with
``--hypothesis-seed=N`` on two xdist workers; its summary goes to
``OUT/summary-SUBJECT-SEED.json`` and one line per run to ``OUT/seeds.jsonl``
(subject, seed, exit status, failed and suite-error properties, date), from
which docs/measurements.md counts the seeds each subject has passed.

Exit status: 0 when every run passed, else the first failing run's (1: a
FAILED property; 4: refused; 6: a suite error).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shlex
import subprocess
import sys
import time
from pathlib import Path

from fixtures import ROOT
from fixtures.subjects import KNOWN_SUBJECTS

# The subjects the suite ships, each right: the reference, the vLLM subject under the overlay (the post-change
# file with the change's claims), and every other built-in subject of the registry (vLLM's siblings).
OVERLAY = "vllm-overlay"
SIBLINGS = tuple(name for name in KNOWN_SUBJECTS if name not in ("reference", "vllm"))
SUBJECTS = ("reference", OVERLAY, "vllm", *SIBLINGS)  # "vllm": the installed release's own file


def subject_args(name: str, overlay: str | None, base: str | None, claims: list[str]) -> list[str]:
    if name == "reference":
        return ["--subject=reference"]
    if name == OVERLAY:
        if not overlay:
            raise SystemExit("seed gate: the post-change file needs --vllm-overlay DIR (tox -e seeds passes it)")
        return [
            "--subject=vllm",
            f"--vllm-overlay={overlay}",
            *([f"--vllm-base={base}"] if base else []),
            *(f"--claim={cap}" for cap in claims),
        ]
    if name == "vllm" or name in SIBLINGS:
        return [f"--subject={name}"]
    raise SystemExit(f"seed gate: unknown subject {name!r}; known: {', '.join(SUBJECTS)}")


def chosen(seed: int, rotate: bool, names: list[str]) -> list[str]:
    """The subjects of this run: all of ``names``, or (``rotate``) the one the seed picks."""
    return [names[seed % len(names)]] if rotate else names


def failed_properties(summary: Path) -> tuple[list[str], list[str]]:
    """(FAILED properties, suite-error properties) of a run's ``--summary-json``."""
    try:
        props = json.loads(summary.read_text())["properties"]
    except (OSError, ValueError, KeyError):
        return [], []
    failed = [name for name, p in props.items() if p["verdict"] == "FAILED"]
    errors = [name for name, p in props.items() if p["suite_errors"] or p["usage_errors"]]
    return failed, errors


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: a fresh random one)")
    ap.add_argument("--rotate", action="store_true", help="drive only the subject the seed picks")
    ap.add_argument("--subjects", default=",".join(SUBJECTS), help=f"comma-separated (default: {','.join(SUBJECTS)})")
    ap.add_argument("--vllm-overlay", default=os.environ.get("VLLM_OVERLAY"))
    ap.add_argument("--vllm-base", default=os.environ.get("VLLM_BASE"))
    ap.add_argument("--claim", action="append", default=[], metavar="CAP")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "seed-gate")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().getrandbits(32)
    names = [n for n in args.subjects.split(",") if n]
    runs = chosen(seed, args.rotate, names)
    for name in runs:
        subject_args(name, args.vllm_overlay, args.vllm_base, args.claim)  # an unknown name stops before any run
    rerun = [sys.executable, "-m", "tools.seed_gate", f"--seed={seed}", f"--subjects={','.join(runs)}"]
    rerun += [f"--vllm-overlay={args.vllm_overlay}"] if args.vllm_overlay and OVERLAY in runs else []
    rerun += [f"--vllm-base={args.vllm_base}"] if args.vllm_base and OVERLAY in runs else []
    rerun += [f"--claim={c}" for c in args.claim if OVERLAY in runs]
    print(f"seed gate: seed {seed}, subjects {', '.join(runs)} (rerun: {shlex.join(rerun)})", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HYPOTHESIS_PROFILE": "dev"}
    status = 0
    for name in runs:
        summary = args.out / f"summary-{name}-{seed}.json"
        cmd = [
            sys.executable, "-m", "pytest", "-m", "verification", *subject_args(name, args.vllm_overlay,
            args.vllm_base, args.claim), "-n", "2", "--dist", "loadgroup", f"--hypothesis-seed={seed}",
            f"--summary-json={summary}", *args.pytest_args,
        ]  # fmt: skip
        print(f"seed gate: {name}: {shlex.join(cmd)}", flush=True)
        start = time.monotonic()
        code = subprocess.run(cmd, cwd=ROOT, env=env).returncode
        failed, errors = failed_properties(summary)
        line = {
            "subject": name,
            "seed": seed,
            "exitstatus": code,
            "failed": failed,
            "suite_errors": errors,
            "seconds": round(time.monotonic() - start, 1),
            "date": datetime.date.today().isoformat(),
        }
        with (args.out / "seeds.jsonl").open("a") as fh:
            fh.write(json.dumps(line) + "\n")
        verdict = "passed" if code == 0 else f"exit {code}: {len(failed)} FAILED, {len(errors)} suite errors"
        print(f"seed gate: {name} under seed {seed}: {verdict} ({line['seconds']} s)", flush=True)
        status = status or code
    return status


if __name__ == "__main__":
    sys.exit(main())
