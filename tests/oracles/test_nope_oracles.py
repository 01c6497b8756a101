"""The NoPE oracles against values worked out by hand (not by other code)."""

import math

import pytest
import torch

from oracles import nope as oracle

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
FP8 = getattr(torch, "float8_e4m3fn", None)
needs_fp8 = pytest.mark.skipif(FP8 is None, reason="this torch has no float8_e4m3fn")


@pytest.mark.parametrize(
    "sizes, strides, contiguous",
    [
        ((2, 3, 4), (12, 4, 1), True),  # a plain bmm output [T, H, L]
        ((3, 2, 4), (4, 12, 1), False),  # [H=2, T=3, L] transposed to [T, H, L]
        ((2, 3, 4), (15, 5, 1), False),  # [..., :4] of a 5-wide output
        ((2, 3, 4), (16, 4, 1), False),  # [:, :3] of a 4-head output
        ((2, 3, 4), (24, 8, 2), False),  # every other element
        ((2, 3, 4), (0, 4, 1), False),  # one token expanded to two (stride 0)
        ((2, 3, 4), (12, 0, 1), False),  # one head expanded to three
        ((1, 1, 4), (9, 9, 1), True),  # one token, one head, sliced: still dense
        ((1, 3, 4), (0, 4, 1), True),  # expanded to one token: size-1 dims have any stride
        ((2, 3, 1), (3, 1, 7), True),  # size-1 last dim
        ((0, 3, 4), (4, 12, 1), True),  # empty
        ((), (), True),  # a scalar
    ],
)
def test_is_contiguous(sizes, strides, contiguous):
    assert oracle.is_contiguous(sizes, strides) is contiguous


DENSE = dict(ql_sizes=(2, 3, 4), ql_strides=(12, 4, 1))
TRANSPOSED = dict(ql_sizes=(3, 2, 4), ql_strides=(4, 12, 1))


@pytest.mark.parametrize(
    "rope, layout, ql_dtype, copy_dtype, fp8, has_zero_copy, path",
    [
        (0, DENSE, BF16, BF16, False, True, "zero_copy"),  # all three conditions hold
        (0, DENSE, FP16, FP16, False, True, "zero_copy"),
        (64, DENSE, BF16, BF16, False, True, "copy"),  # rope dim not 0
        (1, DENSE, BF16, BF16, False, True, "copy"),
        (0, TRANSPOSED, BF16, BF16, False, True, "copy"),  # not contiguous
        (0, DENSE, FP32, BF16, False, True, "copy"),  # dtype differs
        (0, DENSE, FP16, BF16, False, True, "copy"),
        (0, DENSE, BF16, FP16, False, True, "copy"),
        (0, DENSE, BF16, BF16, True, True, "fp8"),  # fp8 cache first
        (64, TRANSPOSED, FP32, BF16, True, True, "fp8"),
        (0, DENSE, BF16, BF16, False, False, "copy"),  # an implementation without the zero-copy path
        (0, dict(ql_sizes=(0, 3, 4), ql_strides=(99, 12, 1)), BF16, BF16, False, True, "zero_copy"),  # empty batch
    ],
)
def test_expected_forward_path(rope, layout, ql_dtype, copy_dtype, fp8, has_zero_copy, path):
    got = oracle.expected_forward_path(
        qk_rope_head_dim=rope,
        ql_dtype=ql_dtype,
        copy_dtype=copy_dtype,
        fp8_cache=fp8,
        has_zero_copy=has_zero_copy,
        **layout,
    )
    assert got == path


@pytest.mark.parametrize(
    "ql_dtype, q_pe_dtype, buffer_dtype, want",
    [
        (FP32, BF16, BF16, BF16),  # a persistent buffer: its dtype, whatever the inputs'
        (BF16, BF16, FP16, FP16),
        (BF16, BF16, None, BF16),  # a fresh concatenation: torch's promotion
        (FP32, BF16, None, FP32),
        (FP16, BF16, None, FP32),  # neither input's dtype
    ],
)
def test_copy_query_dtype(ql_dtype, q_pe_dtype, buffer_dtype, want):
    assert oracle.copy_query_dtype(ql_dtype, q_pe_dtype, buffer_dtype) == want
    if buffer_dtype is None:  # the rule is torch.cat's, an empty q_pe (rope dim 0) included
        cat = torch.cat((torch.zeros(1, 1, 2, dtype=ql_dtype), torch.zeros(1, 1, 0, dtype=q_pe_dtype)), dim=-1)
        assert cat.dtype == want


def test_assemble_query_concatenates_into_the_model_dtype():
    # 1 + 3 * 2^-8 lies halfway between bf16 neighbours 1 + 2^-7 and 1 + 2^-6:
    # ties to even gives 1 + 2^-6 = 1.015625; 1 + 2^-8 ties to 1.0.
    ql = torch.tensor([[[1.01171875, 1.00390625]], [[-2.0, 0.5]]], dtype=FP32)
    q_pe = torch.tensor([[[3.0]], [[-0.25]]], dtype=BF16)
    q = oracle.assemble_query(ql, q_pe, BF16)
    assert q.dtype == BF16 and q.shape == (2, 1, 3)
    assert q.float().tolist() == [[[1.015625, 1.0, 3.0]], [[-2.0, 0.5, -0.25]]]


def test_assemble_query_without_rope_is_ql_nope_in_the_model_dtype():
    ql = torch.tensor([[[1.5, -3.0]], [[0.125, 7.0]]], dtype=FP16)
    q = oracle.assemble_query(ql, torch.zeros((2, 1, 0), dtype=FP16), FP16)
    assert q.dtype == FP16 and q.tolist() == [[[1.5, -3.0]], [[0.125, 7.0]]]


@needs_fp8
def test_quantize_fp8_query_scales_rounds_and_saturates():
    # / q_scale 2: 0.5 exact; 250 rounds to 256 (e4m3 step 16 in [128, 256));
    # -500 saturates at -448 (e4m3fn max); 0.15 rounds to 0.15625 (step 1/64 in [1/8, 1/4)).
    ql = torch.tensor([[[1.0, 500.0, -1000.0]]])
    q_pe = torch.tensor([[[0.3]]])
    q = oracle.quantize_fp8_query(ql, q_pe, 2.0, FP8)
    assert q.dtype == FP8
    assert q.float().tolist() == [[[0.5, 256.0, -448.0, 0.15625]]]


def _i32(*values):
    return torch.tensor(values, dtype=torch.int32)


def test_sparse_mla_forward_ragged_tokens_empty_and_padded():
    # kv_lora_rank 2, no rope, one head.  Slots: s0 = [1, 0], s1 = [0, 1], s2 = [2, 2].
    kv = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]], [[2.0, 2.0]]])
    q = torch.tensor([[[math.log(2), 0.0]], [[5.0, 5.0]], [[0.0, 0.0]], [[9.0, 9.0]]])
    # t0 -> {s0, s1}; t1 -> no keys; t2 -> {s2, s2, s0}; t3 is padding (not actual).
    indptr, indices = _i32(0, 2, 2, 5, 5), _i32(0, 1, 2, 2, 0)
    out = oracle.sparse_mla_forward(
        q, kv, indptr, indices, num_actual_tokens=3, scale=1.0, kv_lora_rank=2, out_dtype=FP32
    )
    # t0: scores [ln 2, 0] -> p = [2/3, 1/3] -> 2/3 * s0 + 1/3 * s1.
    # t2: equal scores -> (s2 + s2 + s0) / 3 = [5/3, 4/3].
    expected = torch.tensor([[[2 / 3, 1 / 3]], [[0.0, 0.0]], [[5 / 3, 4 / 3]], [[0.0, 0.0]]])
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    # In bf16, 2/3 = 0.1010101010...b rounds to 0.10101011b = 171/256.
    bf = oracle.sparse_mla_forward(
        q, kv, indptr, indices, num_actual_tokens=3, scale=1.0, kv_lora_rank=2, out_dtype=BF16
    )
    assert bf.dtype == BF16 and bf[0, 0, 0].item() == 171 / 256


def test_sparse_mla_forward_keys_include_rope_values_do_not():
    # kv_lora_rank 1, rope 1: k is the whole row, v its first column.
    kv = torch.tensor([[[1.0, math.log(3)]], [[0.0, 0.0]]])
    q = torch.tensor([[[0.0, 2.0], [2.0, 0.0]]])  # one token, two heads
    out = oracle.sparse_mla_forward(
        q, kv, _i32(0, 2), _i32(0, 1), num_actual_tokens=1, scale=0.5, kv_lora_rank=1, out_dtype=FP32
    )
    # head 0: scores 0.5 * [2 ln 3, 0] = [ln 3, 0] -> p = [3/4, 1/4] -> 3/4 * 1 + 1/4 * 0.
    # head 1: scores 0.5 * [2, 0] = [1, 0] -> p0 = e / (1 + e).
    assert out.shape == (1, 2, 1)
    torch.testing.assert_close(out, torch.tensor([[[0.75], [math.e / (1 + math.e)]]]), atol=1e-6, rtol=0)


@needs_fp8
def test_sparse_mla_forward_dequantises_fp8_query_and_cache():
    # Stored q = [1, 0] with q_scale 2 -> [2, 0]; stored k = [1, 0] with kv_scale 0.5 -> [0.5, 0].
    q = torch.tensor([[[1.0, 0.0]]]).to(FP8)
    kv = torch.tensor([[[1.0, 0.0]], [[0.0, 0.0]]]).to(FP8)
    out = oracle.sparse_mla_forward(
        q, kv, _i32(0, 2), _i32(0, 1), num_actual_tokens=1, scale=1.0, kv_lora_rank=2, out_dtype=FP32,
        q_scale=2.0, kv_scale=0.5,
    )  # fmt: skip
    # scores [2 * 0.5, 0] = [1, 0] -> p0 = e / (1 + e); v = [0.5, 0] and [0, 0].
    torch.testing.assert_close(out, torch.tensor([[[0.5 * math.e / (1 + math.e), 0.0]]]), atol=1e-6, rtol=0)


def test_sparse_mla_forward_rejects_a_cache_of_another_head_size():
    with pytest.raises(ValueError, match="head size"):
        oracle.sparse_mla_forward(
            torch.zeros(1, 1, 4), torch.zeros(2, 1, 3), _i32(0, 1), _i32(0), num_actual_tokens=1, scale=1.0,
            kv_lora_rank=2, out_dtype=FP32,
        )  # fmt: skip


@pytest.mark.parametrize(
    "dtype, kv_dtype",
    [(BF16, BF16), (FP16, FP16), (FP32, FP32), (FP16, BF16), (BF16, FP16)] + ([(BF16, FP8)] if FP8 else []),
)
def test_one_tolerance_table_covers_every_forward_dtype(dtype, kv_dtype):
    """Every output dtype over every cache dtype has a tolerance; a cache of another float than the output
    is held to the looser of the two (no tighter than either alone)."""
    atol, rtol = oracle.forward_tolerance(dtype, kv_dtype)
    assert 0 < atol < 0.1 and 0 < rtol < 0.1
    if kv_dtype.itemsize > 1:
        for alone in (dtype, kv_dtype):
            assert (atol, rtol) >= oracle.forward_tolerance(alone, alone)


@pytest.mark.parametrize("tokens, heads, keys", [(3, 128, 2048), (1100, 3, 16)], ids=["wide", "long"])
def test_sparse_mla_forward_at_vllms_sizes_is_each_tokens_softmax(tokens, heads, keys):
    """Past the plain products (bmm, in chunks of tokens): each token's output is the softmax of its own
    keys' scores times their values, computed here one token at a time in float64."""
    gen = torch.Generator().manual_seed(5)
    lora, rope, slots = 16, 4, keys + 7
    q = torch.randn((tokens, heads, lora + rope), generator=gen)
    kv = torch.randn((slots, 1, lora + rope), generator=gen)
    lens = torch.randint(0, keys + 1, (tokens,), generator=gen)
    indptr = torch.zeros(tokens + 1, dtype=torch.int32)
    indptr[1:] = lens.cumsum(0)
    indices = torch.randint(0, slots, (int(indptr[-1]),), generator=gen, dtype=torch.int32)
    out = oracle.sparse_mla_forward(
        q, kv, indptr, indices, num_actual_tokens=tokens, scale=0.3, kv_lora_rank=lora, out_dtype=torch.float32
    )
    for t in range(0, tokens, max(1, tokens // 7)):
        rows = kv[indices[indptr[t] : indptr[t + 1]].long(), 0].double()
        if not len(rows):
            assert not out[t].any()
            continue
        p = torch.softmax(q[t].double() @ rows.T * 0.3, dim=-1)
        torch.testing.assert_close(out[t].double(), p @ rows[:, :lora], atol=1e-5, rtol=1e-5)
