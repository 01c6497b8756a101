"""AITER's door (fixtures/subjects/vllm_rocm_aiter_sparse/aiter_door.py): each stand-in refuses what AITER states it refuses,
naming the precondition and where AITER states it, and a decode handed another step's work metadata fails
as stale.  The stand-ins need no vLLM: these run in every env."""

from __future__ import annotations

import pytest
import torch

from fixtures.protocol import NotApplicableHere
from fixtures.subjects.vllm_rocm_aiter_sparse import aiter_door
from fixtures.subjects.vllm_rocm_aiter_sparse.aiter_door import AiterRejects

BF16 = torch.bfloat16
HEADS, D, V = 16, 576, 512


def decode_args(tokens: int = 3, heads: int = HEADS, keys: int = 4, dtype=BF16):
    q = torch.randn(tokens, heads, D).to(dtype)
    kv = torch.randn(32, 1, 1, D).to(dtype)
    o = torch.empty(tokens, heads, V, dtype=BF16)
    qo = torch.arange(tokens + 1, dtype=torch.int32)
    kv_indptr = torch.arange(0, (tokens + 1) * keys, keys, dtype=torch.int32)
    kv_indices = torch.randint(0, 32, (tokens * keys,), dtype=torch.int32)
    last = torch.ones(tokens, dtype=torch.int32)
    return q, kv, o, qo, kv_indptr, kv_indices, last


def work_buffers(tokens: int, heads: int = HEADS):
    sizes = aiter_door.get_mla_metadata_info_v1(tokens, 1, heads, BF16, BF16, is_sparse=True)
    return [torch.empty(size, dtype=dtype) for size, dtype in sizes]


def build(qo, kv_indptr, last, buffers, heads: int = HEADS) -> None:
    meta, indptr, info, reduce_indptr, final_map, partial_map = buffers
    aiter_door.get_mla_metadata_v1(
        qo, kv_indptr, last, heads, 1, True, meta, info, indptr, reduce_indptr, final_map, partial_map,
        page_size=1, kv_granularity=16, max_seqlen_qo=1, uni_seqlen_qo=1,
    )  # fmt: skip


def persistent(buffers) -> dict:
    names = ("work_meta_data", "work_indptr", "work_info_set", "reduce_indptr", "reduce_final_map",
             "reduce_partial_map")  # fmt: skip
    return dict(zip(names, buffers, strict=True))


def test_every_precondition_cites_aiters_source():
    for row in aiter_door.PRECONDITIONS:
        assert "ROCm/aiter" in row.where, f"{row.function}: {row.what!r} cites no AITER source: {row.where!r}"


def test_a_decode_computes_the_reference_and_nan_for_a_row_without_keys():
    q, kv, o, qo, kv_indptr, kv_indices, last = decode_args()
    kv_indptr[2:] -= 4  # token 1 attends no key
    kv_indices = kv_indices[:8]
    _, lse = aiter_door.mla_decode_fwd(q, kv, o, qo, kv_indptr, kv_indices, last, 1, sm_scale=0.1, return_lse=True)
    rows = kv.reshape(-1, D).float()
    keys = rows[kv_indices[:4].long()]
    scores = q[0].float() @ keys.T * 0.1
    want = torch.softmax(scores, -1) @ keys[:, :V]
    torch.testing.assert_close(o[0].float(), want, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse[0], torch.logsumexp(scores, -1))
    assert torch.isnan(o[1].float()).all() and torch.isneginf(lse[1]).all()


def test_a_head_count_without_a_kernel_is_refused_naming_aiters_line():
    q, kv, o, qo, kv_indptr, kv_indices, last = decode_args(heads=48)  # no split-KV kernel for 48 heads on gfx950
    with pytest.raises(AiterRejects, match=r"a kernel exists for the head count.*ROCm/aiter .*asm_mla\.cu"):
        aiter_door.mla_decode_fwd(q, kv, o, qo, kv_indptr, kv_indices, last, 1)
    buffers = work_buffers(3, 48)  # the persistent path folds 48 heads onto the 16-head kernel
    build(qo, kv_indptr, last, buffers, 48)
    aiter_door.mla_decode_fwd(q, kv, o, qo, kv_indptr, kv_indices, last, 1, **persistent(buffers))


def test_an_fp16_query_is_refused_and_so_is_an_fp16_cache():
    """AITER's ASM decode has no fp16 kernel: it checks the query's dtype, then the cache's (asm_mla.cu)."""
    q, kv, o, qo, kv_indptr, kv_indices, last = decode_args(dtype=torch.float16)
    with pytest.raises(AiterRejects, match="q is bf16 or the arch's fp8"):
        aiter_door.mla_decode_fwd(q, kv, o, qo, kv_indptr, kv_indices, last, 1)
    with pytest.raises(AiterRejects, match="q is bf16 or the arch's fp8"):
        aiter_door.mla_decode_fwd(q, kv.bfloat16(), o, qo, kv_indptr, kv_indices, last, 1)
    with pytest.raises(AiterRejects, match="kv_buffer is bf16, the arch's fp8 or bytes"):
        aiter_door.mla_decode_fwd(q.bfloat16(), kv, o, qo, kv_indptr, kv_indices, last, 1)


def test_work_metadata_built_for_another_step_is_stale_and_a_rebuild_is_fresh():
    q, kv, o, qo, kv_indptr, kv_indices, last = decode_args()
    buffers = work_buffers(3)
    build(qo, kv_indptr, last, buffers)
    aiter_door.mla_decode_fwd(q, kv, o, qo, kv_indptr, kv_indices, last, 1, **persistent(buffers))
    longer = kv_indptr.clone()
    longer[1:] += torch.arange(1, 4, dtype=torch.int32)  # the next step: every token one key more
    indices = torch.randint(0, 32, (int(longer[-1]),), dtype=torch.int32)
    with pytest.raises(AiterRejects, match=r"stale work metadata.*kv_indptr: built for"):
        aiter_door.mla_decode_fwd(q, kv, o, qo, longer, indices, last, 1, **persistent(buffers))
    build(qo, longer, last, buffers)  # the rebuild the step needed
    aiter_door.mla_decode_fwd(q, kv, o, qo, longer, indices, last, 1, **persistent(buffers))


def test_work_metadata_never_built_is_refused():
    q, kv, o, qo, kv_indptr, kv_indices, last = decode_args()
    with pytest.raises(AiterRejects, match="never built"):
        aiter_door.mla_decode_fwd(q, kv, o, qo, kv_indptr, kv_indices, last, 1, **persistent(work_buffers(3)))


def test_on_an_mi300x_the_decode_reads_gfx942s_kernel_table_and_gfx950s_alone_is_not_applicable():
    """On gfx942 a bf16 decode of 64 heads a query exists (its table's (64, any) row), of 8 heads and 2 queries
    a batch not (gfx950's table has it); an fp8 query needs what the door holds of gfx950 only, so it is not
    applicable there, never a rejection of vLLM's."""
    eight_by_two = dict(q=torch.empty(4, 8, D, dtype=BF16), kv_buffer=torch.empty(4, 1, 1, D, dtype=BF16),
                        max_seqlen_q=2)  # fmt: skip
    assert aiter_door._decode_heads_ok(eight_by_two)
    q, kv, o, qo, kv_indptr, kv_indices, last = decode_args()
    with aiter_door.on_architecture("gfx942"):
        assert aiter_door.current_arch() == "gfx942"
        assert not aiter_door._decode_heads_ok(eight_by_two)
        q64, kv64, o64, *rest = decode_args(heads=64)
        aiter_door.mla_decode_fwd(q64, kv64, o64, *rest, 1)
        with pytest.raises(NotApplicableHere, match="fp8 type and the persistent kernels of gfx950 only"):
            aiter_door.mla_decode_fwd(q.to(aiter_door.FP8), kv.to(aiter_door.FP8), o, qo, kv_indptr, kv_indices,
                                      last, 1, q_scale=torch.ones(1), kv_scale=torch.ones(1))  # fmt: skip
    assert aiter_door.current_arch() == aiter_door.ARCH
    with pytest.raises(ValueError, match="not 'gfx90a'"), aiter_door.on_architecture("gfx90a"):
        pass
