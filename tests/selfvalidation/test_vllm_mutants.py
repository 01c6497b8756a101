"""The mutation-adequacy runner (:mod:`tools.vllm_mutants`) on a synthetic release/change pair.

No vLLM and no Triton: a fake ``vllm`` package is written into ``tmp_path`` as
a release (``release/vllm/fake/ops.py``) and an overlay (``change/vllm/...``)
in which one function changed, one is new, a class gained a method and one
function differs only in docstring and formatting.  The runner's test command
is injected: a small script that loads the mutated tree through the real
overlay finder (:mod:`fixtures.subjects.vllm.overlay`), checks a few behaviours and
writes the kill-matrix plugin's record format.  Nothing is written into the
repository.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import stat
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from tools import vllm_mutants as vm
from tools.killmatrix import ROOT

RELEASE = """\
def unchanged(xs):
    if len(xs) > 0 and xs[0] == 1:
        return min(xs)
    return 0


def changed(xs, k):
    return list(xs[:k]), k


class Buf:
    def __init__(self, n):
        self.data = [0] * n

    def fill_(self, v):
        for i in range(len(self.data)):
            self.data[i] = v
"""

CHANGE = '''\
"""The change: ``changed`` rewritten, ``added`` and ``Buf.copy_`` new."""


def unchanged(xs):
    """Same code as the release's: only this docstring and the formatting differ."""
    if (len(xs) > 0
            and xs[0] == 1):  # a comment
        return min(xs)
    return 0


def changed(xs, k):
    n = min(len(xs), k)
    ready = n > 0 and k >= 1
    out = Buf(n)
    out.fill_(1)
    if ready:
        out.copy_(xs[0:n])
    while n > 3:
        n = n - 1
        if n <= 3:
            break
    return out.data, n, ready


def added(xs):
    lo = 0
    step = 1
    total = max(lo, step)
    for x in xs[1:]:
        total = total + x
    return total if total >= 0 else -total


class Buf:
    def __init__(self, n):
        self.data = [0] * n

    def fill_(self, v):
        for i in range(len(self.data)):
            self.data[i] = v

    def copy_(self, src):
        self.data[: len(src)] = src
'''

# The fake verification: loads vllm.fake.ops through the overlay finder, runs three
# "properties" (stops at the first failure, as -x does) and writes kill-matrix records.
CHECK = """\
import json, sys, time
from pathlib import Path

tree, record = sys.argv[1], Path(sys.argv[2])
trace = Path(sys.argv[3]) if len(sys.argv) > 3 else None
from fixtures.subjects.vllm import overlay as vllm_overlay

vllm_overlay.install(tree)
if trace is not None:
    from tools.line_trace_plugin import LineTracer

    tracer = LineTracer([str(Path(tree) / "vllm/fake/ops.py")], trace)
    tracer.start()
try:
    from vllm.fake import ops
except Exception as exc:
    print(f"cannot import vllm.fake.ops: {exc!r}")
    sys.exit(4)


def data_of(buf):
    return buf.data


CHECKS = {
    "check.py::test_changed_keeps_the_first_k": lambda: ops.changed([5, 6, 7], 2) == ([5, 6], 2, True),
    "check.py::test_changed_on_nothing": lambda: ops.changed([], 3) == ([], 0, False),
    "check.py::test_copy_into_a_longer_buffer": lambda: (b := ops.Buf(3)).copy_([4]) or b.data == [4, 0, 0],
}
tests, rc = {}, 0
for name, check in CHECKS.items():
    try:
        ok = bool(check())
    except Exception:
        ok = False
    tests[name] = {
        "outcomes": {"setup": "passed", "call": "passed" if ok else "failed", "teardown": "passed"},
        "skip_reason": None, "calls": 1, "first_failure_call": None if ok else 1,
        "seconds_to_first_failure": None if ok else 0.0, "seconds": 0.0, "falsifying": [],
        "reproducer": True, "hypothesis": False,
    }
    if not ok:
        rc = 1
        break
if trace is not None:
    tracer.stop()
record.parent.mkdir(parents=True, exist_ok=True)
record.write_text(json.dumps({"exitstatus": rc, "tests": tests}))
sys.exit(rc)
"""


@pytest.fixture
def pair(tmp_path):
    """(release root, change root): the fake package, before and after the change."""
    for root, source in (("release", RELEASE), ("change", CHANGE)):
        pkg = tmp_path / root / "vllm" / "fake"
        pkg.mkdir(parents=True)
        (tmp_path / root / "vllm" / "__init__.py").write_text("")
        (pkg / "__init__.py").write_text("")
        (pkg / "ops.py").write_text(source)
    return tmp_path / "release", tmp_path / "change"


def fake_command(tmp_path, fail_control=False):
    script = tmp_path / "check.py"
    script.write_text(CHECK.replace("[5, 6], 2, True)", "[5, 6], 99, True)") if fail_control else CHECK)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}

    def command(tree, record, trace=None):
        return [sys.executable, str(script), str(tree), str(record), *([str(trace)] if trace else [])], env

    return command


def by(mutants, operator, description):
    found = [m for m in mutants if m.operator == operator and description in m.description]
    assert len(found) == 1, [m.description for m in mutants if m.operator == operator]
    return found[0]


def test_only_changed_and_new_functions_are_mutated(pair):
    release, change = pair
    generation = vm.generate(change, base=release)
    assert {f.qualname: f.status for f in generation.functions} == {
        "changed": "changed",
        "added": "new",
        "Buf.copy_": "new",
    }
    assert {m.function for m in generation.mutants} == {"changed", "added", "Buf.copy_"}
    assert all(m.id.startswith(f"ops:{m.function}:L{m.line}:{m.operator}:") for m in generation.mutants)
    # Formatting, comments and docstrings are not a change; a new file has only new functions.
    assert vm.changed_functions(CHANGE, RELEASE.replace("return 0", "return 0  # c"), "m", "m.py")
    assert [f.status for f in vm.changed_functions(CHANGE, None, "m", "m.py")] == ["new"] * 6


def test_every_operator_fires_and_each_mutant_is_one_hunk(pair):
    release, change = pair
    generation = vm.generate(change, base=release)
    counts = Counter(m.operator for m in generation.mutants)
    assert set(counts) == set(vm.OPERATORS), counts
    # lo = 0 / step = 1 only bind names from constants: swapping them is not generated.
    assert generation.skipped == {"independent_swaps": 1}
    original = vm._lines(CHANGE)
    for m in generation.mutants:
        assert vm.load_error(m) is None, m.id
        hunks = re.findall(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@$", m.diff, re.M)
        assert len(hunks) == 1, m.diff
        start, old_len, _, new_len = map(int, hunks[0])
        mutated = vm._lines(m.source)
        # Byte-identical outside the hunk.
        assert mutated[: start - 1] == original[: start - 1], m.id
        assert mutated[start - 1 + new_len :] == original[start - 1 + old_len :], m.id
        assert mutated != original
    copy_deleted = by(generation.mutants, "delete_call", "out.copy_")
    assert "(block -> pass)" in copy_deleted.description
    assert "-        out.copy_(xs[0:n])\n+        pass\n" in copy_deleted.diff
    assert any("-    while n > 3:\n+    while n >= 3:\n" in m.diff for m in counts_and(generation, "flip_compare"))
    assert {m.splice for m in generation.mutants} <= {"statement", "header", "lines"}


def test_generation_is_deterministic_and_samples_evenly(pair):
    release, change = pair
    first, second = vm.generate(change, base=release), vm.generate(change, base=release)
    assert [(m.id, m.source) for m in first.mutants] == [(m.id, m.source) for m in second.mutants]
    ids = [m.id for m in first.mutants]
    assert len(set(ids)) == len(ids)
    keys = [(m.relpath, m.line) for m in first.mutants]
    assert keys == sorted(keys)
    picked = vm.sample(first.mutants, 5)
    assert picked == vm.sample(second.mutants, 5) and len(picked) == 5
    assert [ids.index(m.id) for m in picked] == sorted(ids.index(m.id) for m in picked)
    assert picked[0] is first.mutants[0] and vm.sample(first.mutants, 10**6) == first.mutants
    assert [m.function for m in vm.select(first.mutants, ["ops:added:*"])] == ["added"] * counts_of(first, "added")


def s_problems(report):
    return report["summary"]["problems"]


def counts_and(generation, operator):
    return [m for m in generation.mutants if m.operator == operator]


def counts_of(generation, function):
    return sum(m.function == function for m in generation.mutants)


def test_the_release_is_found_without_importing_vllm(pair, monkeypatch):
    if "vllm" in sys.modules:
        pytest.skip("vllm is imported in this process already; find_spec would answer with it")
    release, change = pair
    (release / "vllm" / "__init__.py").write_text("raise RuntimeError('the release package must not be imported')\n")
    monkeypatch.syspath_prepend(str(release))
    importlib.invalidate_caches()
    assert vm.installed_file("vllm/fake/ops.py") == release / "vllm" / "fake" / "ops.py"
    assert vm.installed_file("vllm/fake/missing.py") is None
    assert [m.id for m in vm.generate(change).mutants] == [m.id for m in vm.generate(change, base=release).mutants]
    assert "vllm" not in sys.modules


def test_a_read_only_overlay_is_linked_not_modified(pair, tmp_path):
    _, change = pair
    mutant = vm.generate(change, base=pair[0]).mutants[0]
    paths = [change, *change.rglob("*")]
    try:
        for p in paths:
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        tree = vm.write_tree(change, tmp_path / "tree", mutant.relpath, mutant.source)
    finally:
        for p in paths:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    assert (tree / mutant.relpath).read_text() == mutant.source
    assert not (tree / mutant.relpath).is_symlink()
    assert (tree / "vllm" / "__init__.py").resolve() == (change / "vllm" / "__init__.py").resolve()
    assert (change / mutant.relpath).read_text() == CHANGE


def test_run_reports_killed_survived_unreached_and_not_loadable(pair, tmp_path, monkeypatch):
    release, change = pair
    trees = tmp_path / "trees"
    monkeypatch.setattr(vm.tempfile, "mkdtemp", lambda prefix: str(trees.mkdir() or trees))
    generation = vm.generate(change, base=release)
    fill_deleted = by(generation.mutants, "delete_call", "out.fill_")
    copy_deleted = by(generation.mutants, "delete_call", "out.copy_")
    chosen = [m for m in generation.mutants if m.function == "changed"][:6] + [fill_deleted, copy_deleted]
    chosen += [m for m in generation.mutants if m.function == "added"][:3]
    loop_body = [m for m in generation.mutants if m.line == 20]  # the while loop's body: never entered
    chosen += loop_body
    broken = dataclasses.replace(copy_deleted, id="ops:changed:L1:test_only:1", source=CHANGE + "def (:\n")
    unimportable = dataclasses.replace(
        copy_deleted, id="ops:changed:L1:test_only:2", source=CHANGE + "raise ImportError('broken on purpose')\n"
    )
    chosen += [broken, unimportable]
    out = tmp_path / "out"
    run = vm.run_mutants(chosen, change, out, command=fake_command(tmp_path), jobs=4, timeout=60)
    assert run["control"]["status"] == "passed", run["control"]
    results = run["results"]
    assert results[broken.id]["status"] == "not_loadable" and "does not compile" in results[broken.id]["detail"]
    assert results[unimportable.id]["status"] == "not_loadable"
    assert "pytest exited 4" in results[unimportable.id]["detail"]
    assert results[copy_deleted.id]["status"] == "killed"
    assert results[copy_deleted.id]["killed_by"] == "check.py::test_changed_keeps_the_first_k"
    assert results[copy_deleted.id]["examples"] == 1
    assert results[fill_deleted.id]["status"] == "survived" and not results[fill_deleted.id].get("not_run")
    for m in chosen:
        if m.function == "added" or m in loop_body:
            assert results[m.id]["status"] == "survived" and results[m.id]["not_run"], m.id
    assert not trees.exists(), "the mutants' trees must be removed"

    equivalent = {fill_deleted.id: "the copy_ right after it overwrites what fill_ wrote (n == len of the slice)"}
    report = vm.build_report(generation, chosen, run, change, equivalent=equivalent)
    entries = {e["id"]: e for e in report["mutants"]}
    assert entries[fill_deleted.id]["status"] == "equivalent" and entries[fill_deleted.id]["reached"] == "yes"
    assert {entries[m.id]["reached"] for m in chosen if m.function == "added" or m in loop_body} == {"no"}
    assert any(
        "survivors in code the control run never executed: added (3), changed (" in p for p in s_problems(report)
    )
    s = report["summary"]
    assert s["killed"] + s["survived"] + s["equivalent"] + s["not_loadable"] + s["error"] + s["timeout"] == len(chosen)
    assert s["kill_rate"] == round(s["killed"] / (len(chosen) - s["equivalent"] - s["not_loadable"]), 4)
    assert s["not_loadable"] == 2 and s["error"] == s["timeout"] == 0
    assert not s["ok"] and any("survived" in p for p in s["problems"])
    assert report["functions"]["vllm/fake/ops.py::changed"]["killed"] >= 1
    text = vm.render_markdown(report)
    for e in report["mutants"]:
        if e["status"] == "survived":
            assert e["diff"].rstrip("\n") in text, e["id"]
    assert f"`{fill_deleted.id}`: the copy_ right after it overwrites" in text

    # Classifying after the run: the report is written again from its JSON, nothing runs.
    plain = vm.build_report(generation, chosen[:-2], run, change, equivalent={})
    (out / "report.json").write_text(json.dumps(plain))
    monkeypatch.setattr(vm, "EQUIVALENT", equivalent)
    args = [f"--vllm-overlay={change}", f"--base={release}", f"--out={out}", "--rebuild-report"]
    assert vm.main(args) == 1  # other survivors remain
    rebuilt = json.loads((out / "report.json").read_text())
    assert {e["id"]: e["status"] for e in rebuilt["mutants"]}[fill_deleted.id] == "equivalent"
    assert rebuilt["summary"]["equivalent"] == 1 and rebuilt["summary"]["considered"] == len(chosen) - 2

    # An entry that says "equivalent" about a mutant the suite killed is wrong.
    wrong = vm.build_report(generation, chosen, run, change, equivalent={copy_deleted.id: "not really"})
    assert any("listed as equivalent but was killed" in p for p in wrong["summary"]["problems"])


def test_a_failing_control_stops_the_run(pair, tmp_path):
    release, change = pair
    generation = vm.generate(change, base=release)
    chosen = generation.mutants[:3]
    run = vm.run_mutants(chosen, change, tmp_path / "out", command=fake_command(tmp_path, fail_control=True))
    assert run["control"]["status"] == "failed" and run["results"] == {}
    report = vm.build_report(generation, chosen, run, change, equivalent={})
    assert {e["status"] for e in report["mutants"]} == {"error"}
    assert "the unmutated overlay does not pass" in report["summary"]["problems"][0]


def test_the_equivalent_table_rejects_what_matches_nothing(pair, tmp_path, monkeypatch, capsys):
    release, change = pair
    ids = [m.id for m in vm.generate(change, base=release).mutants]
    vm.check_equivalent_table({ids[0]: "a reason"}, ids)
    with pytest.raises(vm.MutantError, match="not generated.*ops:changed:L999:const_0_1:1"):
        vm.check_equivalent_table({"ops:changed:L999:const_0_1:1": "a reason"}, ids)
    with pytest.raises(vm.MutantError, match="without a reason"):
        vm.check_equivalent_table({ids[0]: " "}, ids)
    monkeypatch.setattr(vm, "EQUIVALENT", {"ops:gone:L1:const_0_1:1": "stale"})
    args = [f"--vllm-overlay={change}", f"--base={release}", f"--out={tmp_path / 'out'}"]
    assert vm.main([*args, "--list"]) == 2
    assert "not generated" in capsys.readouterr().err
    assert vm.main([*args, "--list", "--no-equivalent"]) == 0
    assert "per operator:" in capsys.readouterr().out


def test_the_equivalent_table_is_well_formed():
    ops = "|".join(vm.OPERATORS)
    for mutant_id, reason in vm.EQUIVALENT.items():
        assert re.fullmatch(rf"[\w.]+:[\w.]+:L\d+:({ops}):\d+", mutant_id), mutant_id
        assert reason.strip() and "\n" not in reason, mutant_id


def test_the_default_command_is_the_whole_verification_against_the_overlay(tmp_path):
    command = vm.verification_command(trace_files=["/x/ops.py"])
    argv, env = command(tmp_path / "tree", tmp_path / "r.json", tmp_path / "lines.json")
    assert argv[1:3] == ["-m", "pytest"] and "tests" in argv
    for arg in ("--subject=vllm", f"--vllm-overlay={tmp_path / 'tree'}", f"--kill-matrix-json={tmp_path / 'r.json'}"):
        assert arg in argv
    assert argv[argv.index("-m", 3) + 1] == "verification" and "-x" in argv
    assert "tools.killmatrix_plugin" in argv and "tools.line_trace_plugin" in argv
    assert "--line-trace=/x/ops.py" in argv and env["HYPOTHESIS_PROFILE"] == "mutants"
    argv, _ = command(tmp_path / "tree", tmp_path / "r.json", None)
    assert "tools.line_trace_plugin" not in argv


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
    verdict = vm.classify(returncode, record, tmp_path / "log", timeout=9)
    assert verdict["status"] == status, verdict
    if status == "killed":
        assert verdict["killed_by"] == "tests/a.py::test_p" and verdict["examples"] == 3


def test_a_process_killed_by_a_signal_inside_a_test_is_a_kill_else_an_error(tmp_path):
    log = tmp_path / "log"
    log.write_text(
        "....Fatal Python error: Aborted\n\nCurrent thread 0x1 (most recent call first):\n"
        '  File "/x/triton/runtime/interpreter.py", line 604 in binary_op\n'
        '  File "/repo/tests/differential/test_single_step.py", line 105 in test_host_path\n'
        '  File "/repo/fixtures/killmatrix_plugin.py", line 50 in test_host_path\n'
        '  File "/repo/tests/differential/test_single_step.py", line 91 in test_host_path\n'
    )
    verdict = vm.classify(-6, tmp_path / "missing.json", log, timeout=9)
    assert verdict["status"] == "killed" and verdict["crash"] == "SIGABRT"
    assert verdict["killed_by"] == "tests/differential/test_single_step.py::test_host_path"
    log.write_text("killed from outside, no dump\n")
    assert vm.classify(-9, tmp_path / "missing.json", log, timeout=9)["status"] == "error"


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
    verdict = vm.classify(proc.returncode, record, tmp_path / "log", timeout=9)
    assert verdict["status"] == "killed", proc.stdout[-2000:]
    assert verdict["killed_by"].endswith("test_p.py::test_p") and verdict["examples"] == 1
