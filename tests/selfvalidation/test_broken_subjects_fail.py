"""Each deliberately broken subject must make the differential properties fail.

The properties run in a fresh pytest process per mutant, through the same
``--subject module:attribute`` door an external subject uses, under the
derandomised CI profile.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.mutants import MUTANTS

ROOT = Path(__file__).resolve().parents[2]


def run_suite(subject: str, *paths: str, extra=()) -> subprocess.CompletedProcess:
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *paths,
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        f"--subject={subject}",
        *extra,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("name", sorted(n for n, cls in MUTANTS.items() if cls.group == "metadata"))
def test_differential_properties_kill_mutant(name):
    proc = run_suite(f"fixtures.mutants:{name}", "tests/differential")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, f"mutant {name} ({MUTANTS[name].__doc__}) survived:\n{out[-3000:]}"
    assert "Falsifying example" in out or "AssertionError" in out, out[-3000:]
    assert "reproducer" in out and f"--subject=fixtures.mutants:{name}" in out, "failure printed no reproducer"
