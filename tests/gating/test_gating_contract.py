"""The gating contract of the host path.

The host path is taken if and only if every clause of the legality predicate
holds: no speculative config, pinned memory, ``seq_lens_cpu_upper_bound``
present, no prefills, every token a decode token, ``max_query_len == 1``.
Each clause is switched off the way a scheduler can switch it off, and the
path taken is checked, together with the number of Triton launches of the
step (zero on a host-path step, exactly one, the seqlen kernel, on a
device-path step with requests) and the whole persistent buffers against the
oracle.  On CPU, ``pin_memory=True`` stands in for pinned memory (CPU torch
has none).

Which clauses can move alone: vLLM derives the split inside ``build()``
(``split_decodes_and_prefills`` at ``reorder_batch_threshold``, 1 without a
speculative config), so a request is a prefill exactly when its query length
is 2 or more.  ``no_prefills``, ``all_tokens_decode`` and
``max_query_len_is_one`` therefore fail together, and only together, when a
request has ``query_len >= 2`` (toggle ``a_prefill``): each of the three
says "no query longer than 1".  ``max_query_len_is_one`` alone fails on the
empty batch (``max_query_len`` 0; toggle ``empty_batch``).
``upper_bound_present``, ``no_speculative_config`` and ``pinned_memory`` are
independent of the split and are toggled alone (a speculative config's
batches are split at 1 + ``NUM_SPECULATIVE_TOKENS``, here pure one-token
decodes, so only its own clause fails).

CUDA-graph padding (``make_batch(..., cudagraph_pad=N)``, as vLLM's GPU model
runner pads a uniform decode batch for a FULL CUDA graph: pad requests of
query_len 0 and seq_len 0, ``num_actual_tokens = N`` past
``query_start_loc[-1]``) changes no clause: ``split_decodes_and_prefills``
counts the padded ``num_actual_tokens`` as decode tokens, so a padded
pure-decode batch takes the host path (``req_id_per_token[:N] = 0..N-1``) and
a padded speculative batch (every query ``1 + NUM_SPECULATIVE_TOKENS``) the
device path.
"""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fixtures.harness.compare import assert_int32_equal, compare_state
from fixtures.harness.contract import step_contract
from fixtures.harness.step import check_seqlen_launches, new_config, run_step
from fixtures.inputs import sizes
from fixtures.inputs.batches import INT32_MAX, make_batch
from fixtures.inputs.steps import CLAUSE_TOGGLES, context_lens, overstated_bound_decode, toggle_clause
from fixtures.inputs.strategies import MANY, bulk_seq_lens, note_padded
from fixtures.plugin.profiles import sized
from fixtures.protocol import DEVICE_PATH, HOST_PATH, PAGED_KV_METADATA, decode_threshold_for
from oracles import metadata as oracle
from oracles.step import expected_indptr, expected_path, expected_state

M = 8
TOPK = 64
SEQ_LENS = [5, 64, 65, 3000]
SPEC_THRESHOLD = decode_threshold_for(True)
CONFIG_TOGGLES = {"speculative_config": dict(speculative=True), "no_pinned_memory": dict(pin_memory=False)}
# The clauses of oracles.metadata.HostPathClauses each toggle breaks, in the
# order HostPathClauses.failing() lists them (see the module docstring).
BROKEN_CLAUSE = {
    "speculative_config": ["no_speculative_config"],
    "no_pinned_memory": ["pinned_memory"],
    "no_upper_bound": ["upper_bound_present"],
    "a_prefill": ["no_prefills", "all_tokens_decode", "max_query_len_is_one"],
    "empty_batch": ["max_query_len_is_one"],
}
assert set(BROKEN_CLAUSE) == {*CONFIG_TOGGLES, *CLAUSE_TOGGLES}


def toggled(seq_lens, toggle):
    """(config kwargs, batch): the pure-decode ``seq_lens`` with the clauses of
    ``toggle`` off, split at the decode threshold of the config it runs under."""
    if toggle in CONFIG_TOGGLES:
        config_kwargs = CONFIG_TOGGLES[toggle]
        threshold = decode_threshold_for(config_kwargs.get("speculative", False))
        return config_kwargs, make_batch([1] * len(seq_lens), seq_lens, decode_threshold=threshold)
    if toggle is None:
        return {}, make_batch([1] * len(seq_lens), seq_lens)
    return {}, toggle_clause(seq_lens, toggle)


def check_gated_step(subject, device, config_kwargs, batch, topk, m):
    """One step on a fresh builder: path == legality oracle, launch count, whole buffers."""
    speculative = config_kwargs.get("speculative", False)
    pin_memory = config_kwargs.get("pin_memory", True)
    config = new_config(device, m, topk, speculative=speculative, pin_memory=pin_memory)
    builder = subject.make_builder(config)
    step = run_step(builder, batch, config, subject)
    path = expected_path(batch, speculative=speculative, pin_memory=pin_memory)
    assert step.result.path == path, (
        f"{batch!r} with speculative={speculative}, pin_memory={pin_memory}: took the {step.result.path} path; "
        f"the legality oracle says {path}"
    )
    check_seqlen_launches(subject, step, batch)
    expected = expected_state(batch, path, topk, m, **step_contract(subject))
    compare_state(builder.buffers(), expected, f"after {batch!r} ({path} path)")
    return step.result.path


@pytest.mark.needs(HOST_PATH, DEVICE_PATH)
@pytest.mark.parametrize("toggle", [None, *CONFIG_TOGGLES, *CLAUSE_TOGGLES])
def test_each_clause_alone_gates_the_host_path(subject, device, toggle):
    """All clauses true: host path, no kernel.  Any one clause false: device
    path, exactly one seqlen kernel launch, same buffers."""
    config_kwargs, batch = toggled(SEQ_LENS, toggle)
    clauses = oracle.host_path_clauses(
        speculative=config_kwargs.get("speculative", False),
        pin_memory=config_kwargs.get("pin_memory", True),
        has_upper_bound=batch.seq_lens_cpu_upper_bound is not None,
        num_prefills=batch.num_prefills,
        num_decode_tokens=batch.num_decode_tokens,
        num_actual_tokens=batch.num_actual_tokens,
        max_query_len=batch.max_query_len,
    )
    # The toggle breaks exactly the clauses it is listed with, and nothing else.
    assert clauses.failing() == ([] if toggle is None else BROKEN_CLAUSE[toggle])
    path = check_gated_step(subject, device, config_kwargs, batch, TOPK, M)
    assert path == ("host" if toggle is None else "device")


# Sized as "gating" (fixtures/plugin/profiles.py): each example runs a seqlen kernel in the
# Triton interpreter; the fixed table above covers every clause on every run.
@st.composite
def gated_seq_lens(draw, min_value: int = 1):
    """Context lengths of 1 to 4 decodes; rarely (``sizes.KERNEL_HEAVY``: a device-path step runs the
    seqlen kernel over every request) of hundreds (vLLM's sizes), at the clamp edges of 2048."""
    if draw(sizes.at_scale(sizes.KERNEL_HEAVY)):
        n = draw(sizes.count(MANY, sizes.MAX_NUM_SEQS))
        return [max(min_value, s) for s in draw(bulk_seq_lens([1] * n, 2048))]
    return draw(st.lists(context_lens(min_value), min_size=1, max_size=4))


def builder_m(batch) -> int:
    """``M``, or the batch's tokens and one more where that is larger (the tail is never empty)."""
    return max(M, batch.num_actual_tokens + 1)


MANY_SEQ_LENS = [(1, 2047, 2048, 2049, INT32_MAX)[i % 5] for i in range(sizes.MAX_NUM_SEQS)]


@pytest.mark.needs(HOST_PATH, DEVICE_PATH)
@sized("gating")
@given(
    seq_lens=gated_seq_lens(),
    toggle=st.sampled_from([None, *CONFIG_TOGGLES, *CLAUSE_TOGGLES]),
    topk=st.sampled_from([1, 2, 64, 2048]),
)
@example(seq_lens=[1], toggle="a_prefill", topk=1)
@example(seq_lens=[1], toggle="empty_batch", topk=1)
@example(seq_lens=MANY_SEQ_LENS, toggle=None, topk=2048)
@example(seq_lens=MANY_SEQ_LENS, toggle="a_prefill", topk=2048)
def test_path_and_launches_follow_the_predicate(subject, device, seq_lens, toggle, topk):
    config_kwargs, batch = toggled(seq_lens, toggle)
    check_gated_step(subject, device, config_kwargs, batch, topk, builder_m(batch))


@pytest.mark.needs(DEVICE_PATH, PAGED_KV_METADATA)
def test_overstated_upper_bound_would_diverge_from_device_path(subject, device):
    """Under async speculative decoding ``seq_lens_cpu_upper_bound`` can run
    ahead of the real seq_lens: the host formula on the bound then differs
    from what the device path computes from seq_lens, which is why a
    speculative config must keep the device path."""
    seq_lens, bound = [5, 64, 3000], [7, 66, 3001]
    batch = make_batch([1, 1, 1], seq_lens, upper_bound=bound, decode_threshold=decode_threshold_for(True))
    host_formula = oracle.host_decode_indptr(batch.seq_lens_cpu_upper_bound, TOPK, M + 1)
    truth = expected_indptr(batch, TOPK, M)
    assert np.any(host_formula != truth), "the overstated bound must change the host formula's result"
    config = new_config(device, M, TOPK, speculative=True)
    builder = subject.make_builder(config)
    step = run_step(builder, batch, config, subject)
    assert step.result.path == "device", "a speculative config took the host path"
    indptr = builder.buffers()["paged_kv_indptr"]
    assert_int32_equal(indptr, truth, "paged_kv_indptr (device path, real seq_lens)")
    assert not np.array_equal(indptr.cpu().numpy(), host_formula), "device path result equals the host formula"


@pytest.mark.needs(DEVICE_PATH)
@sized("gating")
@given(
    batch=st.one_of(
        overstated_bound_decode(M),
        st.lists(context_lens(), max_size=M).map(
            lambda s: make_batch([1] * len(s), s, decode_threshold=decode_threshold_for(True))
        ),
        gated_seq_lens().map(lambda s: make_batch([1] * len(s), s, decode_threshold=decode_threshold_for(True))),
    ),
    topk=st.sampled_from([1, 2, 64, 2048]),
)
@example(batch=make_batch([1] * len(MANY_SEQ_LENS), MANY_SEQ_LENS, decode_threshold=SPEC_THRESHOLD), topk=2048)
def test_speculative_config_never_takes_host_path(subject, device, batch, topk):
    """Even on a pure-decode batch (exact or overstated bound; up to max_num_seqs requests), a speculative
    config takes the device path, and its result follows the real seq_lens."""
    path = check_gated_step(subject, device, {"speculative": True}, batch, topk, builder_m(batch))
    assert path == "device"


# CUDA-graph padded batches: (config kwargs, batch, path).  M = 8 holds a
# speculative graph of 2 * SPEC tokens: one real request and one pad request.
SPEC = decode_threshold_for(True)
PADDED = {
    "pure_decode": ({}, make_batch([1, 1, 1, 1], SEQ_LENS, cudagraph_pad=M), "host"),
    "pure_decode_one_pad": ({}, make_batch([1], [5], cudagraph_pad=2), "host"),
    "no_pinned_memory": (
        {"pin_memory": False},
        make_batch([1, 1, 1, 1], SEQ_LENS, cudagraph_pad=M),
        "device",
    ),
    "no_upper_bound": ({}, make_batch([1, 1, 1, 1], SEQ_LENS, upper_bound=None, cudagraph_pad=M), "device"),
    "speculative": (
        {"speculative": True},
        make_batch([SPEC], [3000], decode_threshold=SPEC, cudagraph_pad=2 * SPEC),
        "device",
    ),
    # vLLM's sizes: the largest default capture size (fixtures.inputs.sizes.capture_sizes), 512 tokens
    "largest_capture_size": ({}, make_batch([1] * 500, MANY_SEQ_LENS[:500], cudagraph_pad=512), "host"),
    "speculative_largest_capture_size": (
        {"speculative": True},
        make_batch([SPEC] * 120, [max(SPEC, s) for s in MANY_SEQ_LENS[:120]], decode_threshold=SPEC, cudagraph_pad=512),
        "device",
    ),
}


@pytest.mark.needs(HOST_PATH, DEVICE_PATH)
@pytest.mark.parametrize("name", list(PADDED))
def test_cudagraph_padded_batches_follow_the_predicate(subject, device, name):
    """A padded pure-decode batch takes the host path (req_id_per_token[:N] =
    0..N-1, pad tokens included); switched off by no pinned memory or no upper
    bound, and a padded speculative batch, the device path (pad tokens'
    req_id_per_token not fixed by the contract)."""
    config_kwargs, batch, path = PADDED[name]
    assert batch.is_cudagraph_padded and batch.num_pad_requests > 0
    assert check_gated_step(subject, device, config_kwargs, batch, TOPK, builder_m(batch)) == path


@st.composite
def padded_gating_cases(draw):
    """``(config, topk, batch)``: a uniform decode batch padded to a drawn graph size N <= M (a multiple of the
    threshold), or, often (``sizes.HOST_ONLY``: a padded batch holds at most 512 tokens), hundreds of requests
    padded to the smallest of vLLM's default capture sizes that holds them."""
    config = draw(st.sampled_from(["host_capable", "no_pinned_memory", "no_upper_bound", "speculative"]))
    topk = draw(st.sampled_from([1, 2, 64, 2048]))
    threshold = decode_threshold_for(config == "speculative")
    if draw(sizes.at_scale(sizes.HOST_ONLY), label="at vLLM's sizes"):
        graphs = sizes.capture_sizes(sizes.MAX_NUM_SEQS, sizes.MAX_M, threshold)
        usable = [g for g in graphs if g % threshold == 0]
        reqs = draw(sizes.count(MANY // threshold, usable[-1] // threshold - 1), label="real requests")
        seq_lens = [max(threshold, s) for s in draw(bulk_seq_lens([threshold] * reqs, topk), label="seq_lens")]
        pad = sizes.graph_size_for(reqs * threshold + 1, usable, threshold)
    else:
        graphs = M // threshold
        reqs = draw(st.integers(1, graphs - 1), label="real requests")
        seq_lens = draw(st.lists(context_lens(threshold), min_size=reqs, max_size=reqs), label="seq_lens")
        pad = threshold * draw(st.integers(reqs + 1, graphs), label="graph size / threshold")
    batch = make_batch(
        [threshold] * reqs,
        seq_lens,
        decode_threshold=threshold,
        upper_bound=None if config == "no_upper_bound" else "exact",
        cudagraph_pad=pad,
    )
    return config, topk, batch


@pytest.mark.needs(HOST_PATH, DEVICE_PATH)
@sized("gating")
@given(case=padded_gating_cases())
def test_padded_batches_take_the_path_the_predicate_allows(subject, device, case):
    """Uniform decode batches padded to a CUDA graph's size (:func:`padded_gating_cases`): path == legality
    oracle, launches, whole buffers."""
    config, topk, batch = case
    speculative = config == "speculative"
    note_padded(batch)
    config_kwargs = {"speculative": speculative, "pin_memory": config != "no_pinned_memory"}
    path = check_gated_step(subject, device, config_kwargs, batch, topk, builder_m(batch))
    assert path == ("host" if config == "host_capable" else "device")
