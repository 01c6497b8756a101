"""vLLM's sizes in the suite's inputs (``fixtures/inputs/sizes.py``) and what the run records of them.

The capture list is checked against values worked by hand from vLLM's rule;
the share of examples drawn at vLLM's sizes is measured on the strategies
themselves; a bug that shows only at vLLM's sizes still shrinks to the
smallest step that shows it; and the record of a test's largest step and of
its kernels' tile crossings (``fixtures/harness/scale.py``) reaches the run
summary.
"""

import types

import numpy as np
import torch
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from fixtures.harness import scale
from fixtures.harness.step import new_config, run_step
from fixtures.inputs import sizes
from fixtures.inputs.forward_cases import cache_dtypes, forward_cases, spelled_as
from fixtures.inputs.strategies import bulk_seq_lens, cases
from fixtures.protocol import KV_CACHE_DTYPES, ForwardDomain
from fixtures.subjects.mutants import MUTANTS
from fixtures.subjects.reference import ReferenceSubject
from tools.fresh_run import repo

EXACT = settings(database=None, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))


def test_capture_sizes_follow_vllms_default_rule_worked_by_hand():
    # max_num_seqs 1024, M 8192: ceiling min(2 * 1024, 512) = 512; 1, 2, 4, 8..248 by 8, 256..512 by 16.
    full = sizes.capture_sizes(1024, 8192)
    assert full[:5] == [1, 2, 4, 8, 16] and full[-3:] == [480, 496, 512]
    assert len(full) == 3 + 31 + 17
    # M 6 within the ceiling: captured itself; max_num_seqs 6 (a uniform decode of 6 requests) too.
    assert sizes.capture_sizes(6, 6) == [1, 2, 4, 6]
    # Three draft tokens (query length 4): every size a multiple of 4 up to 512 that 4 * n of the
    # request counts reaches, beside the token grid.
    spec = sizes.capture_sizes(1024, 8192, decode_query_len=4)
    assert {4 * n for n in (1, 2, 4, 8, 64, 128)} <= set(spec) and max(spec) == 512


def test_a_uniform_decode_batch_runs_the_smallest_graph_that_holds_it():
    full = sizes.capture_sizes(1024, 8192)
    assert [sizes.graph_size_for(n, full) for n in (1, 3, 9, 255, 257, 500, 512, 513)] == [
        1, 4, 16, 256, 272, 512, 512, None,
    ]  # fmt: skip
    spec = sizes.capture_sizes(1024, 8192, 4)
    assert sizes.graph_size_for(12, spec, 4) == 16  # 12 is not captured: the next multiple of 4 that is


def test_about_one_example_in_two_to_the_flips_is_at_vllms_sizes():
    drawn = []
    settings(EXACT, max_examples=400)(given(st.data())(lambda data: drawn.append(data.draw(sizes.at_scale(3)))))()
    share = sum(drawn) / len(drawn)
    assert 1 / 16 <= share <= 1 / 4, f"{share:.3f} of the examples at vLLM's sizes; about 1/8 expected"


def test_every_vllm_sized_case_is_valid_and_as_large_as_declared():
    seen = []

    @settings(EXACT, max_examples=200)
    @given(kind=st.sampled_from(("pure_decode", "padded", "multi_token_decode", "mixed", "prefill")), data=st.data())
    def check(kind, data):
        from fixtures.inputs.strategies import large_case

        case = data.draw(large_case(kind, 2048))
        b = case.batch
        assert b.num_reqs <= sizes.MAX_NUM_SEQS + 512  # pad requests past a capture size
        assert b.num_actual_tokens <= min(sizes.MAX_STEP_TOKENS, case.max_num_batched_tokens)
        assert case.max_num_batched_tokens <= sizes.MAX_M
        assert b.num_reqs * -(-max(b.max_query_len, 1) // 64) <= sizes.GRID_BUDGET
        seen.append((b.num_reqs, b.num_actual_tokens, case.max_num_batched_tokens))

    check()
    assert max(r for r, _, _ in seen) >= 512 and max(t for _, t, _ in seen) >= 4096
    assert max(m for _, _, m in seen) >= 8192


def test_every_long_forward_is_past_vllms_largest_captured_step():
    """A long forward is one vLLM runs eagerly, past its largest CUDA-graph capture size, even at the range's
    lower end, which hypothesis draws often: a fast path lost past that size shows in every long example
    (the NoPE zero-copy branch taken only up to 512 tokens went uncaught once every long draw was 256)."""
    seen = []

    @settings(EXACT, max_examples=60)
    @given(c=forward_cases(long_share=0))  # no flips: every case long
    def check(c):
        assert sizes.DEFAULT_MAX_GRAPH_SIZE < c.num_tokens <= sizes.FORWARD_MAX_TOKENS
        seen.append(c.num_tokens)

    check()
    assert max(seen) == sizes.FORWARD_MAX_TOKENS


def test_float_caches_are_drawn_spelled_as_the_models_dtype_in_a_budgeted_share():
    """Where the domain serves them, the float caches come in about one draw in twelve, each spelled as the
    model's dtype (vLLM never builds another: tests/selfvalidation/test_vllm_subject.py), beside fp8's share
    and "auto" most of the time."""
    drawn = []
    domain = ForwardDomain(kv_cache_dtypes=KV_CACHE_DTYPES)

    @settings(EXACT, max_examples=400)
    @given(model=st.sampled_from((torch.bfloat16, torch.float16)), data=st.data())
    def check(model, data):
        cache = data.draw(cache_dtypes(domain, model))
        assert cache in ("auto", "fp8") or cache == spelled_as(model)
        drawn.append(cache)

    check()
    floats = sum(c not in ("auto", "fp8") for c in drawn) / len(drawn)
    assert 1 / 24 <= floats <= 1 / 6 and drawn.count("auto") > len(drawn) / 2, f"{floats:.3f} float caches"


def test_bulk_context_lengths_are_legal_for_their_queries():
    @settings(EXACT, max_examples=50)
    @given(data=st.data(), q=st.integers(1, 8), topk=st.sampled_from((1, 64, 2048)))
    def check(data, q, topk):
        values = np.asarray(data.draw(bulk_seq_lens([q] * 300, topk)))
        assert values.min() >= q and values.max() <= 2**31 - 1

    check()


def test_a_bug_seen_only_at_vllms_sizes_shrinks_to_the_smallest_step_that_shows_it():
    """The host-path tail filled for 256 entries only (``host_tail_fill_bounded``) is seen only on a
    builder of ``M >= n + 257``: shrinking ends at one request on a builder within a factor of two of
    the least that shows it (counts shrink by octave, then within it: ``sizes.count``), not at the
    hundreds of requests and thousands of tokens it may first be drawn with."""
    broken = MUTANTS["host_tail_fill_bounded"]()

    def differs(case) -> bool:
        config = new_config("cpu", case.max_num_batched_tokens, case.topk)
        builder = broken.make_builder(config)
        run_step(builder, case.batch, config, broken)
        good_config = new_config("cpu", case.max_num_batched_tokens, case.topk)
        good = ReferenceSubject().make_builder(good_config)
        run_step(good, case.batch, good_config)
        return not np.array_equal(
            builder.buffers()["paged_kv_indptr"].numpy(), good.buffers()["paged_kv_indptr"].numpy()
        )

    found = find(cases(kinds=("pure_decode",), large=1), differs, settings=settings(EXACT, max_examples=500))
    least = 1 + 257
    assert found.batch.num_reqs == 1 and least <= found.max_num_batched_tokens < 2 * least, found


def test_a_tests_largest_step_and_tile_crossings_reach_the_summary(run_suite_in):
    run = run_suite_in(repo("tests/differential/test_single_step.py::test_step_metadata_matches_oracle"), profile="dev")
    assert run.ret == 0, run.out
    line = next(ln for ln in run.out.splitlines() if "largest step:" in ln)
    assert f"{sizes.MAX_NUM_SEQS} requests, {sizes.MAX_STEP_TOKENS} tokens, M {sizes.MAX_M}" in line, line
    assert "token_sparse_seqlen_kernel" in line, line


def test_the_record_merges_maxima_and_sums_crossings():
    a = {"requests": 3, "tokens": 900, "m": 10, "crossed": {"k": 2}}
    b = {"requests": 700, "tokens": 8, "m": 16384, "crossed": {"k": 1, "j": 4}, "tiles": {"k": 16}}
    merged = scale.merge([a, b])
    assert {k: merged[k] for k in ("requests", "tokens", "m", "crossed", "tiles")} == {
        "requests": 700, "tokens": 900, "m": 16384, "crossed": {"k": 3, "j": 4}, "tiles": {"k": 16},
    }  # fmt: skip
    assert "700 requests, 900 tokens, M 16384" in scale.describe(merged)
    assert "largest forward" not in scale.describe(merged), "a property without a forward has no forward line"


def test_the_record_keeps_the_largest_forward_of_every_axis():
    """Forwards of one property on different axes: the most tokens, the widest top-k, the most live keys, the
    key-pooled, the sink and each switch's examples summed, every head count; the summary names the counts that do
    not divide 16 and the switches set."""
    f = {"tokens": 1024, "widest_topk": 128, "live_keys": 4, "kpool": 0, "sinks": 3, "heads": [12, 1]}
    g = {"tokens": 3, "widest_topk": 2048, "live_keys": 2048, "kpool": 2, "sinks": 1, "heads": [128, 1],
         "switches": {"S": 5}}  # fmt: skip
    merged = scale.merge([{"requests": 0, "tokens": 0, "m": 0, "crossed": {}, "forward": x} for x in (f, g, g)])
    assert merged["forward"] == {"tokens": 1024, "widest_topk": 2048, "live_keys": 2048, "kpool": 4, "sinks": 5,
                                 "switches": {"S": 10}, "heads": [1, 12, 128]}  # fmt: skip
    line = scale.describe(merged)
    assert "largest forward: 1024 tokens; widest top-k 2048, most live keys of a token 2048" in line
    assert "key-pooled buffers in 4 examples" in line and "not dividing 16 or a multiple of it: [12]" in line
    assert "layers made with a switch set: S in 10" in line


def test_a_forward_call_is_recorded_with_its_live_keys():
    """``saw_forward`` reads a call's live keys off its metadata (the longest token's), its top-k width off
    its layer (the keys where it names none) and whether a key pool widened its buffer."""
    from fixtures.protocol import ForwardMetadata

    md = ForwardMetadata(torch.tensor([0, 3, 3, 10, 10], dtype=torch.int32), torch.zeros(10, dtype=torch.int32), 3)
    with scale.recording() as reach:
        scale.saw_forward(
            types.SimpleNamespace(index_topk=None, index_kpool=None, num_heads=12, attention_sinks=None), md
        )
        scale.saw_forward(
            types.SimpleNamespace(index_topk=2048, index_kpool=128, num_heads=3, attention_sinks=None), md
        )
    assert (reach.forward_tokens, reach.widest_topk, reach.live_keys, reach.kpool) == (4, 2048, 7, 1)
    assert sorted(reach.heads) == [3, 12]
