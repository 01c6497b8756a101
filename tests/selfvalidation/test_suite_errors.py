"""The suite's own limits never read as the subject failing.

A suite error (:class:`fixtures.protocol.SuiteError`) is listed under SUITE
ERRORS, counted apart in pytest's tally and exits with status 6; a
collaborator stood in here (:class:`fixtures.protocol.NotApplicableHere`) makes
the property not applicable with its reason; a file written for another vLLM
release is a usage error (status 4) naming the module or signature and the
installed version, or, with ``--vllm-overlay-incompatible skip``, a run that
says it did not verify.  Each is shown on a fresh run of the suite: first with
external subjects (no vLLM needed), then through ``--vllm-overlay`` with
overlays made from the installed release's own files (vLLM needed; ``tox -e
vllm`` runs them).
"""

from __future__ import annotations

import re

import pytest

from fixtures.plugin.fresh_run import repo
from fixtures.protocol import EXIT_SUITE_ERROR

STEP_PROPERTY = "tests/differential/test_single_step.py::test_step_metadata_matches_oracle"
KERNEL_PROPERTY = "tests/differential/test_single_step.py::test_device_kernel_matches_oracle"

SUBJECTS = """
from fixtures.protocol import NotApplicableHere, SuiteError
from fixtures.subjects.reference import ReferenceSubject


class SuiteLimit(ReferenceSubject):
    name = "suite-limit"

    def make_builder(self, config):
        raise SuiteError("the suite's stand-in for a thing has no 'knob'; adapt here")


class StoodIn(ReferenceSubject):
    name = "stood-in"

    def sparse_seqlen(self, batch, topk, out):
        raise NotApplicableHere("calls a library stood in on this machine")


class Broken(SuiteLimit):
    name = "broken-and-limited"

    def sparse_seqlen(self, batch, topk, out):
        out.fill_(7)
"""


@pytest.fixture
def subjects(run_suite_in):
    run_suite_in.pytester.makepyfile(error_subjects=SUBJECTS)
    return run_suite_in


def test_a_suite_error_is_listed_apart_and_exits_with_its_own_status(subjects):
    run = subjects("--subject=error_subjects:SuiteLimit", repo(STEP_PROPERTY), profile="dev")
    assert run.ret == EXIT_SUITE_ERROR, run.out[-3000:]
    summary = run.out[run.out.index("verification summary") :]
    assert re.search(r"SUITE ERRORS \(the suite's own limits, not the subject's failures.*\) \(1\)", summary)
    assert "suite error: the suite's stand-in for a thing has no 'knob'; adapt here" in summary
    assert "FAILED" not in summary.split("short test summary")[0], summary
    assert re.search(r"\b1 suite error\b", run.out) and not re.search(r"\b\d+ failed\b", run.out), run.out[-800:]
    assert "Falsifying example" not in run.out, "hypothesis must not shrink an input for the suite's own error"


def test_strict_gating_still_fails_a_run_with_a_suite_error(subjects):
    run = subjects("--subject=error_subjects:SuiteLimit", "--strict-gating", repo(STEP_PROPERTY), profile="dev")
    assert run.ret == EXIT_SUITE_ERROR, run.out[-3000:]


def test_a_failure_beside_a_suite_error_exits_as_a_failure(subjects):
    run = subjects("--subject=error_subjects:Broken", repo(STEP_PROPERTY), repo(KERNEL_PROPERTY), profile="dev")
    assert run.ret == 1, run.out[-3000:]
    summary = run.out[run.out.index("verification summary") :]
    assert "SUITE ERRORS" in summary and "FAILED (1)" in summary
    assert re.search(r"FAILED \(1\)\n  \S+test_device_kernel_matches_oracle", summary), summary


def test_a_stood_in_collaborator_makes_the_property_not_applicable(subjects):
    run = subjects("--subject=error_subjects:StoodIn", repo(KERNEL_PROPERTY), profile="dev")
    assert run.ret == 0, run.out[-3000:]
    summary = run.out[run.out.index("verification summary") :]
    assert "NOT APPLICABLE (1)" in summary
    assert "not applicable: calls a library stood in on this machine" in summary
