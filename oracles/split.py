"""The decode/prefill split a builder reports, and the other step fields its forward reads.

vLLM's metadata builders split a step's requests into decodes (first, as the
runner reorders them) and prefills by one rule (vLLM 0.34.0
``vllm/v1/attention/backends/utils.py`` ``split_decodes_and_prefills``), with
their own configuration: the decode threshold (the builder's
``reorder_batch_threshold``, or 1 where it has none) and whether decodes must
be uniform (``require_uniform_decodes``: FlashMLA sparse).  A builder that does
not split routes every request as a decode (:data:`ALL_DECODES`: XPU's, whose
metadata says so).  :func:`split` is that rule over a step's host
``query_start_loc``; :func:`forward_fields` the step fields the sparse MLA
forwards read beside it.  Checked on every step by
``fixtures.harness.step.run_step``; the rule itself against vLLM's function by
``tests/selfvalidation/test_vllm_family.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SplitRule:
    """How a builder splits: ``decode_threshold`` None routes every request as a decode."""

    decode_threshold: int | None
    require_uniform: bool = False
    # with require_uniform, a zero-length request past the first is a CUDA-graph pad request, never the first
    # prefill (vLLM 0.31.0's rule; before it, a request of 0 ended the decodes unless every other request was
    # uniform: releases_pads_stay_decodes)
    pads_stay_decodes: bool = True

    def describe(self) -> str:
        if self.decode_threshold is None:
            return "every request a decode"
        uniform = ", uniform decodes" if self.require_uniform else ""
        return f"decode_threshold {self.decode_threshold}{uniform}"


ALL_DECODES = SplitRule(None)


def split(query_start_loc, num_actual_tokens: int, max_query_len: int, rule: SplitRule) -> tuple[int, int, int]:
    """``(num_decodes, num_prefills, num_decode_tokens)`` of a step under ``rule``.

    Decodes are the leading requests up to the first prefill: a request longer
    than the threshold, or, with ``require_uniform``, one whose query length is
    neither the first request's nor 0 (a CUDA-graph pad request; before vLLM
    0.31.0, ``pads_stay_decodes`` False, a request of 0 too, unless every
    request is of the first's length or 0: all decodes then); a batch whose
    longest query is within the threshold (and, uniform, a threshold of 1) is all
    decodes, its ``num_actual_tokens`` (pad tokens included) decode tokens.
    """
    qsl = np.asarray(query_start_loc, dtype=np.int64)
    num_reqs = qsl.size - 1
    t = rule.decode_threshold
    if t is None or num_reqs == 0:
        return num_reqs, 0, num_actual_tokens
    if max_query_len <= t and (not rule.require_uniform or t <= 1):
        return num_reqs, 0, num_actual_tokens
    q = np.diff(qsl)
    if q[0] > t:
        return 0, num_reqs, 0
    if rule.require_uniform:
        is_prefill = (q != q[0]) & (q != 0)
        if is_prefill.any() and not rule.pads_stay_decodes:
            is_prefill = q != q[0]
    else:
        is_prefill = q > t
    if not is_prefill.any():
        return num_reqs, 0, num_actual_tokens
    first = int(np.argmax(is_prefill))
    return first, num_reqs - first, int(qsl[first])


# The first vLLM release whose split_decodes_and_prefills keeps a zero-length request among uniform decodes
# (``is_prefill = (query_lens != query_lens[0]) & (query_lens != 0)``; 0.21.0 to 0.30.0: ``!= query_lens[0]``
# alone, past a check that a batch of the first's length or 0 throughout is all decodes), read from each
# release's vllm/v1/attention/backends/utils.py.
PADS_STAY_DECODES_SINCE = (0, 31)


def releases_pads_stay_decodes(version: str) -> bool:
    """Whether vLLM ``version``'s split keeps a zero-length request among uniform decodes (:data:`PADS_STAY_DECODES_SINCE`)."""
    parts = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
    return parts >= PADS_STAY_DECODES_SINCE


def forward_fields(query_start_loc, num_actual_tokens: int, max_query_len: int, num_decodes: int) -> dict[str, int]:
    """The step fields a sparse MLA forward reads beside the split: ``num_reqs`` (pad requests
    included), ``num_actual_tokens``, ``max_query_len`` (the real batch's longest query) and
    ``decode_max_query_len`` (the decodes' longest query, 0 without decodes)."""
    qsl = np.asarray(query_start_loc, dtype=np.int64)
    q = np.diff(qsl)
    decode_max = 0
    if num_decodes:
        decode_max = max_query_len if num_decodes == q.size else int(q[:num_decodes].max())
    return {
        "num_reqs": int(q.size),
        "num_actual_tokens": num_actual_tokens,
        "max_query_len": max_query_len,
        "decode_max_query_len": decode_max,
    }
