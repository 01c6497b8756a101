"""Oracles for the sparse MLA decode metadata: device path, host path and its legality rule.

All inputs are host arrays or Python ints; all outputs are numpy ``int32``
arrays (the dtype of the buffers under test), computed with ``int64``
intermediates so that no oracle can overflow where the subject must not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INT32_MAX = int(np.iinfo(np.int32).max)


def _as_int64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).reshape(-1)


def query_lens(query_start_loc) -> np.ndarray:
    """Query length of each request, from ``query_start_loc`` (length num_reqs + 1)."""
    return np.diff(_as_int64(query_start_loc))


def sparse_seqlens(query_start_loc, seq_lens, topk: int, num_tokens: int | None = None) -> np.ndarray:
    """Number of keys each query token attends, one entry per token.

    A request with context length ``s`` and query length ``q`` owns ``q`` tokens;
    the token at offset ``o`` sees ``min(s - q + o + 1, topk)`` keys.  A request
    with tokens has ``s >= q`` (``seq_len = num_computed + num_scheduled``); a
    CUDA-graph pad request has ``q == 0`` and owns no token.  ``num_tokens``
    (default ``query_start_loc[-1]``) is the metadata's ``num_actual_tokens``:
    the pad tokens past ``query_start_loc[-1]`` belong to no request and see 0
    keys.
    """
    if topk < 1:
        raise ValueError(f"topk must be >= 1, got {topk}")
    out = []
    for s, q in zip(_as_int64(seq_lens).tolist(), query_lens(query_start_loc).tolist(), strict=True):
        if q and s < q:
            raise ValueError(f"a request of {q} tokens has seq_len {s} < query_len: no scheduler produces it")
        for o in range(q):
            out.append(min(s - q + o + 1, topk))
    scheduled = len(out)
    n = scheduled if num_tokens is None else int(num_tokens)
    if n < scheduled:
        raise ValueError(f"num_tokens {n} is below the {scheduled} tokens of the requests")
    out.extend([0] * (n - scheduled))
    return np.asarray(out, dtype=np.int64).astype(np.int32)


def paged_kv_indptr(token_seqlens, buffer_len: int) -> np.ndarray:
    """The whole persistent ``paged_kv_indptr`` buffer after a step.

    ``[0]`` is 0, ``[1 : n + 1]`` the inclusive cumsum of ``token_seqlens`` and
    ``[n + 1 :]`` repeats ``[n]`` (the tail read by padded CUDA-graph replays).
    ``buffer_len`` is ``M + 1``.
    """
    seqlens = _as_int64(token_seqlens)
    n = seqlens.size
    if buffer_len < n + 1:
        raise ValueError(f"buffer_len {buffer_len} cannot hold {n} tokens plus the leading 0")
    out = np.zeros(buffer_len, dtype=np.int64)
    running = 0
    for i, value in enumerate(seqlens.tolist()):
        running += value
        out[i + 1] = running
    out[n + 1 :] = running
    if running > INT32_MAX:
        raise OverflowError(f"indptr total {running} does not fit int32")
    return out.astype(np.int32)


def host_decode_indptr(seq_lens_upper_bound, topk: int, buffer_len: int) -> np.ndarray:
    """What the host path computes: ``[0, cumsum(min(bound, topk))]`` plus its tail."""
    clamped = np.minimum(_as_int64(seq_lens_upper_bound), topk)
    return paged_kv_indptr(clamped, buffer_len)


def req_id_per_token(query_start_loc) -> np.ndarray:
    """Request index of each scheduled token: ``repeat(arange(num_reqs), query_lens)``
    (``query_start_loc[-1]`` entries; pad tokens past it belong to no request)."""
    lens = query_lens(query_start_loc)
    return np.repeat(np.arange(lens.size, dtype=np.int64), lens).astype(np.int32)


def host_decode_req_ids(num_tokens: int) -> np.ndarray:
    """What the host path writes on a pure-decode step: ``0..n-1`` for all ``n``
    tokens, CUDA-graph pad tokens included (one token per request)."""
    return np.arange(num_tokens, dtype=np.int32)


def qo_indptr(num_tokens: int) -> np.ndarray:
    return np.arange(num_tokens + 1, dtype=np.int32)


def paged_kv_last_page_len(num_tokens: int) -> np.ndarray:
    return np.ones(num_tokens, dtype=np.int32)


@dataclass(frozen=True)
class HostPathClauses:
    """Each clause of the host-path legality predicate, by name."""

    no_speculative_config: bool
    pinned_memory: bool
    upper_bound_present: bool
    no_prefills: bool
    all_tokens_decode: bool
    max_query_len_is_one: bool

    def holds(self) -> bool:
        return all(vars(self).values())

    def failing(self) -> list[str]:
        return [name for name, ok in vars(self).items() if not ok]


def host_path_clauses(
    *,
    speculative: bool,
    pin_memory: bool,
    has_upper_bound: bool,
    num_prefills: int,
    num_decode_tokens: int,
    num_actual_tokens: int,
    max_query_len: int,
) -> HostPathClauses:
    return HostPathClauses(
        no_speculative_config=not speculative,
        pinned_memory=pin_memory,
        upper_bound_present=has_upper_bound,
        no_prefills=num_prefills == 0,
        all_tokens_decode=num_decode_tokens == num_actual_tokens,
        max_query_len_is_one=max_query_len == 1,
    )


def host_path_legal(**kwargs) -> bool:
    """True exactly when a step may take the host path (see ``host_path_clauses``)."""
    return host_path_clauses(**kwargs).holds()
