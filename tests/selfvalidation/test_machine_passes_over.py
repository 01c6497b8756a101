"""A state machine's program that meets a known finding or hazard ends at that step, its earlier steps checked.

Regression: the machines rejected the whole program instead (``fixtures.findings.pass_over``'s ``reject()``),
and on a builder whose hazard a common step meets, hypothesis discarded most programs and failed its
``filter_too_much`` health check, a suite error: vLLM 0.34.0's FlashMLA sparse builder (its empty-batch
hazard under a speculative config) under ``--hypothesis-seed=1757355163``, both machines, in the random-seed
gate (``tools/seed_gate.py``).  Here a reference builder refuses every batch without requests, as a declared
hazard, so a program meets it at almost every shrinking decode step.
"""

import pytest
import torch
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from fixtures.harness.machine import EagerBuilderMachine, StreamModelBuilderMachine, machine_for
from fixtures.protocol import KnownFinding, KnownFindings
from fixtures.subjects.reference import ReferenceSubject

HAZARD = KnownFinding(
    key="refuses-an-empty-batch",
    description="this builder raises IndexError on a batch without requests",
    source_file="test_machine_passes_over.py",
    error=IndexError,
    message=r"index 0 is out of bounds for dimension 0 with size 0",
    applies=lambda *, batch, **_: batch.num_reqs == 0,
    regression_test="tests/selfvalidation/test_machine_passes_over.py",
    deployment="none: a stand-in of vLLM's FlashMLA sparse builder's empty-batch hazard",
    reproducer="pytest tests/selfvalidation/test_machine_passes_over.py",
    fix="none: the suite's own stand-in",
    outside="a step without requests, which vLLM never builds",
)


class EmptyBatchRefusingSubject(ReferenceSubject):
    name = "reference-refusing-empty-batches"

    def make_builder(self, config):
        builder = super().make_builder(config)
        build = builder.build

        def refusing(batch):
            if batch.num_reqs == 0:
                raise IndexError("index 0 is out of bounds for dimension 0 with size 0")
            return build(batch)

        builder.build = refusing
        return builder

    def known_findings(self) -> KnownFindings:
        return KnownFindings(builder=(HAZARD,))


@pytest.mark.parametrize("kind", [EagerBuilderMachine, StreamModelBuilderMachine], ids=lambda k: k.__name__)
@pytest.mark.filterwarnings("ignore::Warning")
def test_a_program_that_meets_a_hazard_ends_there_and_is_not_rejected(kind):
    ended = []

    class Recording(kind):
        def teardown(self):
            ended.append((self.passed_over, self.steps))
            super().teardown()

    machine = machine_for(Recording, EmptyBatchRefusingSubject(), torch.device("cpu"))
    run_state_machine_as_test(
        machine, settings=settings(max_examples=40, stateful_step_count=20, derandomize=True, database=None)
    )
    passed_over = [(at, steps) for at, steps in ended if at is not None]
    assert passed_over, f"no program met the hazard in {len(ended)} programs: the test draws no empty step"
    assert all(at == steps for at, steps in passed_over), f"a step was built after the hazard's: {passed_over}"
