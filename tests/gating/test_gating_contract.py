"""The gating contract of the host path (BRIEF 1c).

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
"""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fixtures.batches import make_batch
from fixtures.harness import assert_int32_equal, check_seqlen_launches, new_config, run_step
from fixtures.oracle_views import expected_indptr, expected_path
from fixtures.step_strategies import CLAUSE_TOGGLES, context_lens, overstated_bound_decode, toggle_clause
from fixtures.subjects import DEVICE_PATH, HOST_PATH, decode_threshold_for
from oracles import metadata as oracle

M = 8
TOPK = 64
SEQ_LENS = [5, 64, 65, 3000]
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
    step = run_step(builder, batch, config)
    path = expected_path(batch, speculative=speculative, pin_memory=pin_memory)
    assert step.result.path == path, (
        f"{batch!r} with speculative={speculative}, pin_memory={pin_memory}: took the {step.result.path} path; "
        f"the legality oracle says {path}"
    )
    check_seqlen_launches(subject, step, batch)
    assert_int32_equal(builder.buffers()["paged_kv_indptr"], expected_indptr(batch, topk, m), "paged_kv_indptr")
    req_ids = np.zeros(m, np.int32)
    req_ids[: batch.num_actual_tokens] = oracle.req_id_per_token(batch.query_start_loc)
    assert_int32_equal(builder.buffers()["req_id_per_token"], req_ids, "req_id_per_token")
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


# 60 examples: each runs a seqlen kernel in the Triton interpreter (milliseconds
# per request); the fixed table above covers every clause on every run.
@pytest.mark.needs(HOST_PATH, DEVICE_PATH)
@settings(max_examples=60)
@given(
    seq_lens=st.lists(context_lens(), min_size=1, max_size=4),
    toggle=st.sampled_from([None, *CONFIG_TOGGLES, *CLAUSE_TOGGLES]),
    topk=st.sampled_from([1, 2, 64, 2048]),
)
@example(seq_lens=[1], toggle="a_prefill", topk=1)
@example(seq_lens=[1], toggle="empty_batch", topk=1)
def test_path_and_launches_follow_the_predicate(subject, device, seq_lens, toggle, topk):
    config_kwargs, batch = toggled(seq_lens, toggle)
    check_gated_step(subject, device, config_kwargs, batch, topk, M)


@pytest.mark.needs(DEVICE_PATH)
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
    step = run_step(builder, batch, config)
    assert step.result.path == "device", "a speculative config took the host path"
    indptr = builder.buffers()["paged_kv_indptr"]
    assert_int32_equal(indptr, truth, "paged_kv_indptr (device path, real seq_lens)")
    assert not np.array_equal(indptr.cpu().numpy(), host_formula), "device path result equals the host formula"


# 60 examples: a seqlen kernel per example (see above).
@pytest.mark.needs(DEVICE_PATH)
@settings(max_examples=60)
@given(
    batch=st.one_of(
        overstated_bound_decode(M),
        st.lists(context_lens(), max_size=M).map(
            lambda s: make_batch([1] * len(s), s, decode_threshold=decode_threshold_for(True))
        ),
    ),
    topk=st.sampled_from([1, 2, 64, 2048]),
)
def test_speculative_config_never_takes_host_path(subject, device, batch, topk):
    """Even on a pure-decode batch (exact or overstated bound), a speculative
    config takes the device path, and its result follows the real seq_lens."""
    path = check_gated_step(subject, device, {"speculative": True}, batch, topk, M)
    assert path == "device"
