"""The kill matrix: every broken subject in the catalogue is caught, the unbroken one is not.

``test_catalogue_killed_and_reference_clean`` runs the matrix (every mutant
in ``fixtures.subjects.mutants.MUTANTS`` against the verification properties of
its group, ``--scoped``: a NoPE mutant meets ``tests/nope``, a builder mutant the
builder properties, each until the first that fails, ``--first-kill``; the
reference meets every property) under the ``mutants`` hypothesis profile:
derandomised, 100 generated examples per property and no pinned ``@example``,
so the fuzzers themselves must find each bug; a change that weakens a strategy
or a property fails here.  It is the nightly tier's (marker ``nightly``: ``tox -e
mutants`` runs it, then every killing cell of the matrix; ``tox -e self``
leaves it out, docs/running.md, "Tiers"); its tables go to
``reports/kill_matrix_selftest/``.  The other tests, per commit, check that the
runner reports a survivor and a failing control, a subject that crashes the
process, and how it sizes counterexamples.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from fixtures.subjects.mutants import MUTANTS
from tools.killmatrix import KILLED, PASSED, ROOT, SURVIVED
from tools.killmatrix_plugin import _falsifying_blocks, counterexample_size, machine_non_steps

# Target for the fuzzers: the median mutant is caught within this many generated examples.
# (The shrunk counterexample sizes are measured and reported in the tables, not asserted.)
MEDIAN_EXAMPLES_TO_FIRST_KILL = 50


def run_matrix(out, *args, env=None):
    cmd = [sys.executable, "-m", "tools.killmatrix", f"--out={out}", *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    matrix_file = out / "kill_matrix.json"
    matrix = json.loads(matrix_file.read_text()) if matrix_file.exists() else None
    return proc, matrix


@pytest.mark.nightly
def test_catalogue_killed_and_reference_clean(tmp_path):
    out = tmp_path / "kill_matrix"  # tox -e mutants writes the published tables into reports/
    proc, matrix = run_matrix(out, "--profile=mutants", "--scoped", "--first-kill")
    text = proc.stdout + proc.stderr
    assert matrix is not None, text[-3000:]
    published = ROOT / "reports" / "kill_matrix_selftest"  # the run's artifact (tools/measurements.py reads it)
    published.mkdir(parents=True, exist_ok=True)
    for name in ("kill_matrix.json", "kill_matrix.md"):
        shutil.copyfile(out / name, published / name)
    status = {e["subject"]: e["status"] for e in matrix["subjects"]}
    assert status == {"reference": PASSED, **dict.fromkeys(MUTANTS, KILLED)}, text[-4000:]
    assert proc.returncode == 0 and matrix["summary"]["ok"], text[-4000:]

    summary = matrix["summary"]
    assert summary["killed_by_pinned_example"] == 0, "the mutants profile must not run pinned @examples"
    assert summary["reproducer_on_every_failure"], "a failure printed no reproducer section"
    for e in matrix["subjects"]:
        for prop, v in e["properties"].items():
            # Example counts exist for hypothesis properties; a parametrised
            # plain test (e.g. one legality clause per case) has none.
            if v["verdict"] == KILLED and v["hypothesis"]:
                assert v["examples"] is not None, f"{e['subject']} x {prop}: examples to the first failure not counted"
    assert summary["median_examples_to_first_kill"] <= MEDIAN_EXAMPLES_TO_FIRST_KILL, text[-4000:]


SURVIVOR = '''
from fixtures.subjects.reference import ReferenceSubject


class Unbroken(ReferenceSubject):
    """The reference under another name: no property can kill it."""

    name = "unbroken"
'''


@pytest.mark.nightly  # a tool CI does not run (docs/running.md, 'Tiers')
def test_runner_reports_survivor_and_failing_control(tmp_path):
    """A subject identical to the reference survives, a broken control fails; both make the run fail."""
    (tmp_path / "km_unbroken.py").write_text(textwrap.dedent(SURVIVOR))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc, matrix = run_matrix(
        tmp_path / "out",
        "--profile=mutants",
        "--reference=fixtures.subjects.mutants:no_topk_clamp",
        "--mutants=no_topk_clamp",
        "--extra-subject=km_unbroken:Unbroken",
        "tests/differential/test_single_step.py::test_step_metadata_matches_oracle",
        env=env,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text[-3000:]
    assert matrix is not None, text[-3000:]
    status = {e["subject"]: e["status"] for e in matrix["subjects"]}
    assert status == {"reference": "FAILED", "no_topk_clamp": KILLED, "km_unbroken.Unbroken": SURVIVED}, status
    assert "km_unbroken.Unbroken: survived every property" in text
    assert "reference: the unbroken subject fails" in text
    assert not matrix["summary"]["ok"]
    rows = [line for line in (tmp_path / "out" / "kill_matrix.md").read_text().splitlines() if line.startswith("| `")]
    assert len(rows) == 3 and "survived" in rows[2] and "FAILED" in rows[0], rows


@pytest.mark.nightly  # a tool CI does not run (docs/running.md, 'Tiers')
def test_runner_reports_a_subject_that_cannot_load(tmp_path):
    """A mutant that fails to load is an error, never counted as killed."""
    proc, matrix = run_matrix(
        tmp_path,
        "--profile=mutants",
        "--no-reference",
        "--mutants=",
        "--extra-subject=no_such_module_here:Subject",
        "tests/differential/test_single_step.py::test_step_metadata_matches_oracle",
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert [e["status"] for e in matrix["subjects"]] == ["ERROR"]
    assert matrix["summary"]["killed"] == 0
    assert "no_such_module_here" in matrix["subjects"][0]["error"], matrix["subjects"][0]  # the log's own reason


@pytest.mark.nightly  # a tool CI does not run (docs/running.md, 'Tiers')
def test_the_properties_collect_without_xdist():
    """The kill matrix and the mutation run start pytest with ``-p no:xdist`` under ``--strict-markers``: every
    marker a property carries (xdist's ``xdist_group`` included) is one the suite declares, so they collect."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "verification", "--collect-only", "-q", "-p", "no:xdist"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


CRASHING = """
import ctypes

from fixtures.subjects.reference import ReferenceBuilder, ReferenceSubject


def deep(n):
    return ctypes.string_at(0) if n == 0 else deep(n - 1)


class CrashingBuilder(ReferenceBuilder):
    def build(self, batch):
        if batch.max_query_len > 1:
            deep(150)  # a segfault below the innermost 100 frames the fatal-signal dump keeps
        return super().build(batch)


class Crashing(ReferenceSubject):
    \"\"\"Dies by SIGSEGV on a step with a prefill, as an out-of-bounds access can under the interpreter.\"\"\"

    name = "crashing"
    builder_cls = CrashingBuilder
"""


@pytest.mark.nightly  # a tool CI does not run (docs/running.md, 'Tiers')
def test_a_subject_that_crashes_the_process_is_killed_by_the_test_it_died_in(tmp_path):
    """Regression: family edits that leave request ids stale (token_request_pad_tokens_stale,
    token_request_first_tile_only) make vLLM's top-k remap kernel read block-table rows out of bounds,
    and under the Triton interpreter the test process sometimes died by SIGSEGV; the matrix read that as
    an ERROR ("pytest exited -11 without per-test results").  A death inside a test kills the subject by that
    test; the tests before it keep their verdicts, the ones after it did not run."""
    (tmp_path / "km_crashing.py").write_text(CRASHING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    first = "tests/differential/test_single_step.py::test_host_path_equals_device_path_and_oracle"  # decodes
    crashes = "tests/differential/test_single_step.py::test_step_metadata_matches_oracle"
    proc, matrix = run_matrix(
        tmp_path / "out",
        "--profile=dev",
        "--no-reference",
        "--mutants=",
        "--extra-subject=km_crashing:Crashing",
        first,
        crashes,
        env=env,
    )
    text = proc.stdout + proc.stderr
    assert matrix is not None, text[-3000:]
    (entry,) = matrix["subjects"]
    assert entry["status"] == KILLED and not entry["error"], text[-3000:]
    props = entry["properties"]
    assert props[crashes]["verdict"] == KILLED and props[crashes]["crash"] == "SIGSEGV", props
    assert props[first]["verdict"] == SURVIVED, props
    assert proc.returncode == 0 and matrix["summary"]["ok"], text[-2000:]
    assert "killed (crash: SIGSEGV)" in (tmp_path / "out" / "kill_matrix.md").read_text()


def test_counterexample_size_of_printed_batches_and_programs():
    """Hand-written hypothesis output in the three forms the suite prints."""
    dataclass_form = """Falsifying example: test_x(
    case=Case(kind='mixed',
     batch=Batch(query_start_loc=array([  0,   1,
             71], dtype=int32),
      _spec={'query_lens': [1, 70], 'seq_lens': [10, 100]}),
    ),
)"""
    assert counterexample_size(dataclass_form) == {"requests": 2, "steps": None}
    assert counterexample_size("f(batch=make_batch(query_lens=[1, 1, 1], seq_lens=[0, 9, 0]))")["requests"] == 3
    assert counterexample_size("f(batch=make_batch([1, 1], [4, 4]))")["requests"] == 2
    program = """Falsifying example:
state = _PrintedMachine()
state.configure(topk=3)
state.step(batch=make_batch(query_lens=[1], seq_lens=[5]))
state.buffers_match()
v1 = state.grow(batch=make_batch(query_lens=[1, 1], seq_lens=[5, 6]))
state.buffers_match()
state.step(
    batch=make_batch(query_lens=[], seq_lens=[]),
)
state.buffers_match()
state.teardown()"""
    assert machine_non_steps(program) == {"configure", "buffers_match"}
    assert counterexample_size(program, machine_non_steps(program)) == {"requests": 2, "steps": 3}
    assert counterexample_size("Falsifying example: test_y(n=3)") == {"requests": None, "steps": None}


class _PrintedMachine(RuleBasedStateMachine):
    """Only its shape matters: which printed ``state.name()`` lines are steps."""

    @initialize()
    def configure(self):
        pass

    @rule()
    def step(self):
        pass

    @rule()
    def grow(self):
        pass

    @invariant()
    def buffers_match(self):
        pass


def test_falsifying_blocks_split_per_example():
    notes = [
        "Falsifying example: test_x(",
        "    n=1,",
        ")",
        "You can reproduce this example by temporarily adding @reproduce_failure(...)",
        "Falsifying explicit example: test_x(n=2)",
    ]
    assert _falsifying_blocks(notes) == [
        "Falsifying example: test_x(\n    n=1,\n)",
        "Falsifying explicit example: test_x(n=2)",
    ]
