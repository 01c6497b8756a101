"""The catalogue's stateful bugs, written into the real post-change file, are caught.

Each edit of :mod:`fixtures.subjects.mutants.vllm_edits` is applied to a copy of the
overlay given with ``--vllm-overlay`` (in a temporary folder), and the
edit's properties (stateful and gating, or the NoPE forward's for the top-k
remap) run against ``--subject vllm`` with that copy as the overlay, under the ``mutants`` profile (generated examples only, no
pinned ones; an edit marked ``pinned``, which only a rare layer reaches on CPU, under ``ci``, its property's pinned
example first), without shrinking, and without the release beside it
(``--baseline none``): a property of the suite's own must fail.  An edit caught against the change's base
(its ``base``) is given the session's ``--vllm-base``.  Each run is a child of the fork server
(``tools/forkserver.py``), which imported torch, triton and vLLM once
for every edit this process runs.  Needs vLLM installed and ``--vllm-overlay``
(``tox -e vllm`` passes both); otherwise not applicable.
"""

import importlib.util
import re
from pathlib import Path

import pytest

from fixtures.plugin.profiles import NO_SHRINK
from fixtures.subjects.mutants.vllm_edits import EDITS, EditDoesNotApply, apply_edit, write_edited_overlay
from tools.forkserver import Launcher, Run
from tools.fresh_run import ROOT, VLLM_PRELOAD, pytest_env


@pytest.fixture(scope="module")
def overlay(pytestconfig):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("not applicable: vLLM is not installed here (tox -e vllm installs it)")
    folder = pytestconfig.getoption("--vllm-overlay")
    if not folder:
        pytest.skip("not applicable: no --vllm-overlay given (tox -e vllm gives ../shared/vllm-pr where it exists)")
    return Path(pytestconfig.invocation_params.dir, folder)  # absolute, whatever folder a run starts in


@pytest.fixture(scope="module")
def launcher(overlay, tmp_path_factory):
    """One fork server per process, with vLLM preloaded (fresh processes where a GPU is visible)."""
    env = {**pytest_env("mutants", autoload=False), NO_SHRINK: "1"}
    log = tmp_path_factory.mktemp("forkserver") / "server.log"
    with Launcher(jobs=1, env=env, preload=[VLLM_PRELOAD], server_log=log) as server:
        yield server


@pytest.mark.parametrize("name", sorted(EDITS))
def test_the_edit_is_caught_through_the_real_file(overlay, launcher, tmp_path, name, pytestconfig):
    edited = write_edited_overlay(overlay, tmp_path / "overlay", name)
    args = [*EDITS[name].paths, "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "_hypothesis_pytestplugin"]
    args += ["--subject=vllm", "-x", "-m", "verification", f"--vllm-overlay={edited}", "--baseline=none"]
    args += [f"--claim={cap}" for cap in EDITS[name].claims]
    if EDITS[name].base:
        base = pytestconfig.getoption("--vllm-base")
        if not base:
            pytest.skip(f"not applicable: edit {name!r} is caught against the change's base; no --vllm-base given")
        args.append(f"--vllm-base={Path(pytestconfig.invocation_params.dir, base)}")
    log = tmp_path / "run.log"
    outcomes = []
    env = {**launcher.env, "HYPOTHESIS_PROFILE": "ci"} if EDITS[name].pinned else launcher.env  # pinned examples run
    launcher.run([Run(name, args, env, log, 900, ROOT)], lambda run, outcome: outcomes.append(outcome))
    out = log.read_text(errors="replace")
    assert outcomes[0].returncode == 1, f"edit {name!r} ({EDITS[name].doc}) was not caught:\n{out[-4000:]}"
    assert re.search(EDITS[name].caught_as, out), f"edit {name!r} failed, but not as expected:\n{out[-4000:]}"
    assert f"--vllm-overlay={edited}" in out, "the failure's reproducer must name the edited overlay"
    assert "--baseline=none" in out.split("rerun:", 1)[-1], "the reproducer must repeat the run's --baseline"
    assert f"vLLM overlay {edited}: vllm.v1.attention.backends.mla.rocm_aiter_mla_sparse <- " in out
    assert "[ran]" in out, "the summary must say the edited file is the one that ran"


def test_an_edit_whose_snippet_is_gone_is_an_error():
    edit = EDITS["no_event_wait"]
    with pytest.raises(EditDoesNotApply, match="no_event_wait.*0 times"):
        apply_edit("a file without the snippet\n", edit)
    with pytest.raises(EditDoesNotApply, match="2 times"):
        apply_edit(edit.old * 2, edit)
