"""The findings of vLLM releases' own files (docs/findings.md), each pinned where it reproduces: the release matrix
runs these on every release (``tox -m vllm-releases``), where a release that reproduces one its record does not
list, or stops reproducing one it does, fails.  CI's release (0.34.0) reproduces none of them, so CI leaves this
file to the matrix.  Needs vLLM (skips without it)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from fixtures.inputs.batches import make_batch
from fixtures.subjects.vllm_rocm_aiter_sparse.findings import assert_seen_on
from fixtures.subjects.vllm_rocm_aiter_sparse.subject import VllmSubject

pytestmark = pytest.mark.selftest


def released_builder_program(device, batches, topk: int, layer=None):
    """``batches`` through the installed release's builder on the stream model (its device work in a ledger)."""
    from fixtures.harness.device_work import run_program

    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed here (tox -e vllm installs it)")
    subject = VllmSubject()
    m = max(8, *(b.num_actual_tokens for b in batches))
    return subject, run_program(subject, device, batches, m=m, topk=topk, layer=layer)


def finding(key: str):
    from fixtures.subjects.vllm_rocm_aiter_sparse.findings import ALL_FINDINGS

    return next(f for f in ALL_FINDINGS if f.key == key)


def ledger_finding_where_recorded(subject, key: str, clause: str, problem: str | None) -> None:
    """The ledger finding ``key`` reproduces (``clause`` reports ``problem``) exactly on the releases its record
    lists: where it does, the report is the finding's and the installed release is listed; where it does not, the
    release is not listed."""
    known = finding(key)
    if problem is None:
        assert subject.version not in known.seen_on, f"{known.key} no longer reproduces on vLLM {subject.version}"
        return
    assert known.matches(subject, clause=clause, problem=problem), problem
    assert_seen_on(known, subject.version)


def test_the_builder_uploads_req_id_from_pinned_memory_unless_recorded(device):
    """Finding ``rocm-sparse-pageable-upload``, pinned where it reproduces: the device path's upload of
    ``req_id_per_token`` out of pageable memory (a mixed step); every other release uploads it pinned."""
    from oracles import device_work as contract

    subject, steps = released_builder_program(device, [make_batch([1, 2], [3, 4])], topk=4)
    problem = contract.device_uploads_pinned(steps[0].ledger)
    ledger_finding_where_recorded(subject, "rocm-sparse-pageable-upload", "device path uploads", problem)


def test_the_persistent_work_metadata_rebuild_is_synchronised_unless_recorded(device):
    """Finding ``rocm-sparse-persistent-rebuild-unsynchronised``, pinned where it reproduces: a decode step of a layer
    without sinks launches AITER's get_mla_metadata_v1 and returns without a stream synchronisation."""
    from fixtures.inputs.steps import NO_SINKS
    from oracles import device_work as contract

    subject, steps = released_builder_program(device, [make_batch([1, 1], [70, 74])], topk=64, layer=NO_SINKS)
    if not any(op.what == contract.REBUILD for op in steps[0].ledger.ops):
        pytest.skip(f"not applicable: vLLM {subject.version}'s builder keeps no persistent work metadata here")
    problem = contract.rebuild_synced(steps[0].ledger)
    ledger_finding_where_recorded(
        subject, "rocm-sparse-persistent-rebuild-unsynchronised", "persistent rebuild", problem
    )


def test_the_persistent_work_metadata_key_sees_the_context_where_recorded(device):
    """Finding ``rocm-sparse-persistent-key-misses-the-context``, pinned where it reproduces: two requests of two
    query tokens whose contexts grow by one token up to the top-k keep their clamped lengths, so a key of those
    alone hands the second step the first's work metadata (AITER's door names the stale stamp)."""
    from fixtures.inputs.steps import NO_SINKS

    batches = [make_batch([2, 2], [64, 64]), make_batch([2, 2], [65, 65])]
    known = finding("rocm-sparse-persistent-key-misses-the-context")
    try:
        subject, steps = released_builder_program(device, batches, topk=64, layer=NO_SINKS)
    except pytest.skip.Exception as exc:  # the builder's stamp check passed over the finding: it reproduced
        if f"known finding {known.key}:" not in str(exc):
            raise
        assert_seen_on(known, VllmSubject().version)
        return
    assert subject.version not in known.seen_on, f"{known.key} no longer reproduces on vLLM {subject.version}"


@pytest.mark.parametrize("rope", [0, 64], ids=["rope-free", "rope"])
def test_a_bf16_layer_on_a_float16_cache_where_recorded(device, rope):
    """Finding ``rocm-sparse-float-cache-of-another-dtype``, pinned where it reproduces: a bf16 layer on a float16
    cache.  Where the release's VllmConfig builds that cache, its forward hands a kernel an fp16 cache it has none
    for: without a rope part, vLLM's Triton sparse MLA kernel a bf16 query and an fp16 cache (the launcher's
    stand-in refuses what the kernel's dot refuses:
    ``test_the_sparse_kernel_stand_in_refuses_what_vllms_kernel_refuses``); with one, AITER's ASM decode an fp16
    kv_buffer (its door refuses it, as asm_mla.cu does); and the release is listed.  Where the configuration
    refuses the cache, the layer is not applicable in vLLM's words and the release is not listed."""
    from fixtures.harness.forward import new_forward, reproduce_forward_finding
    from fixtures.inputs.forward_cases import ForwardCase
    from fixtures.protocol import NOPE_FORWARD, ForwardNotApplicable

    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed here (tox -e vllm installs it)")
    subject = VllmSubject()
    if NOPE_FORWARD not in subject.capabilities:
        pytest.skip(f"not applicable: {subject.capability_notes[NOPE_FORWARD]}")
    if device.type != "cpu":
        pytest.skip("not applicable: on a GPU the real kernels run (their refusals: the selftests the docstring names)")
    known = finding("rocm-sparse-float-cache-of-another-dtype")
    c = ForwardCase(4, 2, num_heads=16, kv_lora_rank=512, qk_rope_head_dim=rope, model_dtype=torch.bfloat16,
                    ql_dtype=torch.bfloat16, kv_cache_dtype="float16", num_actual_tokens=2)  # fmt: skip
    try:
        new_forward(subject, c, device)
    except ForwardNotApplicable as exc:
        assert "does not build a 'float16' cache" in str(exc), exc  # the release's configuration refuses it
        assert subject.version not in known.seen_on, f"vLLM {subject.version} refuses the layer: {exc}"
        return
    refused = "Triton sparse MLA kernel's launcher" if rope == 0 else "kv_buffer is bf16, the arch's fp8 or bytes"
    source = "rocm_aiter_mla_sparse.py"
    reproduce_forward_finding(subject, device, c, refused, known.key, "the real kernels run", source=source)
