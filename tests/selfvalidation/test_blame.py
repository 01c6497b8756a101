"""The suite's own errors never blame the subject: each kind pinned on a fresh run (``fixtures.plugin.blame``).

Probe properties in pytester's temporary folder, run with the suite's plugin
against the reference subject (which is right): a strategy that raises
(``InvalidArgument`` from an empty range it built, its own ``ValueError``, in
a ``@given`` argument and in a draw inside the body), a filter that rejects
everything (a failed health check), an assumption never met
(``Unsatisfiable``), a fixture that cannot be built, and a flaky example whose
error was a strategy's.  Each is listed under SUITE ERRORS, naming the
strategy or the cause, with a reproducer; the run exits 6, with ``-x`` and
under xdist too.  Beside them, the subject's failures stay FAILED (exit 1):
an assertion, and an assertion that fails flakily (a nondeterministic
subject).  A subject that raises ``TargetsAnotherRelease`` at run time ends
the run as one refusal (exit 4) with ``-x``, ``--maxfail`` or neither, under
xdist or not, whatever failed before it.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import find, settings

from fixtures.harness.feeds import feed_batches
from fixtures.outcomes import EXIT_SUITE_ERROR
from fixtures.plugin.reporting import NOT_JUDGED, REFUSED, SUITE_ERRORS
from tools.fresh_run import repo

PROBES = """
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st


@st.composite
def empty_range(draw):
    low = draw(st.integers(5, 9))
    return draw(st.integers(low, 4))


@st.composite
def raising_strategy(draw):
    draw(st.integers(0, 3))
    raise ValueError("the probe strategy raises")


@given(c=empty_range())
def test_suite_empty_range(c, subject):
    pass


@given(c=raising_strategy())
def test_suite_raising_strategy(c, subject):
    pass


@given(data=st.data())
def test_suite_raising_draw_in_the_body(data, subject):
    data.draw(raising_strategy())


@given(x=st.integers().filter(lambda x: False))
def test_suite_filter_too_much(x, subject):
    pass


@settings(suppress_health_check=list(HealthCheck))
@given(x=st.integers())
def test_suite_unsatisfiable(x, subject):
    assume(False)


@pytest.fixture
def unbuildable():
    raise RuntimeError("the probe fixture cannot be built")


def test_suite_fixture(unbuildable, subject):
    pass


SUITE_CALLS = []


@given(data=st.data())
def test_suite_inconsistent_generation(data, subject):
    SUITE_CALLS.append(1)
    if len(SUITE_CALLS) == 1:
        data.draw(raising_strategy())


RAISED_ONCE = []


@st.composite
def raising_once(draw):
    value = draw(st.integers(0, 3))
    RAISED_ONCE.append(value)
    if len(RAISED_ONCE) == 1:
        raise ValueError("the probe strategy raises once")
    return value


@given(c=raising_once())
def test_suite_flaky_strategy_error(c, subject):
    pass


def test_subject_assertion(subject):
    assert False, "the probe subject is wrong"


SUBJECT_CALLS = []


@given(x=st.integers())
def test_subject_flaky_assertion(x, subject):
    SUBJECT_CALLS.append(1)
    assert len(SUBJECT_CALLS) > 1, "wrong on the first call only"
"""

REFUSING = '''
from fixtures.outcomes import TargetsAnotherRelease
from fixtures.subjects.reference import ReferenceSubject


class Refusing(ReferenceSubject):
    """Wrong in its seqlen kernel, and its builder reads what the installed release lacks."""

    name = "refusing"

    def sparse_seqlen(self, batch, topk, out):
        out.fill_(7)

    def make_builder(self, config):
        raise TargetsAnotherRelease("it reads a knob the installed release lacks")
'''
# What each suite-error probe must be listed with.
SUITE_CAUSES = {
    "test_suite_empty_range": r"while generating 'c' from empty_range\(\): InvalidArgument",
    "test_suite_raising_strategy": r"while generating 'c' from raising_strategy\(\): ValueError: the probe strategy",
    "test_suite_raising_draw_in_the_body": r"from raising_strategy\(\): ValueError: the probe strategy raises",
    "test_suite_filter_too_much": r"hypothesis could not drive this property: (FailedHealthCheck|Unsatisfiable)",
    "test_suite_unsatisfiable": r"hypothesis could not drive this property: Unsatisfiable",
    "test_suite_fixture": r"a fixture could not be built \(setup\): RuntimeError: the probe fixture cannot be built",
    "test_suite_inconsistent_generation": r"hypothesis could not drive this property: FlakyStrategyDefinition",
    "test_suite_flaky_strategy_error": r"flaky: .*raising_once\(\): ValueError: the probe strategy raises once",
}
# A property that ends the run in a refusal (one build step, no examples to generate).
ONE_STEP_PROPERTY = "tests/gating/test_gating_contract.py::test_overstated_upper_bound_would_diverge_from_device_path"
KERNEL_PROPERTY = "tests/differential/test_single_step.py::test_device_kernel_matches_oracle"


@pytest.fixture
def probes(run_suite_in):
    run_suite_in.pytester.makepyfile(test_blame_probes=PROBES, refusing_subjects=REFUSING)
    return run_suite_in


def summary_of(run) -> str:
    return run.out[run.out.index("verification summary") :]


def test_each_of_the_suites_own_errors_is_a_suite_error_naming_its_cause(probes):
    run = probes("test_blame_probes.py", "-k", "suite", profile="dev")
    assert run.ret == EXIT_SUITE_ERROR, run.out[-4000:]
    summary = summary_of(run)
    assert f"{SUITE_ERRORS} ({len(SUITE_CAUSES)})" in summary, summary
    assert "FAILED" not in summary.split("short test summary")[0], summary
    for test, cause in SUITE_CAUSES.items():
        row = next((line for line in summary.splitlines() if f"::{test}  [" in line), "")
        assert re.search(cause, row), f"{test}: {row or summary}"
    assert summary.count("      rerun: python -m pytest") == len(SUITE_CAUSES), "every suite error has a reproducer"


def test_the_subjects_failures_stay_failures_beside_them(probes):
    """An assertion, and one that fails flakily (hypothesis' FlakyFailure of an AssertionError): FAILED, exit 1."""
    run = probes("test_blame_probes.py", "-k", "subject", profile="dev")
    assert run.ret == 1, run.out[-4000:]
    assert "FAILED (2)" in summary_of(run), summary_of(run)


@pytest.mark.parametrize("extra", [["-x"], ["-x", "-n", "2"]], ids=["x", "x-xdist"])
def test_a_run_stopped_on_a_suite_error_still_exits_as_one(probes, extra):
    """``-x`` stops at the first failed report; xdist ends such a run as interrupted (exit 2): still 6."""
    run = probes("test_blame_probes.py", "-k", "empty_range or raising_strategy", *extra, profile="dev")
    assert run.ret == EXIT_SUITE_ERROR, run.out[-4000:]


@pytest.mark.parametrize(
    "extra", [[], ["-x"], ["--maxfail=3", "-n", "2"]], ids=["plain", "x", "maxfail-xdist"]
)  # fmt: skip
def test_code_for_another_release_is_refused_as_a_whole(probes, extra):
    """One verdict, exit 4: the run stops at the first usage error, and the summary names the refusal once.
    Without ``-x`` the kernel property runs (and fails) first: it is not judged."""
    order = [KERNEL_PROPERTY, ONE_STEP_PROPERTY] if not extra else [ONE_STEP_PROPERTY, KERNEL_PROPERTY]
    run = probes("--subject=refusing_subjects:Refusing", *map(repo, order), *extra, profile="dev")
    assert run.ret == 4, run.out[-4000:]
    summary = summary_of(run)
    assert f"{REFUSED}: it reads a knob the installed release lacks" in summary, summary
    assert "\nFAILED (" not in summary, summary
    if not extra:
        assert f"{NOT_JUDGED} (1)" in summary, summary


def test_a_long_prefill_in_a_feed_step_draws_its_context():
    """Pinned (a random-seed run found it): a mixed feed step whose prefill is longer than ``topk + 70`` tokens
    drew its context from an empty range (``InvalidArgument: Cannot have max_value=198 < min_value=199``)."""
    batch = find(
        feed_batches("mixed", 640, 128),
        lambda b: max(b.query_lens.tolist()) > 128 + 70,
        settings=settings(database=None, max_examples=5000),
    )
    assert all(s >= q for q, s in zip(batch.query_lens.tolist(), batch.seq_lens.tolist(), strict=True))


def test_the_kill_matrix_and_the_mutation_run_count_a_suite_error_as_an_error_never_a_kill(probes):
    """The kill-matrix plugin's records of a run with a raising strategy, read as both tools read them: the
    property ended in the suite's error (neither killed nor survived), the mutation run's verdict is an error."""
    from tools.killmatrix import ERRORED, KILLED, summarize, verdicts
    from tools.vllm_mutants.run import classify

    record = probes.pytester.path / "records.json"
    run = probes(
        "test_blame_probes.py", "-k", "raising or subject_assertion", "-p", "tools.killmatrix_plugin",
        f"--kill-matrix-json={record}", profile="dev",
    )  # fmt: skip
    assert run.ret == 1, run.out[-3000:]
    props = verdicts(json.loads(record.read_text())["tests"])
    by_test = {name.rsplit("::", 1)[1]: v["verdict"] for name, v in props.items()}
    assert by_test == {
        "test_suite_raising_strategy": ERRORED,
        "test_suite_raising_draw_in_the_body": ERRORED,
        "test_subject_assertion": KILLED,
    }, by_test
    entry = {"subject": "probe", "spec": "", "doc": "", "mutant": True, "index": 0, "seconds": 0, "cpu_seconds": 0}
    matrix = summarize([{**entry, "error": None, "properties": props}], "dev", 0.0, 0.0)
    assert not matrix["summary"]["ok"] and any("suite's own error" in p for p in matrix["summary"]["problems"])
    only_errors = {k: v for k, v in props.items() if v["verdict"] == ERRORED}
    matrix = summarize([{**entry, "error": None, "properties": only_errors}], "dev", 0.0, 0.0)
    assert matrix["subjects"][0]["status"] != KILLED and matrix["summary"]["killed"] == 0
    # The mutation run, on the same records: exit 6 (only suite errors) and exit 1 with them are no kill.
    suite_only = probes.pytester.path / "suite-only.json"
    suite_only.write_text(json.dumps({"exitstatus": 6, "tests": {
        k: v for k, v in json.loads(record.read_text())["tests"].items() if "suite" in k
    }}))  # fmt: skip
    log = probes.pytester.path / "run.log"
    log.write_text(run.out)
    assert classify(EXIT_SUITE_ERROR, suite_only, log, 60)["status"] == "error"
    assert classify(1, suite_only, log, 60)["status"] == "error"
    assert classify(1, record, log, 60)["status"] == "killed"


def test_a_forward_handing_a_non_tensor_downstream_fails_as_the_forwards():
    """Regression (the mutation run, force_condition on ``isinstance(q, tuple)`` in the post-change
    ``forward_mqa``): vLLM handed its downstream the ``(ql_nope, q_pe)`` tuple, and the observer's shape check
    raised AttributeError in the suite's code, a suite error; it is the forward's failure."""
    import types

    import torch

    from fixtures.models.attention import DownstreamAttention

    attention = DownstreamAttention(types.SimpleNamespace(num_heads=2, head_size=4))
    q = torch.zeros(3, 2, 4)
    with pytest.raises(AssertionError, match="handed downstream a tuple, not a query tensor"):
        attention.record((q, q[..., :0]), q, None)
