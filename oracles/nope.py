"""Oracles for the NoPE zero-copy query, in plain torch.

* :func:`expected_forward_path`: which branch ``forward_mqa`` must take.
* :func:`copy_query_dtype`: the dtype of the copy path's query.
* :func:`is_contiguous`: row-major contiguity from sizes and strides alone,
  written out here rather than taken from the tensor under test.
* :func:`assemble_query`: the query the copy path builds (concatenation into
  the model dtype).
* :func:`quantize_fp8_query`: the query the fp8 branch builds.
* :func:`sparse_mla_forward`: the sparse MLA attention over ragged KV slot
  indices, fp32 accumulation, ``v`` the first ``kv_lora_rank`` columns.
* :data:`FORWARD_TOLERANCES`: the one table of output tolerances, per dtype.

No device code: everything runs in torch on whatever device the tensors are.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def is_contiguous(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """Row-major contiguity: every dimension of size > 1 has the stride of a dense layout.

    An empty tensor is contiguous; dimensions of size 1 may have any stride
    (torch's rule too: such a tensor's elements still lie densely in order).
    """
    if any(s == 0 for s in sizes):
        return True
    expected = 1
    for size, stride in zip(reversed(list(sizes)), reversed(list(strides)), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def copy_query_dtype(ql_dtype: torch.dtype, q_pe_dtype: torch.dtype, buffer_dtype: torch.dtype | None) -> torch.dtype:
    """The dtype of the query the copy path builds: the persistent buffer's, where the forward
    copies into one (``q_concat_buffer``); else a fresh concatenation's, by torch's type promotion
    (what ``torch.cat((ql_nope, q_pe), -1)`` gives)."""
    return buffer_dtype if buffer_dtype is not None else torch.promote_types(ql_dtype, q_pe_dtype)


def expected_forward_path(
    *,
    qk_rope_head_dim: int,
    ql_sizes: Sequence[int],
    ql_strides: Sequence[int],
    ql_dtype: torch.dtype,
    copy_dtype: torch.dtype,
    fp8_cache: bool,
    has_zero_copy: bool = True,
) -> str:
    """``"fp8"``, ``"zero_copy"`` or ``"copy"``: the branch ``forward_mqa`` must take.

    fp8 caches take the fused concat-and-quantise branch before either other.
    Zero-copy exactly when the rope dim is 0, ``ql_nope`` is contiguous and its
    dtype is the copy path's query's (:func:`copy_query_dtype`; so ``ql_nope``
    is the very query the copy would build), and the implementation has the
    zero-copy path.
    """
    if fp8_cache:
        return "fp8"
    if has_zero_copy and qk_rope_head_dim == 0 and is_contiguous(ql_sizes, ql_strides) and ql_dtype == copy_dtype:
        return "zero_copy"
    return "copy"


def assemble_query(ql_nope: torch.Tensor, q_pe: torch.Tensor, model_dtype: torch.dtype) -> torch.Tensor:
    """The copy path's query: ``[ql_nope | q_pe]`` along the last dim, in ``model_dtype`` (the copy
    path's dtype, :func:`copy_query_dtype`)."""
    t, h, lora = ql_nope.shape
    rope = q_pe.shape[-1]
    out = torch.empty((t, h, lora + rope), dtype=model_dtype, device=ql_nope.device)
    out[..., :lora] = ql_nope.to(model_dtype)
    out[..., lora:] = q_pe.to(model_dtype)
    return out


def fp8_max(fp8_dtype: torch.dtype) -> float:
    return float(torch.finfo(fp8_dtype).max)


def quantize_fp8_query(
    ql_nope: torch.Tensor, q_pe: torch.Tensor, q_scale: float, fp8_dtype: torch.dtype
) -> torch.Tensor:
    """The fp8 branch's query: ``[ql_nope | q_pe] / q_scale``, saturated, cast to fp8."""
    full = torch.cat((ql_nope.float(), q_pe.float()), dim=-1) / q_scale
    limit = fp8_max(fp8_dtype)
    return full.clamp(-limit, limit).to(fp8_dtype)


def sparse_mla_forward(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    paged_kv_indptr: torch.Tensor,
    paged_kv_indices: torch.Tensor,
    *,
    num_actual_tokens: int,
    scale: float,
    kv_lora_rank: int,
    out_dtype: torch.dtype,
    q_scale: float = 1.0,
    kv_scale: float = 1.0,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sparse MLA (MQA over one latent head): ``softmax(q . k * scale) . v`` per token and head.

    ``q [T, H, D]``; ``kv_cache [slots, 1, D]`` with ``D = kv_lora_rank + rope``;
    token ``t < num_actual_tokens`` attends the slots
    ``paged_kv_indices[indptr[t] : indptr[t+1]]``; ``k`` is a slot's whole row,
    ``v`` its first ``kv_lora_rank`` columns.  fp8 inputs are dequantised by
    ``q_scale`` / ``kv_scale``.  ``sinks``: one logit a head, in each softmax's
    denominator only.  Accumulates in fp32; a token with no keys, and
    every row past ``num_actual_tokens``, gives zeros.  Returns
    ``[T, H, kv_lora_rank]`` in ``out_dtype``.
    """
    t, h, d = q.shape
    if kv_cache.shape[1:] != (1, d):
        raise ValueError(f"kv_cache shape {tuple(kv_cache.shape)} does not match head size {d}")
    qf = q.float() * (q_scale if q.element_size() == 1 else 1.0)
    kv = kv_cache[:, 0, :].float() * (kv_scale if kv_cache.element_size() == 1 else 1.0)
    out, _ = attention_with_lse(
        qf, kv, paged_kv_indptr, paged_kv_indices, num_actual_tokens, scale, kv_lora_rank, sinks
    )
    return out.to(out_dtype)


def attention_with_lse(
    qf: torch.Tensor,
    kv: torch.Tensor,
    indptr: torch.Tensor,
    indices: torch.Tensor,
    num_tokens: int,
    scale: float,
    kv_lora_rank: int,
    sinks: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`sparse_mla_forward`'s arithmetic on dequantised fp32 ``qf [T, H, D]`` and key rows ``kv [slots,
    D]``, with its natural-log LSE, and optionally attention sinks (one logit a head, in the softmax's
    denominator only).  Returns ``(out [T, H, kv_lora_rank], lse [T, H])`` in fp32; a token without keys and
    every row past ``num_tokens``: zeros and an LSE of ``-inf`` (the sink's logit, with sinks)."""
    t, h, d = qf.shape
    n = num_tokens
    out = torch.zeros((t, h, kv_lora_rank), dtype=torch.float32, device=qf.device)
    sink = None if sinks is None else sinks.float().reshape(1, h, 1)
    lse = torch.full((t, h), float("-inf"), device=qf.device)
    if sink is not None:
        lse[:n] = sink.reshape(1, h)
    # Token i's keys, padded to the longest: slot j < lens[i] is
    # indices[indptr[i] + j]; padding slots are masked out.
    starts = indptr[:n].long()
    lens = indptr[1 : n + 1].long() - starts
    width = int(lens.max()) if n else 0
    if width == 0:
        return out, lse
    j = torch.arange(width, device=qf.device)
    indices = indices.long()
    # Tokens in chunks whose products fit in memory (a forward as vLLM runs them: thousands of tokens, or
    # 2048 keys a token on 128 heads of 576); small products plainly (no bmm: on tensors this small its CPU
    # thread pool costs far more than the arithmetic), large ones by bmm.
    chunk = max(1, _PRODUCT_ELEMENTS // max(1, h * width * d))
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        plain = (hi - lo) * h * width * d <= _PLAIN_ELEMENTS
        valid = j[None, :] < lens[lo:hi, None]  # [c, width]
        pos = torch.where(valid, starts[lo:hi, None] + j[None, :], 0)
        keys = kv[indices[pos]]  # [c, width, D]
        if plain:
            scores = (qf[lo:hi, :, None, :] * keys[:, None, :, :]).sum(-1) * scale  # [c, H, width]
        else:
            scores = torch.bmm(qf[lo:hi], keys.transpose(1, 2)) * scale
        scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
        row_max = scores.amax(-1, keepdim=True)
        if sink is not None:
            row_max = torch.maximum(row_max, sink)
        row_max = row_max.clamp(min=torch.finfo(torch.float32).min)  # -inf rows: no keys
        weights = (scores - row_max).exp()  # exp(-inf) = 0 for the padding slots
        total = weights.sum(-1, keepdim=True)
        if sink is not None:
            total = total + (sink - row_max).exp()
        p = weights / torch.where(total > 0, total, 1.0)  # a token without keys gets weights 0
        lse[lo:hi] = (row_max + total.log()).squeeze(-1)  # log 0 = -inf: no keys, no sink
        if plain:
            out[lo:hi] = (p[..., None] * keys[:, None, :, :kv_lora_rank]).sum(2)  # [c, H, kv_lora_rank]
        else:
            out[lo:hi] = torch.bmm(p, keys[:, :, :kv_lora_rank])
    return out, lse


# Element counts of the score products: up to _PLAIN_ELEMENTS plainly, else by bmm in chunks of _PRODUCT_ELEMENTS.
_PLAIN_ELEMENTS = 1 << 22
_PRODUCT_ELEMENTS = 1 << 24


# (atol, rtol) for a forward's output against sparse_mla_forward, by the dtype
# the attention computes in: the model dtype, or "fp8" for the fp8 branch
# (query and cache quantised identically on both sides; the rest is summation
# order and the output's rounding).
FORWARD_TOLERANCES: dict = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
    "fp8": (6e-2, 6e-2),
}


def forward_tolerance(out_dtype: torch.dtype, kv_dtype: torch.dtype) -> tuple[float, float]:
    """The tolerance of a forward's output in ``out_dtype`` over a cache storing ``kv_dtype``: an fp8 cache's
    (one byte an element), else the looser of the two dtypes' (a bf16 cache under an fp16 model: bf16's)."""
    if kv_dtype.itemsize == 1:
        return FORWARD_TOLERANCES["fp8"]
    return max(FORWARD_TOLERANCES[out_dtype], FORWARD_TOLERANCES[kv_dtype])
