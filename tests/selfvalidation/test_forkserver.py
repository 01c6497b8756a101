"""The fork server (``tools/forkserver.py``): each run imports its own overlay, leaves nothing
behind for the next, and a machine with a GPU gets fresh processes instead.

The runs are real pytest runs of probe tests written into ``tmp_path``, with a
fake ``vllm`` package given as ``--vllm-overlay`` (no vLLM needed).
"""

from __future__ import annotations

import os
import sys
import textwrap
import types
from pathlib import Path

import pytest

from tools import forkserver
from tools.forkserver import Launcher, LauncherError, Run, choose_mode, env_refusal, fork_refusal
from tools.fresh_run import ROOT, pytest_env

PROBE = """
import os
import sys

import fixtures.protocol


def test_the_overlay_of_this_run_is_the_one_imported():
    assert "vllm.fake.mark" not in sys.modules, "imported before the run: not fresh"
    from vllm.fake import mark

    assert mark.VALUE == os.environ["EXPECT_VALUE"]
    assert mark.__file__.startswith(os.environ["EXPECT_TREE"])


def test_nothing_from_an_earlier_run_is_left():
    # A module the server preloaded, a variable of the environment: each run marks both.
    assert not hasattr(fixtures.protocol, "_LEFT_BY_A_RUN"), fixtures.protocol._LEFT_BY_A_RUN
    assert "LEFT_BY_A_RUN" not in os.environ
    fixtures.protocol._LEFT_BY_A_RUN = os.environ["EXPECT_VALUE"]
    os.environ["LEFT_BY_A_RUN"] = "1"
"""


def write_tree(root: Path, value: str) -> Path:
    pkg = root / "vllm" / "fake"
    pkg.mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "mark.py").write_text(f"VALUE = {value!r}\n")
    return root


@pytest.fixture
def suite(tmp_path):
    """A folder with the probe tests (as verification properties: under tests/) and its own rootdir."""
    folder = tmp_path / "suite"
    (folder / "tests").mkdir(parents=True)
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / "tests" / "test_probe.py").write_text(textwrap.dedent(PROBE))
    return folder


def probe_runs(tmp_path, suite, values, env):
    runs = []
    for value in values:
        tree = write_tree(tmp_path / f"tree-{value}", value)
        run_env = {**env, "EXPECT_VALUE": value, "EXPECT_TREE": str(tree.resolve())}
        args = ["tests", "-q", "-p", "no:cacheprovider", "-p", "fixtures.plugin.hooks", "--baseline=none"]
        args += [f"--vllm-overlay={tree}"]
        runs.append(Run(value, args, run_env, tmp_path / "logs" / f"{value}.log", 120, suite))
    return runs


def run_all(launcher, runs):
    outcomes = {}
    launcher.run(runs, lambda run, outcome: outcomes.__setitem__(run.key, outcome))
    return outcomes


def test_each_run_imports_its_own_overlay_and_leaves_nothing_for_the_next(tmp_path, suite):
    env = pytest_env("ci", autoload=False, pythonpath=[ROOT])
    with Launcher(jobs=1, mode="fork", env=env, server_log=tmp_path / "server.log") as launcher:
        outcomes = run_all(launcher, probe_runs(tmp_path, suite, ["a", "b", "c"], env))
        assert launcher.startup_seconds is not None
    for value, outcome in outcomes.items():
        log = (tmp_path / "logs" / f"{value}.log").read_text()
        assert outcome.returncode == 0, log[-3000:]
        assert "(forked from the fork server)" in log
        assert f"vllm.fake.mark <- {(tmp_path / f'tree-{value}' / 'vllm/fake/mark.py').resolve()}" in log
        assert outcome.cpu_seconds is not None


def test_a_run_that_fails_is_reported_as_pytest_reports_it(tmp_path, suite):
    env = pytest_env("ci", autoload=False, pythonpath=[ROOT])
    runs = probe_runs(tmp_path, suite, ["x"], env)
    runs[0].env["EXPECT_VALUE"] = "not x"
    with Launcher(jobs=1, mode="fork", env=env) as launcher:
        assert run_all(launcher, runs)["x"].returncode == 1


def test_a_run_may_not_change_what_the_server_read_at_import(tmp_path, suite):
    env = pytest_env("ci", autoload=False, pythonpath=[ROOT])
    runs = probe_runs(tmp_path, suite, ["y"], env)
    runs[0].env["TRITON_INTERPRET"] = "0"
    with Launcher(jobs=1, mode="fork", env=env) as launcher:
        outcome = run_all(launcher, runs)["y"]
    assert outcome.returncode is None and "TRITON_INTERPRET='0'" in outcome.error
    assert "not run:" in (tmp_path / "logs" / "y.log").read_text()
    assert env_refusal({}) is None


def test_a_run_may_put_entries_in_front_of_the_servers_pythonpath_only(monkeypatch):
    """pytester starts its runs with its folder first on PYTHONPATH: the child puts the added entries on
    sys.path; a run that drops or replaces one of the server's is refused."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/server/a", "/server/b"]))
    added = os.pathsep.join(["/added", "/server/a", "/server/b"])
    assert forkserver.added_path(added, os.environ["PYTHONPATH"]) == ["/added"]
    assert env_refusal({"PYTHONPATH": added}) is None
    assert env_refusal({"PYTHONPATH": "/elsewhere"}) and env_refusal({"PYTHONPATH": "/server/b"})
    assert forkserver.added_path("/x", None) == ["/x"] and forkserver.added_path("", "") == []


def test_a_run_whose_overlay_replaces_a_preloaded_module_is_refused(tmp_path, monkeypatch):
    """A server with vLLM preloaded cannot run an overlay of a module it imported (the child would keep the
    preloaded code): refused, so the caller runs it fresh; an overlay of modules not imported forks."""
    monkeypatch.setitem(sys.modules, "vllm.fake.preloaded", types.ModuleType("vllm.fake.preloaded"))
    for name in ("preloaded", "fresh"):
        (tmp_path / "both" / "vllm" / "fake").mkdir(parents=True, exist_ok=True)
        (tmp_path / "both" / "vllm" / "fake" / f"{name}.py").write_text("")
    (tmp_path / "one" / "vllm" / "fake").mkdir(parents=True)
    (tmp_path / "one" / "vllm" / "fake" / "fresh.py").write_text("")
    refusal = forkserver.overlay_refusal(["-q", f"--vllm-overlay={tmp_path / 'both'}"])
    assert refusal and "vllm.fake.preloaded" in refusal and "vllm.fake.fresh" not in refusal, refusal
    assert forkserver.overlay_refusal(["--vllm-overlay", str(tmp_path / "both")]) == refusal
    assert forkserver.overlay_refusal([f"--vllm-overlay={tmp_path / 'one'}"]) is None
    assert forkserver.overlay_refusal(["-q"]) is None


PROBE_SUBJECT = """
from fixtures.subjects.reference import ReferenceSubject


class Probe(ReferenceSubject):
    name = "probe"
"""


@pytest.mark.nightly  # exercised whole per commit by CI's own mutation run (docs/running.md, 'Tiers')
@pytest.mark.parametrize("subject", ["_probe_subject:Probe", "fixtures.subjects.mutants:no_topk_clamp"])
def test_a_suite_run_forked_reads_as_the_fresh_run(pytester, run_suite_in, suite_run_servers, monkeypatch, subject):
    """The self-tests' runs (tools/fresh_run.py, SuiteRun) fork from a server where no GPU is
    visible: a subject module in pytester's folder imports as in a fresh `python -m pytest` there, and
    the exit status, the per-test outcomes and the failure's report are the fresh run's."""
    pytester.makepyfile(_probe_subject=PROBE_SUBJECT)
    args = (f"--subject={subject}", f"{ROOT}/tests/differential/test_single_step.py::test_step_metadata_matches_oracle")
    before = dict(suite_run_servers.how)
    forked = run_suite_in(*args, profile="mutants")
    if choose_mode()[0] == "fork":
        assert suite_run_servers.how.get("forked", 0) == before.get("forked", 0) + 1, suite_run_servers.how
    monkeypatch.setenv("SPARSE_MLA_SUITE_RUNS", "fresh")
    fresh = run_suite_in(*args, profile="mutants")
    assert suite_run_servers.how.get("fresh: asked for", 0) == before.get("fresh: asked for", 0) + 1
    assert forked.ret == fresh.ret == (0 if subject.startswith("_probe") else 1), forked.out[-3000:]
    assert {t: r["outcome"] for t, r in forked.tests.items()} == {t: r["outcome"] for t, r in fresh.tests.items()}
    assert "(forked from the fork server)" not in forked.out, "the child's own header is not pytest's output"
    for out in (forked.out, fresh.out):
        assert "verification summary" in out and "test_step_metadata_matches_oracle  [1 " in out, out[-3000:]
        assert (f"--subject={subject}" in out) == (forked.ret == 1), out[-3000:]  # the reproducer of a failure


@pytest.mark.nightly  # exercised whole per commit by CI's own mutation run (docs/running.md, 'Tiers')
def test_a_run_past_its_time_limit_is_killed(tmp_path, suite):
    env = pytest_env("ci", autoload=False, pythonpath=[ROOT])
    (suite / "tests" / "test_probe.py").write_text("import time\n\ndef test_sleeps():\n    time.sleep(60)\n")
    runs = probe_runs(tmp_path, suite, ["z"], env)
    runs[0].timeout = 3
    with Launcher(jobs=1, mode="fork", env=env) as launcher:
        outcome = run_all(launcher, runs)["z"]
    assert outcome.returncode is None and outcome.error is None and outcome.seconds < 30


@pytest.mark.parametrize("mode", ["fork", "fresh"])
def test_a_run_killed_by_a_signal_leaves_nothing_in_the_temp_folder(tmp_path, suite, mode):
    """A child that dies by a signal never reaches its own clean-up (atexit, pytest's): what it made in
    the temp folder is removed with the run's own folder (a crashed mutant once left its model folder)."""
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**pytest_env("ci", autoload=False, pythonpath=[ROOT]), "TMPDIR": str(temp)}
    probe = "import os, signal, tempfile\n\ndef test_dies():\n    tempfile.mkdtemp(prefix='left-')\n"
    (suite / "tests" / "test_probe.py").write_text(probe + "    os.kill(os.getpid(), signal.SIGKILL)\n")
    runs = probe_runs(tmp_path, suite, ["k"], env)
    with Launcher(jobs=1, mode=mode, env=env) as launcher:
        outcome = run_all(launcher, runs)["k"]
    assert outcome.returncode == -9, (tmp_path / "logs" / "k.log").read_text()[-3000:]
    assert sorted(p.name for p in temp.iterdir()) == []


@pytest.mark.nightly  # a tool CI does not run (docs/running.md, 'Tiers')
def test_a_gpu_machine_gets_fresh_processes(tmp_path, suite):
    """A CUDA/HIP context does not survive fork(): where torch sees a GPU, every run is a process of its own."""
    mode, why = choose_mode("auto", gpu=lambda: True)
    assert mode == "fresh" and "GPU" in why
    with pytest.raises(LauncherError, match="GPU is visible"):
        choose_mode("fork", gpu=lambda: True)
    assert choose_mode("auto", gpu=lambda: False)[0] == ("fork" if hasattr(os, "fork") else "fresh")
    env = pytest_env("ci", autoload=False, pythonpath=[ROOT])
    with Launcher(jobs=2, env=env, gpu=lambda: True) as launcher:
        assert launcher.mode == "fresh"
        outcomes = run_all(launcher, probe_runs(tmp_path, suite, ["g", "h"], env))
    for value, outcome in outcomes.items():
        log = (tmp_path / "logs" / f"{value}.log").read_text()
        assert outcome.returncode == 0 and "(fresh process)" in log, log[-3000:]


FAKE_CUDA = """
import torch

def initialise():
    torch.cuda.is_initialized = lambda: True
"""


def test_the_server_refuses_to_fork_once_cuda_is_initialised(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert "initialised CUDA/HIP" in fork_refusal()
    monkeypatch.undo()
    assert fork_refusal() is None or torch.cuda.is_initialized()
    # A preloaded module that initialises CUDA: the server stops before it forks anything.
    (tmp_path / "fake_cuda.py").write_text(FAKE_CUDA)
    env = pytest_env("ci", autoload=False, pythonpath=[ROOT, tmp_path])
    launcher = Launcher(jobs=1, mode="fork", env=env, preload=["fake_cuda:initialise"], server_log=tmp_path / "s.log")
    with pytest.raises(LauncherError, match="did not start"):
        launcher.run([Run("r", ["--version"], env, tmp_path / "r.log")], lambda *a: None)
    assert "initialised CUDA/HIP" in (tmp_path / "s.log").read_text()


def test_the_default_preload_is_what_every_run_imports_first():
    assert {"torch", "triton", "hypothesis", "pytest"} <= set(forkserver.PRELOAD)
    # pytest rewrites the asserts of plugin modules as it imports them: never preloaded.
    assert "fixtures.plugin.hooks" not in forkserver.PRELOAD


def test_auto_mode_forks_only_where_torch_sees_no_gpu():
    torch = pytest.importorskip("torch")
    launcher = Launcher(jobs=1)
    assert launcher.mode == ("fresh" if torch.cuda.is_available() or not hasattr(os, "fork") else "fork")


REAL_CUDA = """
import torch

def initialise():
    torch.cuda.init()
    torch.zeros(1, device="cuda")
"""


@pytest.mark.gpu
def test_on_a_gpu_a_server_that_initialised_cuda_forks_nothing(tmp_path):
    """On a real GPU: a preloaded module that creates a CUDA/HIP context stops the server before any fork."""
    (tmp_path / "real_cuda.py").write_text(REAL_CUDA)
    env = pytest_env("ci", autoload=False, pythonpath=[ROOT, tmp_path])
    launcher = Launcher(
        jobs=1, mode="fork", env=env, preload=["real_cuda:initialise"], server_log=tmp_path / "s.log", gpu=lambda: False
    )
    with pytest.raises(LauncherError, match="did not start"):
        launcher.run([Run("r", ["--version"], env, tmp_path / "r.log")], lambda *a: None)
    assert "initialised CUDA/HIP" in (tmp_path / "s.log").read_text()
