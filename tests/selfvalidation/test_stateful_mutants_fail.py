"""Each stateful broken subject is caught by the builder state machine, and
its failure shrinks to a program of at most three build steps; the ones that
break the gating predicate are caught by the gating contract too.

Each runs in a fresh pytest process under the derandomised CI profile,
through the ``--subject module:attribute`` door an external subject uses.
"""

import re

import pytest

from fixtures.killmatrix import run_pytest as run_suite
from fixtures.mutants import MUTANTS
from fixtures.mutants.stateful import MUTANTS as STATEFUL
from tests.stateful.machine import BuilderMachine

MAX_STEPS = 3
RULES = {name for name in dir(BuilderMachine) if hasattr(getattr(BuilderMachine, name), "hypothesis_stateful_rule")}
GATING = ("host_path_with_speculative", "host_path_with_multi_token_query", "host_path_with_prefill")


def shrunk_program_steps(output: str) -> list[str]:
    """The build steps (rule calls) of the falsifying program printed in ``output``."""
    _, found, program = output.partition("Falsifying example:")
    assert found, "no falsifying program printed:\n" + output[-3000:]
    program = program.split("state.teardown()")[0]
    return [name for name in re.findall(r"state\.(\w+)\(", program) if name in RULES]


def test_rule_names_are_known():
    assert {"decode", "decode_grow", "decode_shrink", "decode_keep", "non_decode", "padded"} <= RULES


@pytest.mark.parametrize("name", sorted(STATEFUL))
def test_state_machine_kills_mutant_in_few_steps(name):
    proc = run_suite(f"fixtures.mutants:{name}", "tests/stateful")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, f"mutant {name} ({MUTANTS[name].__doc__}) survived:\n{out[-3000:]}"
    steps = shrunk_program_steps(out)
    assert 1 <= len(steps) <= MAX_STEPS, f"mutant {name}: shrunk program has {len(steps)} steps {steps}:\n{out[-4000:]}"
    assert "reproducer" in out and f"--subject=fixtures.mutants:{name}" in out, "failure printed no reproducer"


@pytest.mark.parametrize("name", GATING)
def test_gating_contract_kills_mutant(name):
    proc = run_suite(f"fixtures.mutants:{name}", "tests/gating")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, f"mutant {name} ({MUTANTS[name].__doc__}) survived:\n{out[-3000:]}"
