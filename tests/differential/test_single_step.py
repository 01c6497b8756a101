"""Differential properties of one build step: subject vs oracle, host vs device path.

Every step runs through ``fixtures.harness.step.run_step``, which also checks the
sentinel guard band past each persistent buffer (out-of-bounds writes fail).
On CPU, ``pin_memory=True`` stands in for pinned memory (CPU torch has none):
the host path runs its real numpy code and its upload is a synchronous copy.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, note

from fixtures.harness import scale
from fixtures.harness.baseline import unpaired
from fixtures.harness.compare import assert_fixed_equal, assert_int32_equal, compare_state
from fixtures.harness.contract import exposed_buffers, step_contract
from fixtures.harness.step import count_triton_launches, new_config, run_step
from fixtures.inputs.batches import make_batch
from fixtures.inputs.strategies import BATCH_KINDS, Case, cases, pinned
from fixtures.models.runtime import GuardedAllocator
from fixtures.protocol import (
    DEVICE_KERNEL,
    DEVICE_PATH,
    HOST_PATH,
    PAGED_KV_METADATA,
    buffer_lengths,
    decode_threshold_for,
)
from oracles import metadata as oracle
from oracles.metadata import INT32_MAX
from oracles.step import expected_path, expected_seqlens, expected_state

CHANGE_SEQ_LENS = [1, 5, 63, 64, 65, 2047, 2048, 2049, 131072]
SPEC = decode_threshold_for(True)  # a speculative config's decode threshold


def decode_case(seq_lens, topk, m=None, **kw):
    batch = make_batch([1] * len(seq_lens), seq_lens, **kw)
    return Case("pure_decode", topk, m or max(len(seq_lens), 1) + 3, batch)


# The change's own case, the kernel block boundary, CUDA-graph padding (as the
# GPU model runner pads a uniform decode batch: pad requests of query_len 0 and
# seq_len 0 after the real ones, num_actual_tokens the graph size) and the int32 limit.
PINNED = [
    decode_case(CHANGE_SEQ_LENS, 2048),
    decode_case(CHANGE_SEQ_LENS, 64),
    decode_case([], 5, m=1),
    decode_case([7], 1, m=1),
    Case("padded", 4096, 6, make_batch([1, 1], [INT32_MAX, 1], cudagraph_pad=3)),
    Case("mixed", 64, 80, make_batch([1, 70], [10, 100])),
    Case("prefill", 3, 130, make_batch([129], [129])),
    Case("padded", 9, 6, make_batch([1], [9], cudagraph_pad=3)),
    Case("padded", 9, 3, make_batch([1], [9], cudagraph_pad=3)),
    Case("multi_token_decode", 5, 8, make_batch([3, 1, 2], [3, 9, 40], decode_threshold=SPEC), True),
    Case("multi_token_decode", 5, 8, make_batch([4, 2], [4, 6], decode_threshold=SPEC), True),
    Case("multi_token_decode", 5, 8, make_batch([4], [4], decode_threshold=SPEC, cudagraph_pad=8), True),
]
# vLLM's sizes (fixtures.inputs.sizes): a decode step of max_num_seqs requests on the largest builder, a
# CUDA-graph padded step at the largest default capture size, a prefill of max_num_batched_tokens
# tokens; context lengths cycle through the clamp edges of 2048.
CLAMP_EDGES = [1, 2047, 2048, 2049, 4096, INT32_MAX]
PINNED_LARGE = [
    decode_case([CLAMP_EDGES[i % 6] for i in range(1024)], 2048, m=16384),
    Case("padded", 2048, 512, make_batch([1] * 500, [CLAMP_EDGES[i % 6] for i in range(500)], cudagraph_pad=512)),
    Case("prefill", 2048, 8192, make_batch([8192], [10000])),
]


def step_view_tokens(result, batch) -> int:
    """The tokens a step's views cover: ``num_actual_tokens``, or, on a CUDA-graph
    padded batch, the scheduled tokens ``query_start_loc[-1]`` (vLLM 0.33.0's
    build() slices its views at ``query_start_loc_cpu[num_reqs]``).  A FULL graph
    replay reads the persistent buffers at the captured size whatever the views
    say, so the pad tokens are checked in the whole buffers either way."""
    k = result.req_id_per_token.numel()
    allowed = sorted({batch.num_actual_tokens, batch.num_scheduled_tokens})
    assert k in allowed, f"the step's req_id_per_token view has {k} entries; expected one of {allowed}"
    return k


@pytest.mark.needs(DEVICE_KERNEL)
@given(case=cases(kinds=BATCH_KINDS))
@pinned(PINNED + PINNED_LARGE)
def test_device_kernel_matches_oracle(subject, device, case):
    """Property 1: the device seqlen kernel equals the oracle on every batch kind."""
    batch = case.batch
    n = batch.num_actual_tokens
    alloc = GuardedAllocator(device)
    out = alloc.zeros("sparse_seqlen_out", n, torch.int32)
    scale.saw_step(batch.num_reqs, n, case.max_num_batched_tokens)
    with count_triton_launches() as launches:
        subject.sparse_seqlen(batch, case.topk, out)
    note(f"launches: {dict(launches)}")
    alloc.check()
    assert_int32_equal(out, expected_seqlens(batch, case.topk), "sparse seqlen per token")
    if n > 0:
        assert launches, "no Triton kernel was launched (is triton a placeholder?)"


@pytest.mark.costly
@pytest.mark.needs(HOST_PATH, DEVICE_PATH)
@given(case=cases(kinds=("pure_decode", "padded")))
@pinned([c for c in PINNED + PINNED_LARGE if c.kind in ("pure_decode", "padded")])
def test_host_path_equals_device_path_and_oracle(subject, device, case):
    """Property 2: on pure-decode batches the host path, the device path and the
    oracle agree bit for bit over the whole M + 1 indptr buffer, tail included."""
    batch, m, topk = case.batch, case.max_num_batched_tokens, case.topk
    expected = expected_state(batch, "device", topk, m)["paged_kv_indptr"].values
    host_bound = oracle.host_decode_indptr(batch.seq_lens_cpu_upper_bound, topk, m + 1)
    assert_int32_equal(host_bound, expected, "oracle self-check: host formula vs per-token oracle")

    results = {}
    for pin_memory in (True, False):
        config = new_config(device, m, topk, pin_memory=pin_memory)
        # The release beside the subject (a baseline run) computes its device path once, beside the first.
        builder = (subject if pin_memory else unpaired(subject)).make_builder(config)
        step = run_step(builder, batch, config, subject)
        path = expected_path(batch, speculative=False, pin_memory=pin_memory)
        assert step.result.path == path, f"pin_memory={pin_memory}: took {step.result.path} path, oracle says {path}"
        whole = builder.buffers()["paged_kv_indptr"]
        assert_int32_equal(whole, expected, f"paged_kv_indptr[0:{m + 1}] on the {path} path")
        k = step_view_tokens(step.result, batch)
        assert_int32_equal(step.result.paged_kv_indptr, expected[: k + 1], "step's indptr view")
        results[path] = whole.cpu().clone()
    if batch.max_query_len == 1:
        assert set(results) == {"host", "device"}
        assert torch.equal(results["host"], results["device"])


@pytest.mark.needs(DEVICE_PATH)
@pytest.mark.checks(HOST_PATH)
@given(case=cases(kinds=BATCH_KINDS))
@pinned(PINNED + PINNED_LARGE)
def test_step_metadata_matches_oracle(subject, device, case):
    """Property 3 (and the rest of a step): req_id_per_token and, with
    ``paged_kv_metadata``, qo_indptr, paged_kv_last_page_len and
    paged_kv_indptr of a fresh builder equal the oracle over their whole
    persistent buffers (the entries the contract fixes:
    ``oracles.step.expected_state``); the path taken is the one the legality
    predicate allows."""
    batch, m, topk = case.batch, case.max_num_batched_tokens, case.topk
    pin = HOST_PATH in subject.capabilities
    config = new_config(device, m, topk, speculative=case.speculative, pin_memory=pin)
    builder = subject.make_builder(config)
    step = run_step(builder, batch, config, subject)
    path = expected_path(batch, speculative=case.speculative, pin_memory=pin)
    assert step.result.path == path, f"took the {step.result.path} path; the oracle says {path}"
    buffers = builder.buffers()
    lengths = {k: n for k, n in buffer_lengths(m).items() if k in exposed_buffers(subject)}
    assert {k: buffers[k].numel() for k in lengths} == lengths, "persistent buffer lengths"
    expected = expected_state(batch, path, topk, m, **step_contract(subject))
    compare_state(buffers, expected, "after the step")
    req_ids = expected["req_id_per_token"]
    k = step_view_tokens(step.result, batch)
    below = None if req_ids.below is None else req_ids.below[:k]
    assert_fixed_equal(
        step.result.req_id_per_token, req_ids.values[:k], req_ids.fixed[:k], "step req_id_per_token", below
    )
    if PAGED_KV_METADATA not in subject.capabilities:
        return
    assert_int32_equal(step.result.paged_kv_indptr, expected["paged_kv_indptr"].values[: k + 1], "step paged_kv_indptr")
    assert_int32_equal(step.result.qo_indptr, oracle.qo_indptr(k), "qo_indptr")
    assert_int32_equal(step.result.paged_kv_last_page_len, oracle.paged_kv_last_page_len(k), "paged_kv_last_page_len")
    assert_int32_equal(buffers["paged_kv_last_page_len"], np.ones(m, np.int32), "paged_kv_last_page_len buffer")
