"""The builder feeds its forward: a step built by the subject's own builder, handed unchanged to its ``forward_mqa``.

The NoPE properties (``test_zero_copy_query.py``) hand ``forward_mqa`` metadata
the suite lays out itself; the differential and stateful properties check the
builder's buffers on their own.  Here the two meet as vLLM runs them: the
metadata object ``build()`` returns (its split ``num_decodes`` /
``num_prefills`` / ``num_decode_tokens``, ``req_id_per_token``,
``paged_kv_indptr`` on ROCm, the ``query_start_loc`` and ``block_table`` of
the ``CommonAttentionMetadata`` the builder was given) goes, untouched, into
the same subject's ``forward_mqa`` (its impl made as the NoPE properties make
it), with the impl's top-k buffer holding each token's top-k logical positions
and a KV cache and block table drawn for the batch
(``fixtures.harness.feeds``).  vLLM's ``MLAAttention`` hands ``forward_mqa``
the tokens it would (a sparse layer without prefill metadata: all of them).
The output must equal the oracle's sparse attention computed from the batch
alone, token by token, within ``oracles.nope.FORWARD_TOLERANCES``: a wrong
request id, a wrong indptr or a wrong split (the split is also checked by
``run_step`` against the batch's, where the subject reports one) gives a
wrong output or a failed step.  The downstream kernel stays stood in as in the
NoPE properties (on CPU: the reference sparse MLA forward on the indices
vLLM's remap produced).

Batches: pure decodes, CUDA-graph padded decodes (pad tokens' rows are
unspecified and not compared; their ``req_id_per_token`` must index a real row
of the step's block table) and mixed decode + prefill steps.

Not applicable, with the reason: a subject without a forward (FlashMLA sparse,
XPU: no forward driver), and one whose forward cannot be fed its builder's
metadata (the reference subject: its forward reads the suite's own
``ForwardMetadata`` of cache slots; there is no block table or top-k remap
between its builder and its forward).
"""

import pytest
import torch
from hypothesis import event, given, note, reject

from fixtures.harness.feeds import (
    FeedCase,
    NotFed,
    PaddingNotFed,
    check_fed_output,
    check_fed_path,
    check_pad_request_ids,
    feed_cases,
    run_fed_step,
)
from fixtures.inputs import sizes
from fixtures.inputs.batches import make_batch
from fixtures.inputs.strategies import pinned
from fixtures.plugin.gating import NOT_APPLICABLE
from fixtures.plugin.profiles import sized
from fixtures.protocol import NOPE_FORWARD, NOPE_ZERO_COPY, ForwardNotApplicable

BF16, FP16 = torch.bfloat16, torch.float16

# A padded decode: 3 requests (contexts at the clamp and past a 64-row block) padded to a graph of 6.
PADDED = FeedCase(make_batch([1, 1, 1], [127, 128, 200], cudagraph_pad=6), 8, 128, 2, 8, BF16, seed=1)
# A mixed step: 2 decodes, then a 3-token prefill whose tokens see 68..70 of 70 keys, at top-k 256.
MIXED = FeedCase(make_batch([1, 1, 3], [5, 257, 70]), 8, 256, 16, 16, FP16, seed=2)
# A step at vLLM's sizes: 1024 decodes (past the token-to-request kernel's fourth 256-token tile) on 12 heads a
# rank (96 over TP 8), contexts around the top-k of 128.
LARGE = FeedCase(
    make_batch([1] * sizes.LONG_FORWARD, [127 + i % 4 for i in range(sizes.LONG_FORWARD)]),
    1040,
    128,
    12,
    4,
    BF16,
    seed=4,
)
# DeepSeek V3.2's top-k of 2048: three decodes attending 1500 to 2048 keys (every remap tile), 128 heads, an
# fp8 cache; and GLM's key pool widening the same top-k's buffer, a prefill among the decodes, 24 heads.
WIDE = FeedCase(
    make_batch([1, 1, 1], [1500, 2048, 2600]), 4, 2048, 128, 8, BF16, seed=5, kv_cache_dtype="fp8", q_scale=0.5,
    kv_scale=0.25,
)  # fmt: skip
KPOOL = FeedCase(make_batch([1, 1, 3], [2100, 700, 2300]), 8, 2048, 24, 16, BF16, seed=6, index_kpool=128)
# A pure decode, one request per token, a context past the top-k.
DECODE = FeedCase(make_batch([1, 1, 1, 1], [1, 129, 64, 65]), 4, 128, 1, 31, BF16, seed=3)


@pytest.mark.needs(NOPE_FORWARD)
@pytest.mark.checks(NOPE_ZERO_COPY)
@sized("feeds")
@pinned([PADDED, MIXED, DECODE, LARGE, WIDE, KPOOL], "c")
@given(c=feed_cases())
def test_builder_metadata_feeds_forward_to_the_oracle_output(c, subject, device):
    """The subject's builder's metadata, unchanged, makes its ``forward_mqa`` give the oracle's output over
    the batch for every scheduled token, and a pad token's request id is a row of the step's block table."""
    note(f"batch {c.batch!r}")
    try:
        fed = run_fed_step(subject, c, device)
    except NotFed as exc:
        pytest.skip(f"{NOT_APPLICABLE}{exc}")
    except PaddingNotFed as exc:
        event(f"not applicable: {exc}")
        reject()
    except ForwardNotApplicable as exc:  # a layer shape the impl refuses (as in the NoPE properties)
        event(f"not applicable: {exc}")
        reject()
    note(f"forward_mqa handed {fed.num_fed} of {c.batch.num_actual_tokens} tokens, path {fed.path}")
    check_pad_request_ids(fed)
    check_fed_path(fed)
    check_fed_output(fed)
