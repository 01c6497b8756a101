"""The metadata oracles against values worked out by hand (not by other code)."""

import numpy as np
import pytest

from oracles import metadata as oracle

CHANGE_SEQ_LENS = [1, 5, 63, 64, 65, 2047, 2048, 2049, 131072]


def qsl(*query_lens):
    return np.concatenate([[0], np.cumsum(query_lens)]).astype(np.int32)


@pytest.mark.parametrize(
    "topk, clamped, cumsum",
    [
        (
            2048,
            [1, 5, 63, 64, 65, 2047, 2048, 2048, 2048],
            [1, 6, 69, 133, 198, 2245, 4293, 6341, 8389],
        ),
        (64, [1, 5, 63, 64, 64, 64, 64, 64, 64], [1, 6, 69, 133, 197, 261, 325, 389, 453]),
    ],
)
def test_change_case_pure_decode(topk, clamped, cumsum):
    n = len(CHANGE_SEQ_LENS)
    seqlens = oracle.sparse_seqlens(qsl(*[1] * n), CHANGE_SEQ_LENS, topk)
    assert seqlens.dtype == np.int32
    assert seqlens.tolist() == clamped
    m = 12
    indptr = oracle.paged_kv_indptr(seqlens, m + 1)
    assert indptr.dtype == np.int32
    assert indptr.tolist() == [0] + cumsum + [cumsum[-1]] * (m - n)
    host = oracle.host_decode_indptr(CHANGE_SEQ_LENS, topk, m + 1)
    assert host.tolist() == indptr.tolist()


def test_mixed_batch_with_query_longer_than_kernel_block():
    # Request 0: decode, s=10.  Request 1: prefill of 70 tokens with s=100, so
    # token o sees 100 - 70 + o + 1 = 31 + o keys, clamped at topk=64 from o=33.
    seqlens = oracle.sparse_seqlens(qsl(1, 70), [10, 100], 64)
    assert seqlens[0] == 10
    assert seqlens[1:35].tolist() == list(range(31, 65))
    assert seqlens[35:].tolist() == [64] * 36
    indptr = oracle.paged_kv_indptr(seqlens, 72)
    # 10 + (31 + ... + 64) + 36 * 64 = 10 + 1615 + 2304
    assert indptr[71] == 3929
    assert indptr[0] == 0 and indptr[1] == 10 and indptr[2] == 41


def test_cudagraph_pad_tokens_give_zero():
    # Two real decodes padded to a graph of 5 tokens: three pad requests (query_len 0,
    # seq_len 0) own no token; the pad tokens 2..4 (past query_start_loc[-1]) see 0 keys.
    seqlens = oracle.sparse_seqlens(qsl(1, 1, 0, 0, 0), [7, 2, 0, 0, 0], 4, num_tokens=5)
    assert seqlens.tolist() == [4, 2, 0, 0, 0]
    assert oracle.paged_kv_indptr(seqlens, 8).tolist() == [0, 4, 6, 6, 6, 6, 6, 6]
    assert oracle.req_id_per_token(qsl(1, 1, 0, 0, 0)).tolist() == [0, 1]
    assert oracle.host_decode_req_ids(5).tolist() == [0, 1, 2, 3, 4]
    # A speculative uniform decode (4 tokens) padded to 8: tokens 4..7 are pad tokens.
    assert oracle.sparse_seqlens(qsl(4, 0), [6, 0], 4, num_tokens=8).tolist() == [3, 4, 4, 4, 0, 0, 0, 0]


def test_a_request_with_tokens_and_no_context_is_refused():
    with pytest.raises(ValueError, match="seq_len 0 < query_len"):
        oracle.sparse_seqlens(qsl(3, 1), [0, 7], 4)
    with pytest.raises(ValueError, match="num_tokens 1 is below the 2 tokens"):
        oracle.sparse_seqlens(qsl(1, 1), [3, 3], 4, num_tokens=1)


def test_prefill_from_empty_context_counts_up_to_topk():
    # s == q: a prompt with no cached context; token o sees o + 1 keys.
    assert oracle.sparse_seqlens(qsl(5), [5], 3).tolist() == [1, 2, 3, 3, 3]


def test_int32_limit_context():
    big = 2**31 - 1
    assert oracle.sparse_seqlens(qsl(1, 2), [big, big], 4096).tolist() == [4096, 4096, 4096]
    assert oracle.sparse_seqlens(qsl(1), [big], 1).tolist() == [1]


def test_empty_batch_indptr_is_all_zero():
    assert oracle.paged_kv_indptr([], 4).tolist() == [0, 0, 0, 0]
    assert oracle.sparse_seqlens(qsl(), [], 7).tolist() == []


def test_indptr_tail_repeats_last_value():
    assert oracle.paged_kv_indptr([2, 0, 3], 7).tolist() == [0, 2, 2, 5, 5, 5, 5]
    assert oracle.paged_kv_indptr([2, 0, 3], 4).tolist() == [0, 2, 2, 5]


def test_indptr_rejects_too_small_buffer_and_overflow():
    with pytest.raises(ValueError, match="cannot hold 3 tokens"):
        oracle.paged_kv_indptr([1, 1, 1], 3)
    with pytest.raises(OverflowError):
        oracle.paged_kv_indptr([2**31 - 1, 1], 3)


def test_req_id_per_token():
    assert oracle.req_id_per_token(qsl(1, 3, 0, 2)).tolist() == [0, 1, 1, 1, 3, 3]
    assert oracle.req_id_per_token(qsl(1, 1, 1, 1)).tolist() == [0, 1, 2, 3]
    assert oracle.req_id_per_token(qsl()).tolist() == []
    assert oracle.req_id_per_token(qsl(1)).dtype == np.int32


def test_constant_buffers():
    assert oracle.qo_indptr(3).tolist() == [0, 1, 2, 3]
    assert oracle.paged_kv_last_page_len(2).tolist() == [1, 1]


LEGAL = dict(
    speculative=False,
    pin_memory=True,
    has_upper_bound=True,
    num_prefills=0,
    num_decode_tokens=4,
    num_actual_tokens=4,
    max_query_len=1,
)


def test_host_path_legal_when_every_clause_holds():
    assert oracle.host_path_legal(**LEGAL)
    assert oracle.host_path_clauses(**LEGAL).failing() == []


@pytest.mark.parametrize(
    "change, clause",
    [
        ({"speculative": True}, "no_speculative_config"),
        ({"pin_memory": False}, "pinned_memory"),
        ({"has_upper_bound": False}, "upper_bound_present"),
        ({"num_prefills": 1}, "no_prefills"),
        ({"num_decode_tokens": 3}, "all_tokens_decode"),
        ({"max_query_len": 2}, "max_query_len_is_one"),
        ({"max_query_len": 0}, "max_query_len_is_one"),
    ],
)
def test_each_clause_alone_makes_host_path_illegal(change, clause):
    clauses = oracle.host_path_clauses(**{**LEGAL, **change})
    assert not clauses.holds()
    assert clauses.failing() == [clause]


def test_topk_must_be_positive():
    with pytest.raises(ValueError, match="topk"):
        oracle.sparse_seqlens(qsl(1), [1], 0)
