"""What a subject owes is held against it, never lowered by the code under review (``fixtures/plugin/fast_paths.py``).

Shown on fresh runs of the suite with external subjects made from the
reference (no vLLM needed): a claimed fast path the subject lacks fails its
properties, named as the fast path lost, whether the subject says it lacks it
or not; an owed capability the suite cannot drive fails its properties as
lost; one whose base the suite cannot drive is not verified (a skip saying
so, an error under ``--strict-gating``).  Then, with vLLM installed, the split
oracle against vLLM's own ``split_decodes_and_prefills``, and the capabilities
the vLLM subjects owe under an overlay read from the release's file.
"""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from oracles.split import SplitRule, split
from tools.fresh_run import repo

HOST_PROPERTY = "tests/gating/test_gating_contract.py::test_cudagraph_padded_batches_follow_the_predicate"
KERNEL_PROPERTY = "tests/differential/test_single_step.py::test_device_kernel_matches_oracle"
NOPE_PROPERTY = "tests/nope/test_zero_copy_query.py::test_path_follows_the_legality_oracle"

SUBJECTS = """
from fixtures.protocol import DEVICE_KERNEL, HOST_PATH, NOPE_FORWARD, NOPE_ZERO_COPY
from fixtures.subjects.reference import ReferenceBuilder, ReferenceSubject


class DeviceOnlyBuilder(ReferenceBuilder):
    def use_host_path(self, batch):
        return False


class DeviceOnly(ReferenceSubject):
    '''Dropped the host path, and says so.'''
    name = "device-only"
    capabilities = ReferenceSubject.capabilities - {HOST_PATH}
    builder_cls = DeviceOnlyBuilder


class Owing(DeviceOnly):
    '''Dropped the host path its release has, and has a launcher the suite cannot drive.'''
    name = "owing"
    capabilities = DeviceOnly.capabilities - {DEVICE_KERNEL}
    capability_notes = {DEVICE_KERNEL: "its launcher takes parameters the suite does not know"}
    owed_capabilities = {HOST_PATH: "which its release has", DEVICE_KERNEL: "which its release has"}


class NoForward(ReferenceSubject):
    name = "no-forward"
    capabilities = ReferenceSubject.capabilities - {NOPE_FORWARD, NOPE_ZERO_COPY}
    capability_notes = {NOPE_FORWARD: "its forward needs a kernel this machine lacks"}
"""


@pytest.fixture
def subjects(run_suite_in):
    run_suite_in.pytester.makepyfile(owing_subjects=SUBJECTS)
    return run_suite_in


def summary_of(run) -> str:
    return run.out[run.out.index("verification summary") :]


def test_a_claimed_fast_path_the_subject_lacks_fails_named_as_lost(subjects):
    """``--claim host_path`` of a subject that dropped it (and says so): the host-path properties
    run all the same, and fail naming the fast path lost; the summary's OWED block says LOST."""
    run = subjects("--subject=owing_subjects:DeviceOnly", "--claim=host_path", repo(HOST_PROPERTY), profile="dev")
    assert run.ret == 1, run.out[-3000:]
    summary = summary_of(run)
    assert re.search(r"  host_path, which the change claims \(--claim\): LOST: \d+ of \d+ properties", summary)
    assert "fast path lost: host_path, which the change claims (--claim)" in run.out, run.out[-3000:]
    assert "--claim=host_path" in run.out, "the reproducer must carry the claim"


def test_what_the_release_has_is_owed_without_a_claim_driven_or_not(subjects):
    """Owed by the release (``owed_capabilities``): a fast path it dropped fails its properties as
    lost; a capability the suite cannot drive in it fails its properties as lost, never "not
    applicable"."""
    run = subjects("--subject=owing_subjects:Owing", repo(HOST_PROPERTY), repo(KERNEL_PROPERTY), profile="dev")
    assert run.ret == 1, run.out[-3000:]
    summary = summary_of(run)
    assert "fast path lost: host_path, which its release has" in run.out, run.out[-3000:]
    assert "capability lost: device_kernel, which its release has (the code under review: its launcher" in run.out
    assert "NOT APPLICABLE" not in summary and "FAILED (2)" in summary, summary
    assert "  device_kernel, which its release has: LOST: the suite cannot drive it here" in summary, summary


def test_a_claim_the_suite_cannot_verify_here_is_an_error_under_strict_gating(subjects):
    """``nope_zero_copy`` claimed of a subject whose forward the suite cannot drive (and that owes
    none): the suite's limit, so the NoPE property skips saying the claim is not verified, never
    "not applicable" and never a failure; a pre-merge gate (``--strict-gating``) refuses it."""
    run = subjects(
        "--subject=owing_subjects:NoForward",
        "--claim=nope_zero_copy",
        "--strict-gating",
        repo(NOPE_PROPERTY),
        profile="dev",
    )
    assert run.ret == 1, run.out[-3000:]
    assert "cannot verify nope_zero_copy, which the change claims (--claim): the suite cannot drive nope_forward" in (
        run.out
    )
    assert "  nope_zero_copy, which the change claims (--claim): NOT VERIFIED" in summary_of(run)


def test_a_claimed_fast_path_the_subject_has_is_kept(subjects):
    run = subjects("--subject=reference", "--claim=host_path", repo(HOST_PROPERTY), profile="dev")
    assert run.ret == 0, run.out[-3000:]
    assert re.search(r"  host_path, which the change claims \(--claim\): found \(\d+ passed\)", summary_of(run))


def test_an_unknown_claim_is_a_usage_error_naming_it(subjects):
    run = subjects("--subject=reference", "--claim=warp_speed", repo(KERNEL_PROPERTY), profile="dev")
    assert run.ret == 4 and "--claim: unknown capabilities ['warp_speed']" in run.out, run.out[-2000:]


# ----- with vLLM -----------------------------------------------------------------------
def needs_vllm():
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("not applicable: vLLM is not installed here (tox -e vllm installs it)")


@given(
    lens=st.lists(st.sampled_from([0, 1, 2, 3, 4, 5, 70, 128, 129, 300]), min_size=1, max_size=12),
    pad=st.integers(0, 8),
    threshold=st.sampled_from([1, 4, 128]),
    uniform=st.booleans(),
)
# a pad request after uniform decodes: all decodes on every release (0.21.0 to 0.30.0 by their all-uniform check)
@example(lens=[1, 0], pad=0, threshold=4, uniform=True)
# a pad request before a prefill: a decode from 0.31.0, the first prefill before it
@example(lens=[2, 0, 3], pad=0, threshold=4, uniform=True)
def test_the_split_oracle_is_vllms_split_decodes_and_prefills(lens, pad, threshold, uniform):
    """:func:`oracles.split.split` gives what vLLM's own function gives, for every threshold and
    uniformity its builders configure, on any query lengths (pad requests and pad tokens included)."""
    needs_vllm()
    import torch

    from fixtures.subjects.vllm.loading.imports import before_vllm_on_cpu

    before_vllm_on_cpu()
    from vllm.v1.attention.backends.utils import split_decodes_and_prefills

    qsl = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    n = int(qsl[-1]) + pad
    max_query_len = max(lens)

    class Metadata:  # the four fields split_decodes_and_prefills reads
        num_reqs, num_actual_tokens, query_start_loc_cpu = len(lens), n, torch.from_numpy(qsl)

    Metadata.max_query_len = max_query_len
    want = split_decodes_and_prefills(Metadata, decode_threshold=threshold, require_uniform=uniform)
    from fixtures.subjects.vllm.loading.imports import installed_vllm_version
    from oracles.split import releases_pads_stay_decodes

    rule = SplitRule(threshold, uniform, releases_pads_stay_decodes(installed_vllm_version()))
    assert split(qsl, n, max_query_len, rule) == tuple(int(v) for v in want[:3])


def test_the_release_owes_nothing_beyond_itself():
    """Without an overlay a vLLM subject is its release: it owes nothing the run could lose."""
    needs_vllm()
    from fixtures.subjects import load_subject

    assert load_subject("vllm").owed_capabilities == {}
