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
vllm`` runs them), where a run leaves the temp folder as it found it (a fork
server's child and an xdist worker included).
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass

import pytest

from fixtures.outcomes import EXIT_SUITE_ERROR
from tools.forkserver import Launcher, Run
from tools.fresh_run import ROOT, VLLM_PRELOAD, pytest_env, repo

STEP_PROPERTY = "tests/differential/test_single_step.py::test_step_metadata_matches_oracle"
KERNEL_PROPERTY = "tests/differential/test_single_step.py::test_device_kernel_matches_oracle"
# One builder, one step (no examples to generate): the cheapest property that constructs and builds.
ONE_STEP_PROPERTY = "tests/gating/test_gating_contract.py::test_overstated_upper_bound_would_diverge_from_device_path"

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


# ----- through vLLM: overlays made from the installed release's own files ---------------------
@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    """One fork server for the module's vLLM runs, vLLM preloaded (fresh processes where a GPU is visible)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("not applicable: vLLM is not installed here (tox -e vllm installs it)")
    log = tmp_path_factory.mktemp("forkserver") / "server.log"
    temp = tmp_path_factory.mktemp("temp")  # the server's and its children's temp folder
    env = {**pytest_env("dev", autoload=False), "TMPDIR": str(temp)}
    with Launcher(jobs=1, env=env, preload=[VLLM_PRELOAD], server_log=log) as server:
        server.temp = temp
        yield server


@dataclass
class VllmRun:
    ret: int
    out: str


@pytest.fixture
def vllm_run(launcher, tmp_path):
    """``vllm_run(overlay, *paths, extra=())``: the suite against ``--subject vllm`` with ``overlay``."""

    def run(overlay, *paths, extra=()):
        args = [*paths, "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "_hypothesis_pytestplugin"]
        args += ["--subject=vllm", f"--vllm-overlay={overlay}", "--baseline=none", *extra]
        log = tmp_path / f"run-{len(list(tmp_path.glob('run-*.log')))}.log"
        outcomes = []
        launcher.run([Run(log.name, args, launcher.env, log, 600, ROOT)], lambda _, outcome: outcomes.append(outcome))
        return VllmRun(outcomes[0].returncode, log.read_text(errors="replace"))

    return run


@pytest.fixture
def release_overlay(tmp_path):
    """``write(edits)``: an overlay of the installed release's files with ``edits`` (module -> edit)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("not applicable: vLLM is not installed here (tox -e vllm installs it)")
    # vLLM is never imported in this process: only the installed files are read.
    from fixtures.subjects.vllm.loading.imports import write_overlay
    from fixtures.subjects.vllm_rocm_aiter_sparse.backend import BACKEND

    def write(edits):
        return write_overlay(tmp_path / "overlay", {BACKEND if k is None else k: v for k, v in edits.items()})

    return write


def in_builder_init(line: str):
    """An edit of the backend: ``line`` first in the builder's ``__init__`` body (after its signature)."""

    def edit(text: str) -> str:
        from fixtures.subjects.vllm_rocm_aiter_sparse.backend import BUILDER

        at = text.index(f"class {BUILDER}(")
        sig = text.index("def __init__(", at)
        body = text.index("):\n", sig) + 3
        return text[:body] + f"        {line}\n" + text[body:]

    return edit


def in_build(line: str):
    """An edit of the backend: ``line`` first in the builder's ``build`` body."""

    def edit(text: str) -> str:
        from fixtures.subjects.vllm_rocm_aiter_sparse.backend import BUILDER

        at = text.index("    def build(", text.index(f"class {BUILDER}("))
        body = re.compile(r"\)( -> [^:\n]+)?:\n").search(text, at).end()
        return text[:body] + f"        {line}\n" + text[body:]

    return edit


def build_parameter(name: str):
    """An edit of the backend: the builder's ``build`` takes one more required positional parameter."""

    def edit(text: str) -> str:
        from fixtures.subjects.vllm_rocm_aiter_sparse.backend import BUILDER

        at = text.index("    def build(", text.index(f"class {BUILDER}("))
        after = text.index("common_attn_metadata: CommonAttentionMetadata,\n", at)
        after += len("common_attn_metadata: CommonAttentionMetadata,\n")
        return text[:after] + f"        {name},\n" + text[after:]

    return edit


def with_field(cls: str, line: str):
    """An edit of a configuration module: ``line`` added to class ``cls`` before its first method."""

    def edit(text: str) -> str:
        at = text.index(f"class {cls}")
        method = re.compile(r"^    (def |@)", re.M).search(text, at).start()
        return text[:method] + f"    {line}\n\n" + text[method:]

    return edit


def test_a_field_the_installed_config_lacks_is_a_suite_error_never_a_failed_property(vllm_run, release_overlay):
    overlay = release_overlay({None: in_builder_init("_ = vllm_config.scheduler_config.knob_of_a_later_release")})
    run = vllm_run(overlay, ONE_STEP_PROPERTY)
    assert run.ret == EXIT_SUITE_ERROR, run.out[-3000:]
    summary = run.out[run.out.index("verification summary") :]
    assert re.search(r"reads SchedulerConfig\.knob_of_a_later_release, which vLLM \d+\.\d+\.\d+'s", summary), summary
    assert "SUITE ERRORS" in summary and "\nFAILED" not in summary


def litter(temp) -> list[str]:
    """What is in the temp folder ``temp``, but torch's own compile cache (``torchinductor_<user>``: one
    folder per user that torch keeps and reuses across runs, made by importing vLLM)."""
    return sorted(name for name in os.listdir(temp) if not name.startswith("torchinductor_"))


def test_a_run_forked_from_the_fork_server_leaves_the_temp_folder_as_it_found_it(launcher, vllm_run, release_overlay):
    """A fork server's child ends without ``atexit``: what a vLLM run makes in the temp folder (the
    model's folder) is removed at the end of its session all the same, as a mutation run's children."""
    before = litter(launcher.temp)
    run = vllm_run(release_overlay({None: in_build("pass")}), ONE_STEP_PROPERTY)
    assert run.ret == 0, run.out[-3000:]
    assert litter(launcher.temp) == before


def test_a_field_a_release_adds_reaches_the_builder_with_vllms_own_default(
    run_suite_in, release_overlay, tmp_path, monkeypatch
):
    """A fresh process, not the fork server: the server has imported vllm.config, which the overlay replaces.
    Under xdist, whose workers leave the temp folder as they found it."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    overlay = release_overlay(
        {
            "vllm.config.scheduler": with_field("SchedulerConfig", "knob_of_a_later_release: int = 7"),
            None: in_builder_init("assert vllm_config.scheduler_config.knob_of_a_later_release == 7"),
        }
    )
    run = run_suite_in(
        "--subject=vllm",
        f"--vllm-overlay={overlay}",
        "--baseline=none",
        "-n",
        "2",
        repo(ONE_STEP_PROPERTY),
        profile="dev",
    )
    assert run.ret == 0, run.out[-3000:]  # the builder's own assert held: it got vLLM's default
    assert litter(temp) == [], "the run left files in the temp folder"
    assert "vllm.config.scheduler <- " in run.out and "[ran]" in run.out
    assert "FAILED" not in run.out[run.out.index("verification summary") :]


def test_a_stood_in_aiter_reached_by_the_file_is_not_applicable(vllm_run, release_overlay):
    # an AITER function AITER's door does not stand in (docs/aiter.md)
    overlay = release_overlay({None: in_build("import aiter; aiter.mla.mla_prefill_fwd()")})
    run = vllm_run(overlay, ONE_STEP_PROPERTY)
    assert run.ret == 0, run.out[-3000:]
    summary = run.out[run.out.index("verification summary") :]
    assert "NOT APPLICABLE (1)" in summary
    assert re.search(r"not applicable: vLLM [\d.]+ calls AMD AITER's aiter\.mla\.mla_prefill_fwd", summary)


LATER_IMPORT = "from vllm.v1.attention.ops.a_module_of_a_later_release import helper"


def with_top_import(line: str, then):
    """An edit of the backend: ``line`` as its first import, then the edit ``then``."""

    def edit(text: str) -> str:
        at = re.compile(r"^(from (?!__future__)|import )", re.M).search(text).start()
        return then(text[:at] + line + "\n" + text[at:])

    return edit


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (
            in_build(LATER_IMPORT),
            r"rocm_aiter_mla_sparse\.py:\d+ imports vllm\.v1\.attention\.ops\.a_module_of_a_later",
        ),
        (
            build_parameter("draft_state"),
            r"ROCMAiterMLASparseMetadataBuilder\.build\(self, common_prefix_len.*draft_state.*does not take the suite's call",
        ),
        (
            with_top_import("import vllm.envs as envs_of_this_release", in_build("envs_of_this_release.A_LATER_KNOB")),
            r"rocm_aiter_mla_sparse\.py:\d+ reads envs_of_this_release\.A_LATER_KNOB, which vllm\.envs lacks",
        ),
    ],
    ids=["import_inside_build", "build_signature", "attribute_of_an_imported_module"],
)
def test_a_file_for_another_release_is_a_usage_error_naming_what_and_the_version(
    vllm_run, release_overlay, edit, named
):
    overlay = release_overlay({None: edit})
    run = vllm_run(overlay, ONE_STEP_PROPERTY)
    assert run.ret == 4, run.out[-3000:]
    assert re.search(r"targets another vLLM release than the installed \d+\.\d+\.\d+", run.out), run.out[-3000:]
    assert re.search(named, run.out), run.out[-3000:]
    assert "INTERNALERROR" not in run.out and "import chain" not in run.out, "an install hint cannot help here"
    skipped = vllm_run(overlay, ONE_STEP_PROPERTY, extra=["--vllm-overlay-incompatible=skip"])
    assert skipped.ret == 0, skipped.out[-3000:]
    assert "skipped (--vllm-overlay-incompatible skip)" in skipped.out and "did not run" in skipped.out


def test_an_attribute_a_vllm_module_lacks_read_at_run_time_is_a_usage_error(vllm_run, release_overlay):
    """Read through a name the up-front check does not follow (a local import): at run time, and
    the same verdict as the up-front check's (exit status 4), never a failed property."""
    overlay = release_overlay({None: in_build("import vllm.envs as later; later.A_LATER_KNOB")})
    run = vllm_run(overlay, ONE_STEP_PROPERTY)
    assert run.ret == 4, run.out[-3000:]
    assert re.search(r"reads vllm\.envs\.A_LATER_KNOB, which vLLM [\d.]+'s vllm\.envs does not have", run.out)
    assert "\nFAILED" not in run.out[run.out.index("verification summary") :]


def test_an_attribute_the_installed_common_attn_metadata_lacks_is_a_usage_error(vllm_run, release_overlay):
    """A file written for another release reads a field of vLLM's ``CommonAttentionMetadata`` the
    installed class does not have (``seq_lens_cpu``, a property later releases dropped): exit
    status 4, naming the attribute, the class and the installed version, listed under USAGE ERRORS."""
    overlay = release_overlay({None: in_build("_ = common_attn_metadata.a_field_of_another_release")})
    run = vllm_run(overlay, ONE_STEP_PROPERTY)
    assert run.ret == 4, run.out[-3000:]
    summary = run.out[run.out.index("verification summary") :]
    assert re.search(
        r"targets another vLLM release than the installed [\d.]+: it reads \.a_field_of_another_release of a "
        r"vllm\.\S+\.CommonAttentionMetadata, which vLLM [\d.]+'s CommonAttentionMetadata does not have",
        summary,
    ), summary
    assert "USAGE ERRORS" in summary and "\nFAILED" not in summary, summary


def test_an_attribute_init_sets_only_in_a_branch_not_taken_passes_construction(vllm_run, release_overlay):
    """``__init__`` sets ``self._sparse_mla_fwd`` only where an optional kernel is available: not set
    on this machine, and not an incomplete construction."""
    overlay = release_overlay(
        {None: in_builder_init("if getattr(vllm_config, 'an_optional_kernel', None): self._sparse_mla_fwd = 1")}
    )
    run = vllm_run(overlay, ONE_STEP_PROPERTY)
    assert run.ret == 0, run.out[-3000:]
