"""Each broken NoPE forward (``fixtures/mutants/nope.py``) must make ``tests/nope`` fail.

Same door as an external subject (``--subject module:attribute``), a fresh
pytest process per mutant, the derandomised CI profile.
"""

import pytest

from fixtures.mutants import MUTANTS
from tests.selfvalidation.test_broken_subjects_fail import run_suite

NOPE_MUTANTS = sorted(n for n, cls in MUTANTS.items() if cls.group == "nope")


def test_every_nope_bug_has_a_mutant():
    assert len(NOPE_MUTANTS) >= 5, NOPE_MUTANTS


@pytest.mark.parametrize("name", NOPE_MUTANTS)
def test_nope_properties_kill_mutant(name):
    proc = run_suite(f"fixtures.mutants:{name}", "tests/nope")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, f"mutant {name} ({MUTANTS[name].__doc__}) survived:\n{out[-3000:]}"
    assert "Falsifying" in out, out[-3000:]
    assert "reproducer" in out and f"--subject=fixtures.mutants:{name}" in out, "failure printed no reproducer"
