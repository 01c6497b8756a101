"""The downstream route against the change's base: which kernels serve a layer is what the change leaves alone.

The change under review (``--vllm-overlay``) claims two fast paths, the host
build of the decode metadata and the zero-copy query; which kernel the
downstream attention hands the query to is not among them.  That choice
(AITER's ASM decode, persistent or split-KV with its LSE and head bucket,
AITER's Triton sparse MLA, vLLM's Triton sparse kernel for a layer with sinks
or past AITER's head kernels, or a refusal) is vLLM's rule, and its oracle is
the file the change starts from: ``--vllm-base``'s, loaded beside the subject
(``subject.change_base``) and driven on the same case.  Not the release: a
release may route a layer otherwise by design (vLLM 0.34.0 sends a rope-free
bf16 decode to ``rocm_sparse_attn_decode_bf16``, the base and the change to
``rocm_sparse_attn_prefill``).

A route (the forward's ``route``) is every downstream method called and every
kernel it called, in order: the kernel, the heads and dtype of the query it is
handed (after vLLM's head padding) and whether it is given attention sinks or
AITER's persistent work metadata.  The two must be equal call by call; a layer
one refuses the other must refuse alike (the same exception type), and where
both return, the outputs of the tokens with keys are equal bit for bit (the
same kernels on the same values).  A forward that records no route, or a run
without ``--vllm-base``, is not applicable.
"""

import pytest
import torch
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from fixtures.harness.compare import assert_bits_equal
from fixtures.harness.forward import (
    copy_dtype,
    expected_path,
    new_forward,
    pass_over_path_finding,
    saw_forward_call,
    with_keys,
)
from fixtures.inputs.forward_cases import FP8_DTYPE, build_inputs, forward_cases
from fixtures.inputs.pinned_forwards import KPOOL, PINNED, SINK_LAYERS, WIDE, bf16_sink_layer, case
from fixtures.inputs.strategies import pinned
from fixtures.protocol import NOPE_FORWARD, ForwardNotApplicable, NotApplicableHere, SuiteError

BF16 = torch.bfloat16


# The layers at the route's thresholds, beside the sink properties' own (SINK_LAYERS), each with the GPU
# architecture it runs on (None: the subject's own; a name: the subject's on_architecture, where it has one): bf16
# with sinks on exactly 32, 64 and 128 heads (AITER's return-LSE head kernels, no padding; past 128, vLLM's
# Triton kernel); an fp8 cache with sinks on 192 heads, past AITER's fp8 return-LSE kernels (16 and 128 heads): a
# layer vLLM refuses ("increase tensor_parallel_size"), so a route that serves it differs; and on an MI300X
# (gfx942), where vLLM sends a bf16 sink layer of 33 to 64 heads to its Triton kernel, 32, 48, 64 and 128 heads.
ROUTE_LAYERS = [(c, None) for c in SINK_LAYERS]
ROUTE_LAYERS += [
    (bf16_sink_layer(h, base, seed), None) for h, base, seed in ((32, 0.0, 21), (64, 4.0, 22), (128, -3.0, 23))
]
ROUTE_LAYERS += [
    (bf16_sink_layer(h, base, seed), "gfx942")
    for h, base, seed in ((32, 4.0, 25), (48, -3.0, 26), (64, 0.0, 27), (128, 4.0, 28))
]
if FP8_DTYPE is not None:
    fp8_sinks = case(2, 2, 192, 8, BF16, BF16, rope=4, kv_cache_dtype="fp8", sink_base=0.0, min_keys=1, seed=24)
    ROUTE_LAYERS.append((fp8_sinks, None))


@pytest.fixture(scope="session")
def change_base(subject):
    """The change's base beside ``subject`` (its ``change_base``: with ``--vllm-base`` and an overlay); else the
    test is not applicable."""
    base = getattr(subject, "change_base", None)
    if base is None:
        pytest.skip("not applicable: no change base beside the subject (--vllm-base with --vllm-overlay)")
    return base


def routed(c, subject, device):
    """``(route, outcome, output, metadata)`` of ``forward_mqa`` on the case's own ``ql_nope``: the route the
    forward recorded, ``"returned"`` or what it raised (its type: a refusal's message is the subject's own words),
    the output and the step handed in; None where the branch it took is a known finding's (announced: the
    branch is the legality properties' to judge, and a query handed down in another dtype routes otherwise).
    The suite's own limits propagate."""
    try:
        config, forward = new_forward(subject, c, device)
    except ForwardNotApplicable:
        return [], "refused at construction", None, None
    if not hasattr(forward, "route"):
        pytest.skip(f"not applicable: subject {subject.name!r}'s forward records no downstream route")
    inputs = build_inputs(c, device)
    ql = inputs.ql_nope
    saw_forward_call(config, ql.shape[0], inputs.metadata)
    want = expected_path(c, ql, copy_dtype(forward, ql, inputs.q_pe), subject)

    def known(took) -> bool:
        return took not in (None, want) and pass_over_path_finding(subject, c, ql, took, want)

    try:
        result = forward.forward_mqa((ql, inputs.q_pe), inputs.kv_cache, inputs.metadata)
    except (SuiteError, NotApplicableHere):
        raise
    except Exception as exc:  # noqa: BLE001 - the subject's refusal or failure is part of its route
        if known(getattr(exc, "forward_path", None)):  # the branch that handed the query on (DrivenForward)
            return None
        return list(forward.route), f"raised {type(exc).__name__}", None, inputs.metadata
    if known(result.path):
        return None
    return list(forward.route), "returned", result.output, inputs.metadata


def check_route_equals_the_base(c, subject, change_base, device) -> None:
    seen = routed(c, subject, device)
    if seen is None:
        return
    mine, outcome, output, metadata = seen
    theirs, base_outcome, base_output, _ = routed(c, change_base, device)
    note(f"route {mine} ({outcome}); the base's {theirs} ({base_outcome})")
    assert (mine, outcome) == (theirs, base_outcome), (
        f"the downstream route differs from the change's base (--vllm-base): {mine} then {outcome}, where the "
        f"base takes {theirs} then {base_outcome}"
    )
    event(f"route: {' -> '.join(mine) or 'none'} ({outcome})")
    if output is not None and metadata is not None:
        n = c.num_actual_tokens
        keyed = with_keys(metadata)
        assert_bits_equal(output[:n][keyed], base_output[:n][keyed], "output vs the change's base's")


# The NoPE properties' pinned layers as examples, the forward of a thousand tokens among them (the step at vLLM's
# sizes; the drawn examples reach a 2048 top-k and key-pooled buffers), but for the two-token 2048 top-k and key-pool
# layers (seconds each under the interpreter, their routes drawn small here).
@pytest.mark.needs(NOPE_FORWARD)
@pinned([c for c in PINNED if c not in (WIDE, KPOOL)], "c")
@given(c=forward_cases())
def test_route_equals_the_base_forward(c, subject, change_base, device):
    """Every drawn layer and step: the downstream route (and the output) of the change's base."""
    check_route_equals_the_base(c, subject, change_base, device)


@pytest.mark.needs(NOPE_FORWARD)
@settings(max_examples=2 * len(ROUTE_LAYERS))
@given(layer=st.sampled_from(ROUTE_LAYERS))
def test_layers_at_the_route_thresholds_take_the_base_route(layer, subject, change_base, device):
    """Each pinned layer at a threshold of the route (:data:`ROUTE_LAYERS`), on its GPU architecture, generated:
    the base's route."""
    c, arch = layer
    if arch is None:
        check_route_equals_the_base(c, subject, change_base, device)
        return
    if arch not in getattr(subject, "architectures", ()):
        event(f"not applicable: subject {subject.name!r} runs no layer on {arch} (its architectures)")
        return
    note(f"on {arch}")
    with subject.on_architecture(arch):
        check_route_equals_the_base(c, subject, change_base, device)
