"""The mutation-adequacy runner (:mod:`tools.vllm_mutants`) on a synthetic release/change pair.

No vLLM and no Triton: a fake ``vllm`` package is written into ``tmp_path`` as
a release (``release/vllm/fake/ops.py``) and an overlay (``change/vllm/...``)
in which one function was rewritten, one changed in a single line, one is new,
a class gained a method and one function differs only in docstring and
formatting.  The runs are real: probe tests (``tests/test_ops.py`` in a folder
of their own) import the mutated tree through the suite's plugin and
``--vllm-overlay``, through the fork server, with the reach plugin in the
control.  Nothing is written into the repository.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from fixtures.plugin.profiles import NO_SHRINK
from tools import vllm_mutants as vm
from tools.forkserver import Launcher, Run
from tools.fresh_run import ROOT, pytest_env
from tools.vllm_mutants import __main__ as cli
from tools.vllm_mutants import reach_plugin
from tools.vllm_mutants.discover import source_lines
from tools.vllm_mutants.equivalent import EQUIVALENT, check_equivalent_table
from tools.vllm_mutants.generate import every_id
from tools.vllm_mutants.operators import independent
from tools.vllm_mutants.report import MergeError, build_report, comparable, merge, reclassify, render_markdown
from tools.vllm_mutants.run import (
    STATUSES,
    load_error,
    run_mutants,
    shard,
    write_tree,
)

RELEASE = """\
def unchanged(xs):
    if len(xs) > 0 and xs[0] == 1:
        return min(xs)
    return 0


def changed(xs, k):
    return list(xs[:k]), k


def tail(xs, n):
    m = len(xs)
    if 0 < n < m:
        start = m - n
        return xs[start:]
    return xs[0:m]


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


def tail(xs, n):
    m = len(xs)
    if 0 < n < m:
        start = max(m - n, 0)
        return xs[start:]
    return xs[0:m]


class Buf:
    def __init__(self, n):
        self.data = [0] * n

    def fill_(self, v):
        for i in range(len(self.data)):
            self.data[i] = v

    def copy_(self, src):
        self.data[: len(src)] = src
'''

# The fake verification: probe tests (verification properties: under tests/) that import the
# overlaid module through the suite's plugin and --vllm-overlay.
PROBE = """\
from hypothesis import given, strategies as st

from vllm.fake import ops


def test_changed_keeps_the_first_k():
    assert ops.changed([5, 6, 7], 2) == ([5, 6], 2, True)


def test_changed_on_nothing():
    assert ops.changed([], 3) == ([], 0, False)


def test_copy_into_a_longer_buffer():
    b = ops.Buf(3)
    b.copy_([4])
    assert b.data == [4, 0, 0]


@given(st.lists(st.integers(0, 9), max_size=6), st.integers(0, 9))
def test_tail_is_the_last_n(xs, n):
    assert ops.tail(xs, n) == (xs[-n:] if 0 < n < len(xs) else xs)
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


@pytest.fixture
def suite(tmp_path):
    """The probe tests in a folder of their own (its own rootdir)."""
    folder = tmp_path / "suite"
    (folder / "tests").mkdir(parents=True)
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / "tests" / "test_ops.py").write_text(PROBE)
    return folder


def run_synthetic(mutants, change, out, suite, fail_control=False, profile="mutants", **kw):
    if fail_control:
        (suite / "tests" / "test_ops.py").write_text(PROBE.replace("[5, 6], 2, True)", "[5, 6], 99, True)"))
    return run_mutants(
        mutants,
        change,
        out,
        paths=["tests"],
        extra=["-p", "fixtures.plugin.hooks", "--baseline=none"],
        preload=(),
        cwd=suite,
        profile=profile,
        env={**pytest_env(profile, autoload=False, pythonpath=[ROOT]), NO_SHRINK: "1"},
        timeout=120,
        **kw,
    )


def by(mutants, operator, description):
    found = [m for m in mutants if m.operator == operator and description in m.description]
    assert len(found) == 1, [m.description for m in mutants if m.operator == operator]
    return found[0]


def counts_and(generation, operator):
    return [m for m in generation.mutants if m.operator == operator]


def counts_of(generation, function):
    return sum(m.function == function for m in generation.mutants)


# ----- what is mutated ------------------------------------------------------------------------
def test_function_scope_mutates_changed_and_new_functions_only(pair):
    release, change = pair
    generation = vm.generate(change, base=release, scope="function")
    assert {f.qualname: f.status for f in generation.functions} == {
        "changed": "changed",
        "added": "new",
        "tail": "changed",
        "Buf.copy_": "new",
    }
    assert {m.function for m in generation.mutants} == {"changed", "added", "tail", "Buf.copy_"}
    assert all(m.id.startswith(f"ops:{m.function}:L{m.line}:{m.operator}:") for m in generation.mutants)
    # Formatting, comments and docstrings are not a change; a new file has only new functions.
    assert vm.changed_functions(CHANGE, RELEASE.replace("return 0", "return 0  # c"), "m", "m.py")
    assert [f.status for f in vm.changed_functions(CHANGE, None, "m", "m.py")] == ["new"] * 7


def plus_lines(old: str, new: str) -> set[int]:
    """The new side's line numbers of the ``+`` lines of ``diff -u`` (parsed here, independently)."""
    found, line = set(), 0
    for text in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=3):
        if text.startswith("@@"):
            line = int(re.match(r"@@ -\d+(?:,\d+)? \+(\d+)", text).group(1))
        elif text.startswith("+") and not text.startswith("+++"):
            if text[1:].strip() and not text[1:].strip().startswith("#"):
                found.add(line)
            line += 1
        elif not text.startswith("-"):
            line += 1
    return found


def removed_lines(diff: str) -> set[int]:
    """The old side's line numbers of a mutant diff's ``-`` lines (the overlay's numbering)."""
    found, line = set(), 0
    for text in diff.splitlines():
        if text.startswith("@@"):
            line = int(re.match(r"@@ -(\d+)", text).group(1))
        elif text.startswith("-") and not text.startswith("---"):
            found.add(line)
            line += 1
        elif text.startswith(" "):
            line += 1
    return found


def block_holds(source: list[str], header: int, plus: set[int]) -> bool:
    """Whether line ``header`` opens a block (``...:``) whose indented lines hold a + line."""
    text = source[header - 1]
    if not text.rstrip().endswith(":"):
        return False
    indent = len(text) - len(text.lstrip())
    for number in range(header + 1, len(source) + 1):
        body = source[number - 1]
        if body.strip() and len(body) - len(body.lstrip()) <= indent:
            return False
        if number in plus:
            return True
    return False


def test_line_scope_mutates_only_the_statements_the_diff_changed(pair):
    release, change = pair
    lines = vm.generate(change, base=release, scope="lines")
    function = vm.generate(change, base=release, scope="function")
    plus = plus_lines(RELEASE, CHANGE)
    source = CHANGE.splitlines()
    # tail: only `start = max(m - n, 0)` changed; its enclosing `if` header is in scope too,
    # the rest of the function is not.
    start_line = 1 + source.index("        start = max(m - n, 0)")
    if_line = start_line - 1
    tail = {(m.line, m.operator) for m in lines.mutants if m.function == "tail"}
    assert tail == {
        (if_line, "flip_compare"),
        (if_line, "force_condition"),
        (if_line, "const_0_1"),
        (start_line, "swap_statements"),
        (start_line, "swap_min_max"),
        (start_line, "const_0_1"),
    }, sorted(tail)
    assert counts_of(function, "tail") > len(tail) + 4
    ids = {m.id for m in function.mutants}
    for m in lines.mutants:
        assert m.id in ids or m.function == "unchanged", m.id  # an id names the same mutant in both scopes
        removed = removed_lines(m.diff)
        if m.operator == "swap_statements":
            assert set(m.reach) & plus, m.id  # one of the two statements (their first lines) changed
        else:
            # Each rewritten line holds a + line of the diff, or is the header of a block that holds one.
            assert all(r in plus or block_holds(source, r, plus) for r in removed), (m.id, removed)
    # `unchanged` differs only in formatting: the diff shows its reformatted `if`, so the line scope
    # mutates that header, while the function scope (which compares code) does not.
    assert counts_of(function, "unchanged") == 0 < counts_of(lines, "unchanged")
    assert {h.changed for h in lines.hunks} and set().union(*(h.changed for h in lines.hunks)) == plus


def test_every_operator_fires_and_each_mutant_is_one_hunk(pair):
    release, change = pair
    generation = vm.generate(change, base=release, scope="function")
    counts = Counter(m.operator for m in generation.mutants)
    assert set(counts) == set(vm.OPERATORS), counts
    # lo = 0 / step = 1 only bind names from constants: swapping them is not generated.
    assert generation.skipped == {"independent_swaps": 1}
    original = source_lines(CHANGE)
    for m in generation.mutants:
        assert load_error(m) is None, m.id
        hunks = re.findall(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@$", m.diff, re.M)
        assert len(hunks) == 1, m.diff
        start, old_len, _, new_len = map(int, hunks[0])
        mutated = source_lines(m.source)
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
    # Shards: a deterministic partition, in order.
    parts = [shard(first.mutants, k, 3) for k in range(3)]
    assert sorted((m.id for p in parts for m in p), key=ids.index) == ids
    assert all(p == shard(second.mutants, k, 3) for k, p in enumerate(parts) for p in [[m for m in p]])
    with pytest.raises(ValueError, match="shard-id"):
        shard(first.mutants, 3, 3)


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
        tree = write_tree(change, tmp_path / "tree", mutant.relpath, mutant.source)
    finally:
        for p in paths:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    assert (tree / mutant.relpath).read_text() == mutant.source
    assert not (tree / mutant.relpath).is_symlink()
    assert (tree / "vllm" / "__init__.py").resolve() == (change / "vllm" / "__init__.py").resolve()
    assert (change / mutant.relpath).read_text() == CHANGE


# ----- running: control, reach, selection, verdicts, shards ------------------------------------------
def ran_tests(result) -> set[str]:
    """The tests a mutant's run executed, from its kill-matrix record (next to its log)."""
    log = Path(result["log"])
    record = log.parent.parent / "runs" / (log.stem + ".json")
    return {t.rsplit("::", 1)[1] for t in json.loads(record.read_text())["tests"]}


@pytest.mark.nightly  # exercised whole per commit by CI's own mutation run (docs/running.md, 'Tiers')
def test_each_mutant_runs_only_the_tests_that_reach_it(pair, tmp_path, suite, monkeypatch):
    """...and the run, through the fork server, leaves the temp folder as it found it."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # the fork server's and its children's
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # this process's: the mutants' trees
    release, change = pair
    generation = vm.generate(change, base=release, scope="function")
    fill_deleted = by(generation.mutants, "delete_call", "out.fill_")
    copy_deleted = by(generation.mutants, "delete_call", "out.copy_")
    copy_shifted = [m for m in generation.mutants if m.function == "Buf.copy_" and m.operator == "shift_index"]
    tail_if = [m for m in generation.mutants if m.function == "tail" and m.operator == "flip_compare"]
    added = [m for m in generation.mutants if m.function == "added"][:3]
    loop_body = [m for m in generation.mutants if m.line == 20]  # the while loop's body: never entered
    broken = dataclasses.replace(copy_deleted, id="ops:changed:L1:test_only:1", source=CHANGE + "def (:\n")
    unimportable = dataclasses.replace(
        copy_deleted, id="ops:changed:L1:test_only:2", source=CHANGE + "raise ImportError('broken on purpose')\n"
    )
    chosen = [fill_deleted, copy_deleted, *copy_shifted[:1], *tail_if, *added, *loop_body, broken, unimportable]
    run = run_synthetic(chosen, change, tmp_path / "out", suite)
    assert run["control"]["status"] == "passed", run["control"]
    assert "fork" in run["launcher"] or "fresh" in run["launcher"]
    assert [n for n in os.listdir(temp) if not n.startswith("torchinductor_")] == [], "the run left files behind"
    results = run["results"]
    # Reach: per test, from coverage's dynamic contexts.
    ops_file = str((change / "vllm/fake/ops.py").resolve())
    copy_line = str(1 + CHANGE.splitlines().index("        self.data[: len(src)] = src"))
    assert {t.rsplit("::", 1)[1] for t in run["reach"][ops_file][copy_line]} == {
        "test_changed_keeps_the_first_k",
        "test_copy_into_a_longer_buffer",
    }
    # Selection: a mutant of Buf.copy_ runs the two tests that call it, never test_changed_on_nothing.
    assert results[copy_shifted[0].id]["status"] == "killed"
    assert results[copy_shifted[0].id]["tests"] == 2
    assert ran_tests(results[copy_shifted[0].id]) <= {
        "test_changed_keeps_the_first_k",
        "test_copy_into_a_longer_buffer",
    }
    assert results[copy_deleted.id]["status"] == "killed"
    assert results[copy_deleted.id]["killed_by"] == "tests/test_ops.py::test_changed_keeps_the_first_k"
    assert results[copy_deleted.id]["examples"] is None or results[copy_deleted.id]["examples"] >= 1
    # The hypothesis property is the only test that reaches tail; it kills the flipped bound.
    for m in tail_if:
        assert ran_tests(results[m.id]) == {"test_tail_is_the_last_n"}, m.id
    assert any(results[m.id]["status"] == "killed" for m in tail_if)
    assert results[fill_deleted.id]["status"] == "survived" and results[fill_deleted.id]["tests"] >= 1
    for m in [*added, *loop_body]:
        assert results[m.id]["status"] == "gap" and str(m.line) in results[m.id]["detail"], m.id
    assert results[broken.id]["status"] == "not_loadable" and "does not compile" in results[broken.id]["detail"]
    assert results[unimportable.id]["status"] == "not_loadable"
    assert "pytest exited 4" in results[unimportable.id]["detail"]

    equivalent = {fill_deleted.id: "the copy_ right after it overwrites what fill_ wrote (n == len of the slice)"}
    report = build_report(generation, chosen, run, change, equivalent=equivalent, base=release)
    entries = {e["id"]: e for e in report["mutants"]}
    assert entries[fill_deleted.id]["status"] == "equivalent" and entries[fill_deleted.id]["reached"] == "yes"
    assert {entries[m.id]["reached"] for m in [*added, *loop_body]} == {"no"}
    s = report["summary"]
    assert sum(s[k] for k in STATUSES) == len(chosen)
    assert s["kill_rate"] == round(s["killed"] / (len(chosen) - s["equivalent"] - s["not_loadable"]), 4)
    assert s["not_loadable"] == 2 and s["error"] == s["timeout"] == 0 and s["gap"] == len(added) + len(loop_body)
    assert not s["ok"] and any("is a gap" in p for p in s["problems"])
    assert report["functions"]["vllm/fake/ops.py::Buf.copy_"]["killed"] >= 1
    text = render_markdown(report)
    assert f"`{fill_deleted.id}`: the copy_ right after it overwrites" in text
    assert "## Per hunk of the diff" in text and "+        start = max(m - n, 0)" in text
    hunk_of_tail = next(h for h in report["hunks"] if "+        start = max(m - n, 0)" in h["text"])
    assert {m.id for m in tail_if} <= set(hunk_of_tail["mutants"])

    # Classifying after the run: the report is written again from its JSON, nothing runs.
    plain = build_report(generation, chosen, run, change, equivalent={}, base=release)
    assert entries_by_status(plain)[fill_deleted.id] == "survived"
    assert entries_by_status(reclassify(plain, equivalent))[fill_deleted.id] == "equivalent"
    # An entry that says "equivalent" about a mutant the suite killed is wrong.
    wrong = build_report(generation, chosen, run, change, equivalent={copy_deleted.id: "not really"})
    assert any("listed as equivalent but was killed" in p for p in wrong["summary"]["problems"])


def entries_by_status(report):
    return {e["id"]: e["status"] for e in report["mutants"]}


@pytest.mark.nightly  # a tool CI does not run (docs/running.md, 'Tiers')
def test_two_shards_merge_into_the_unsharded_report(pair, tmp_path, suite):
    release, change = pair
    generation = vm.generate(change, base=release, scope="lines")
    chosen = [m for m in generation.mutants if m.function in ("tail", "Buf.copy_")][:6]
    equivalent = {}
    whole = build_report(
        generation,
        chosen,
        run_synthetic(chosen, change, tmp_path / "whole", suite),
        change,
        equivalent=equivalent,
        base=release,
    )
    shards = []
    for k in range(2):
        part = shard(chosen, k, 2)
        run = run_synthetic(part, change, tmp_path / f"shard{k}", suite)
        shards.append(build_report(generation, part, run, change, equivalent=equivalent, base=release, shard=(k, 2)))
    merged = merge(shards)
    assert comparable(merged) == comparable(whole)
    assert merged["summary"]["shards"] == 2 and whole["summary"]["killed"] >= 1
    with pytest.raises(MergeError, match="shards 0..N-1"):
        merge([shards[0], shards[0]])
    with pytest.raises(MergeError, match="shards 0..N-1"):
        merge(shards[:1])


def reach_session(change, release, suite, tmp_path, name, *extra, profile="mutants"):
    """A verification session of the probe tests that records reach as CI's does (the reach plugin
    working out files and functions from --reach-overlay and --reach-base); its reach file."""
    env = {**pytest_env(profile, autoload=False, pythonpath=[ROOT]), NO_SHRINK: "1"}
    out = tmp_path / f"{name}.json"
    args = ["tests", "-q", "-p", "no:cacheprovider", "-p", "fixtures.plugin.hooks", "--baseline=none"]
    args += [f"--vllm-overlay={change}", "-p", "tools.vllm_mutants.reach_plugin", f"--reach-json={out}"]
    args += [f"--reach-overlay={change}", f"--reach-base={release}", *extra]
    outcomes = []
    with Launcher(jobs=1, env=env) as launcher:
        launcher.run([Run(name, args, env, tmp_path / f"{name}.log", 120, suite)], lambda r, o: outcomes.append(o))
    assert outcomes[0].returncode == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    return out


@pytest.mark.nightly  # exercised whole per commit by CI's own mutation run (docs/running.md, 'Tiers')
def test_reach_inside_the_mutated_functions_equals_reach_over_the_whole_session(pair, tmp_path, suite):
    release, change = pair
    scoped = reach_plugin.load([reach_session(change, release, suite, tmp_path, "scoped")])
    whole = reach_plugin.load([reach_session(change, release, suite, tmp_path, "whole", "--reach-everywhere")])
    assert scoped["meta"][0]["measured"] == "inside the mutated functions"
    assert whole["meta"][0]["measured"].startswith("the whole session")
    lines = vm.generate(change, base=release, scope="lines")
    ops = str((change / "vllm/fake/ops.py").resolve())
    mutated = {str(line) for m in lines.mutants for line in m.reach}
    assert mutated and {k: v for k, v in scoped["reach"][ops].items() if k in mutated} == {
        k: v for k, v in whole["reach"][ops].items() if k in mutated
    }
    assert set(scoped["seconds"]) == set(whole["seconds"]) and len(scoped["seconds"]) == 4


LAUNCHING = """
import triton
import triton.language as tl


@triton.jit
def bump(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr) + 1)  # KERNEL


def launches(x):
    before = 1
    bump[(1,)](x)
    after = before + 1  # AFTER
    return after
"""
LAUNCHING_TEST = """
import torch

import launching


def test_the_kernel_runs_inside_the_measured_function():
    x = torch.zeros(1, dtype=torch.int32)
    assert launching.launches(x) == 2 and x.item() == 1
"""


@pytest.mark.parametrize("scoped", [True, False])
def test_a_kernel_launched_inside_a_measured_function_runs_untraced_and_the_lines_after_it_count(tmp_path, scoped):
    """Measuring inside the mutated functions, a Triton launch (the interpreter's millions of calls) runs with
    the trace function off and put back after: the function's lines after the launch are still measured, the
    kernel's are not; measuring the whole session, the kernel's lines are (a kernel may be what is mutated)."""
    (tmp_path / "launching.py").write_text(LAUNCHING)
    (tmp_path / "test_launching.py").write_text(LAUNCHING_TEST)
    module = str((tmp_path / "launching.py").resolve())
    out = tmp_path / "reach.json"
    env = {**pytest_env("mutants", autoload=False, pythonpath=[ROOT, tmp_path]), "TRITON_INTERPRET": "1"}
    args = [sys.executable, "-m", "pytest", "test_launching.py", "-q", "-p", "no:cacheprovider"]
    args += ["-p", "tools.vllm_mutants.reach_plugin", f"--reach-json={out}", f"--reach-file={module}"]
    args += [f"--reach-function={module}::launches"] if scoped else ["--reach-everywhere"]
    proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reach = reach_plugin.load([out])["reach"][module]
    lines = LAUNCHING.splitlines()
    after, kernel = (
        str(lines.index(s) + 1)
        for s in ("    after = before + 1  # AFTER", "    tl.store(x_ptr, tl.load(x_ptr) + 1)  # KERNEL")
    )
    assert reach.get(after) == ["test_launching.py::test_the_kernel_runs_inside_the_measured_function"], reach
    assert (kernel in reach) == (not scoped), reach


@pytest.mark.nightly  # exercised whole per commit by CI's own mutation run (docs/running.md, 'Tiers')
def test_a_control_on_two_xdist_workers_reaches_what_one_process_reaches(pair, tmp_path, suite):
    release, change = pair
    chosen = [m for m in vm.generate(change, base=release, scope="lines").mutants if m.function == "tail"]
    one = run_synthetic(chosen, change, tmp_path / "one", suite)
    two = run_synthetic(chosen, change, tmp_path / "two", suite, control_workers=2)
    assert two["control"]["status"] == "passed" and one["reach"] == two["reach"]
    assert {k: v["status"] for k, v in one["results"].items()} == {k: v["status"] for k, v in two["results"].items()}
    assert len(list((tmp_path / "two").glob("control-reach*.json"))) >= 2  # the workers' files
    # ...and their coverage data apart: two workers on one SQLite file raced on making its tables (a
    # control run of CI once stopped on coverage's "no such table: context").
    written = sorted(p.name for p in (tmp_path / "two").glob("control-reach*.coverage"))
    assert written and all(name.startswith("control-reach.gw") for name in written), written


@pytest.mark.nightly  # a tool CI does not run (docs/running.md, 'Tiers')
def test_a_verification_session_serves_as_the_control(pair, tmp_path, suite):
    """CI's run against the overlay records reach; the mutants then run without a control run of their
    own, with the same verdicts as after one."""
    release, change = pair
    generation = vm.generate(change, base=release, scope="lines")
    chosen = [m for m in generation.mutants if m.function in ("tail", "Buf.copy_", "changed")][:8]
    reach = reach_session(change, release, suite, tmp_path, "session")
    taken = run_synthetic(chosen, change, tmp_path / "taken", suite, reach_from=[reach])
    own = run_synthetic(chosen, change, tmp_path / "own", suite)
    assert taken["control"]["status"] == "passed" and "session.json" in taken["control"]["detail"]
    assert entries_by_status({"mutants": [{"id": k, **v} for k, v in taken["results"].items()]}) == entries_by_status(
        {"mutants": [{"id": k, **v} for k, v in own["results"].items()]}
    )
    # Reach recorded under another profile, or on another file, is refused: the selection would not hold.
    other = run_synthetic(chosen, change, tmp_path / "other", suite, reach_from=[reach], profile="ci")
    assert other["control"]["status"] == "error" and "profile 'mutants'" in other["control"]["detail"]
    (change / "vllm/fake/ops.py").write_text(CHANGE + "\n# edited after the session\n")
    edited = run_synthetic(chosen, change, tmp_path / "edited", suite, reach_from=[reach])
    assert edited["control"]["status"] == "error" and "changed since it was measured" in edited["control"]["detail"]
    assert edited["results"] == {}


def test_a_failing_control_stops_the_run(pair, tmp_path, suite):
    release, change = pair
    generation = vm.generate(change, base=release)
    chosen = generation.mutants[:3]
    run = run_synthetic(chosen, change, tmp_path / "out", suite, fail_control=True)
    assert run["control"]["status"] == "failed" and run["results"] == {}
    report = build_report(generation, chosen, run, change, equivalent={})
    assert {e["status"] for e in report["mutants"]} == {"error"}
    assert "the unmutated overlay does not pass" in report["summary"]["problems"][0]


def test_the_equivalent_table_rejects_what_matches_nothing(pair, tmp_path, monkeypatch, capsys):
    release, change = pair
    ids = every_id(change)
    first = sorted(ids)[0]
    check_equivalent_table({first: "a reason"}, ids)
    with pytest.raises(vm.MutantError, match="not generated.*ops:changed:L999:const_0_1:1"):
        check_equivalent_table({"ops:changed:L999:const_0_1:1": "a reason"}, ids)
    with pytest.raises(vm.MutantError, match="without a reason"):
        check_equivalent_table({first: " "}, ids)
    # Every mutant of either scope has an id that the table may name.
    assert {m.id for m in vm.generate(change, base=release, scope="function").mutants} <= ids
    assert {m.id for m in vm.generate(change, base=release, scope="lines").mutants} <= ids
    monkeypatch.setattr(cli, "EQUIVALENT", {"ops:gone:L1:const_0_1:1": "stale"})
    args = [f"--vllm-overlay={change}", f"--base={release}", f"--out={tmp_path / 'out'}"]
    assert cli.main([*args, "--list"]) == 2
    assert "not generated" in capsys.readouterr().err
    assert cli.main([*args, "--list", "--no-equivalent"]) == 0
    assert "per operator:" in capsys.readouterr().out


def test_the_equivalent_table_is_well_formed():
    ops = "|".join(vm.OPERATORS)
    for mutant_id, reason in EQUIVALENT.items():
        assert re.fullmatch(rf"[\w.]+:[\w.]+:L\d+:({ops}):\d+", mutant_id), mutant_id
        assert reason.strip() and "\n" not in reason, mutant_id


@pytest.mark.parametrize(
    ("a", "b", "swap_skipped"),
    [
        ("x = k + 1", "y = k * 2", True),  # local bindings from reads
        ("self.a = cfg.x", "self.b = cfg.y.z", True),  # stores into different attributes of self
        ("self.a = cfg.x", "n = cfg.y", True),
        ("self.a += 1", "self.b = cfg.y", False),  # reads self.a, which may be a property of self.b
        ("self.a = cfg.x", "self.b = self.a", False),  # b reads what a stores
        ("self.a = cfg.x", "self.b = self.c", False),  # self.c may be a property of self.a
        ("self.a = cfg.x", "self.a = cfg.y", False),  # the same attribute: the last store wins
        ("self.a = cfg.x", "self.a.b = 1", False),  # a store into an attribute chain
        ("self.a = cfg.x", "cfg.y = 1", False),  # a store into another object
        ("self.a = make(cfg)", "self.b = cfg.y", False),  # a call
        ("self.a = cfg.x", "self.b[0] = 1", False),  # a store into an item
        ("n = self.m", "self.m = 2", False),  # reads what the other stores
    ],
)
def test_a_swap_is_skipped_only_when_no_order_can_matter(a, b, swap_skipped):
    first, second = ast.parse(a).body[0], ast.parse(b).body[0]
    assert independent(first, second) is swap_skipped
    assert independent(second, first) is swap_skipped


@pytest.mark.nightly  # a minute of waiting for the hang (the limit's floor is 60 s)
def test_a_mutant_whose_tests_hang_is_killed_by_the_hang_not_an_error(pair, tmp_path, suite):
    """A run stopped at its limit prints no summary: the verdict is a kill by a hang, never an error for a summary
    that does not show the mutated file (the function-scoped run at b673660 read one so: build L675's broadcast
    made the seqlen kernel loop on garbage)."""
    release, change = pair
    generation = vm.generate(change, base=release, scope="lines")
    m = next(m for m in generation.mutants if m.function == "tail")
    hanging = dataclasses.replace(m, source=m.source.replace("    m = len(xs)\n", "    while True:\n        pass\n", 1))
    assert hanging.source != m.source
    verdict = run_synthetic([hanging], change, tmp_path / "out", suite)["results"][hanging.id]
    assert verdict["status"] == "killed" and verdict.get("hang"), verdict
