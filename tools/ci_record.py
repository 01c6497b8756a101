"""Record what a CI run was (``.ci/run`` calls it at the end): the commit, the date, the wall time, the
lanes' exit statuses, and what ``import torch`` took three times in a fresh interpreter of the ``cpu`` env
(the machine's speed, which the run's time is read against).  ``tools/measurements.py`` (``ci-run``) writes
it at the top of docs/measurements.md.  Standard library only: it runs with the system's Python."""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORT_TORCH = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"


def import_torch_seconds(python: str, times: int = 3) -> list[float]:
    out = []
    for _ in range(times):
        proc = subprocess.run([python, "-c", IMPORT_TORCH], capture_output=True, text=True, timeout=300)
        if proc.returncode == 0:
            out.append(round(float(proc.stdout.strip().splitlines()[-1]), 2))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--start", type=float, required=True, help="the run's start, seconds since the epoch")
    ap.add_argument("--cpu", type=int, required=True, help="the cpu,self,lint,vllm-fixes lane's exit status")
    ap.add_argument("--vllm", type=int, required=True, help="the vllm,vllm-self lane's exit status")
    ap.add_argument("--python", default=sys.executable, help="the interpreter whose torch import is timed")
    ap.add_argument("--times", type=int, default=3, help="how many fresh imports of torch to time")
    args = ap.parse_args(argv)
    end = time.time()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    record = {
        "commit": commit.stdout.strip() or "unknown",
        "date": datetime.datetime.fromtimestamp(args.start, datetime.timezone.utc).strftime("%Y-%m-%d"),
        "seconds": round(end - args.start),
        "lanes": {"cpu,self,lint,vllm-fixes": args.cpu, "vllm,vllm-self": args.vllm},
        "import_torch_seconds": import_torch_seconds(args.python, args.times),
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"ci run: {record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
