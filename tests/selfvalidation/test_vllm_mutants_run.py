"""How one mutant's run becomes a verdict (:mod:`tools.vllm_mutants.run`), without the synthetic
release/change pair: the arguments of a run are the verification against the overlay, the run's
summary must show the mutated file, and :func:`~tools.vllm_mutants.run.classify` reads the
kill-matrix record (written by the real plugin in one pytest process) and the log of a process
killed by a signal into killed, survived, not loadable, timeout or error.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import textwrap

import pytest

from tools.fresh_run import ROOT
from tools.killmatrix_plugin import running_file
from tools.vllm_mutants.run import classify, hang_verdict, ran_from_tree, verification_args


def test_a_run_whose_summary_does_not_show_the_mutated_file_is_an_error(tmp_path):
    log = tmp_path / "log"
    tree, relpath, source = tmp_path / "tree", "vllm/fake/ops.py", "x = 1\n"
    digest = hashlib.sha256(source.encode()).hexdigest()
    log.write_text(f"vLLM overlay {tree}: vllm.fake.ops <- {(tree / relpath).resolve()} (sha256 {digest}) [ran]\n")
    assert ran_from_tree(log, tree, relpath, source)
    assert not ran_from_tree(log, tree, relpath, "x = 2\n")  # another file ran
    log.write_text(log.read_text().replace("[ran]", "[not imported]"))
    assert not ran_from_tree(log, tree, relpath, source)


def test_the_run_arguments_are_the_verification_against_the_overlay(tmp_path):
    args = verification_args(["tests"], tmp_path / "tree", tmp_path / "r.json", ["--subject=vllm"])
    for arg in ("--subject=vllm", f"--vllm-overlay={tmp_path / 'tree'}", f"--kill-matrix-json={tmp_path / 'r.json'}"):
        assert arg in args
    assert args[args.index("-m") + 1] == "verification" and "-x" in args and "tools.killmatrix_plugin" in args
    assert "tools.vllm_mutants.reach_plugin" not in args
    traced = verification_args(["tests"], tmp_path / "t", tmp_path / "r", reach=(["/x/ops.py"], tmp_path / "l.json"))
    assert "tools.vllm_mutants.reach_plugin" in traced and "--reach-file=/x/ops.py" in traced


@pytest.mark.parametrize(
    "returncode, outcome, status",
    [(0, "passed", "survived"), (1, "failed", "killed"), (1, "passed", "error"), (0, "skipped", "error")]
    + [(rc, None, "not_loadable") for rc in (2, 3, 4)]
    + [(5, None, "error"), (None, None, "timeout"), (-9, None, "error")],
)
def test_classify(tmp_path, returncode, outcome, status):
    record = tmp_path / "r.json"
    if outcome:
        rec = {"outcomes": {"call": outcome}, "skip_reason": "n/a" if outcome == "skipped" else None, "calls": 3}
        rec.update(first_failure_call=3 if outcome == "failed" else None, seconds_to_first_failure=0.5)
        rec.update(falsifying=[], reproducer=True, hypothesis=True, seconds=1.0)
        record.write_text(json.dumps({"exitstatus": returncode, "tests": {"tests/a.py::test_p": rec}}))
    verdict = classify(returncode, record, tmp_path / "log", timeout=9)
    assert verdict["status"] == status, verdict
    if status == "killed":
        assert verdict["killed_by"] == "tests/a.py::test_p" and verdict["examples"] == 3


def test_a_mutant_every_property_of_which_needs_a_module_the_release_lacks_is_not_loadable_here(tmp_path):
    """Every property it reached not applicable because its path uses a vLLM module the installed release lacks
    (``compat.AbsentModule``): it cannot run here, as a mutant that does not load; any other reason for all of
    them not applying stays an error."""
    from fixtures.subjects.vllm.loading.compat import ABSENT_MODULE_REASON

    record = tmp_path / "r.json"
    for reason, status in ((f"this path uses vllm.x.y, a vLLM module ... lacks {ABSENT_MODULE_REASON}", "not_loadable"),
                           ("needs a GPU", "error")):  # fmt: skip
        rec = {"outcomes": {"call": "skipped"}, "skip_reason": reason, "calls": 0, "first_failure_call": None}
        rec.update(seconds_to_first_failure=None, falsifying=[], reproducer=True, hypothesis=True, seconds=1.0)
        record.write_text(
            json.dumps({"exitstatus": 0, "tests": {"tests/a.py::test_p": rec, "tests/b.py::test_q": rec}})
        )
        verdict = classify(0, record, tmp_path / "log", timeout=9)
        assert verdict["status"] == status, verdict


def test_a_mutant_run_past_its_limit_is_killed_by_a_hang_named_as_such():
    """Three times its tests' unmutated time plus 60 s without a verdict: a gate with a time limit fails it."""
    verdict = hang_verdict({"status": "timeout", "detail": "no verdict within 277 s (see log)", "seconds": 277.1}, 277)
    assert verdict["status"] == "killed" and verdict["hang"] and verdict["killed_by"].startswith("a hang")
    assert verdict["detail"].startswith("no verdict") and verdict["seconds"] == 277.1


def test_a_process_killed_by_a_signal_inside_a_test_is_a_kill_else_an_error(tmp_path):
    log = tmp_path / "log"
    log.write_text(
        "....Fatal Python error: Aborted\n\nCurrent thread 0x1 (most recent call first):\n"
        '  File "/x/triton/runtime/interpreter.py", line 604 in binary_op\n'
        '  File "/repo/tests/differential/test_single_step.py", line 105 in test_host_path\n'
        '  File "/repo/fixtures/killmatrix_plugin.py", line 50 in test_host_path\n'
        '  File "/repo/tests/differential/test_single_step.py", line 91 in test_host_path\n'
    )
    verdict = classify(-6, tmp_path / "missing.json", log, timeout=9)
    assert verdict["status"] == "killed" and verdict["crash"] == "SIGABRT"
    assert verdict["killed_by"] == "tests/differential/test_single_step.py::test_host_path"
    log.write_text("killed from outside, no dump\n")
    assert classify(-9, tmp_path / "missing.json", log, timeout=9)["status"] == "error"


def test_a_process_killed_by_a_signal_after_a_property_failed_is_a_kill_by_that_property(tmp_path):
    """A run whose property failed on the mutant, then died by a signal outside any test (at exit: the Triton
    interpreter's out-of-bounds reads leave garbage behind, as CI saw with ``build:L675:shift_index:2``): the
    records written after each test decide, the crash noted; with no property failed it stays an error."""
    record = tmp_path / "r.json"
    for outcome, status in (("failed", "killed"), ("passed", "error")):
        rec = {"outcomes": {"call": outcome}, "skip_reason": None, "calls": 2, "seconds_to_first_failure": 0.5}
        rec.update(first_failure_call=2 if outcome == "failed" else None, falsifying=[], reproducer=True)
        rec.update(hypothesis=True, seconds=1.0)
        record.write_text(json.dumps({"exitstatus": None, "tests": {"tests/a.py::test_p": rec}}))
        verdict = classify(-11, record, tmp_path / "log", timeout=9)
        assert verdict["status"] == status, verdict
    killed = classify(-11, record.with_name("none.json"), tmp_path / "log", timeout=9)
    assert killed["status"] == "error", "no records and no dump: no verdict"
    record.write_text(
        json.dumps(
            {
                "exitstatus": None,
                "tests": {"tests/a.py::test_p": {**rec, "outcomes": {"call": "failed"}, "first_failure_call": 2}},
            }
        )
    )
    verdict = classify(-11, record, tmp_path / "log", timeout=9)
    assert verdict["killed_by"] == "tests/a.py::test_p" and verdict["crash"] == "SIGSEGV, after the kill"


def test_the_kill_matrix_plugin_records_what_classify_reads(tmp_path):
    """One real pytest process with the plugin: a hypothesis property that fails on its 1st example."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_p.py").write_text(
        textwrap.dedent(
            """
            from hypothesis import given, settings, strategies as st

            @settings(database=None, derandomize=True)
            @given(st.integers())
            def test_p(x):
                assert False
            """
        )
    )
    record = tmp_path / "r.json"
    argv = [sys.executable, "-m", "pytest", str(tmp_path / "test_p.py"), "-q", "-p", "no:cacheprovider", "-x"]
    argv += ["-c", str(tmp_path / "pytest.ini"), "-p", "tools.killmatrix_plugin", f"--kill-matrix-json={record}"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    verdict = classify(proc.returncode, record, tmp_path / "log", timeout=9)
    assert verdict["status"] == "killed", proc.stdout[-2000:]
    assert verdict["killed_by"].endswith("test_p.py::test_p") and verdict["examples"] == 1


def test_a_crash_deeper_than_the_fatal_signal_dump_is_still_a_kill_by_its_test(tmp_path):
    """Regression: a mutant whose out-of-bounds read segfaulted under a deep hypothesis stack read as
    an error ("exited -11 without per-test records"): faulthandler keeps the innermost 100 frames,
    which did not reach the test.  The kill-matrix plugin names the running test beside its records."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_c.py").write_text(
        textwrap.dedent(
            """
            import ctypes
            from hypothesis import given, settings, strategies as st

            def deep(n):
                return ctypes.string_at(0) if n == 0 else deep(n - 1)

            def test_passes():
                pass

            @settings(database=None, derandomize=True)
            @given(st.integers())
            def test_crashes(x):
                deep(150)
            """
        )
    )
    record, log = tmp_path / "r.json", tmp_path / "log"
    argv = [sys.executable, "-m", "pytest", str(tmp_path / "test_c.py"), "-q", "-p", "no:cacheprovider", "-x"]
    argv += ["-c", str(tmp_path / "pytest.ini"), "-p", "tools.killmatrix_plugin", f"--kill-matrix-json={record}"]
    with open(log, "w") as out:
        proc = subprocess.run(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=120)
    text = log.read_text()
    assert proc.returncode == -signal.SIGSEGV and "Fatal Python error" in text, text[-2000:]
    assert "test_crashes" not in text.split("Fatal Python error", 1)[1], "the dump reaches the test: not deep enough"
    verdict = classify(proc.returncode, record, log, timeout=9)
    assert verdict["status"] == "killed" and verdict["crash"] == "SIGSEGV", verdict
    assert verdict["killed_by"].endswith("test_c.py::test_crashes")
    running_file(record).unlink()  # no test running: a death by a signal outside a test is an error
    assert classify(proc.returncode, record, log, timeout=9)["status"] == "error"
