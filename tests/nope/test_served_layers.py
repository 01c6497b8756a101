"""A layer outside the forward's own declaration is refused when its forward is made, before any kernel runs.

A subject's ``forward_domain()`` says which query head counts per rank its forward serves
(``fixtures.protocol.ForwardDomain.serves_heads``; vLLM's ROCm subject: AITER's MLA helper,
``AiterMLAHelper.is_valid_num_heads``, of the release).  Every count past real models' splits that it does not
serve (``fixtures.inputs.sizes.HEADS_PAST_SPLITS``) must be refused by the forward's construction
(``ForwardNotApplicable``): a head count the backend's kernels have none for that reaches them crashes or
computes garbage on the GPU (vLLM PR 36855: GLM-5 at TP 8; issue 51232: Kimi-K3's 12 heads a rank).  Plain
(no hypothesis): the candidates are few and construction is cheap, so every profile runs each one.
"""

from __future__ import annotations

import pytest
import torch

from fixtures.harness.forward import new_forward
from fixtures.inputs import sizes
from fixtures.inputs.forward_cases import ForwardCase
from fixtures.protocol import NOPE_FORWARD, ForwardNotApplicable, forward_domain


@pytest.mark.needs(NOPE_FORWARD)
def test_a_head_count_the_forward_does_not_serve_is_refused_when_it_is_made(subject, device):
    serves = forward_domain(subject).serves_heads
    if serves is None:
        pytest.skip("not applicable: the subject's forward serves every head count (its forward_domain)")
    refused = [h for h in sizes.HEADS_PAST_SPLITS if not serves(h)]
    if not refused:
        pytest.skip(f"not applicable: the subject's forward serves every count of {sizes.HEADS_PAST_SPLITS}")
    made = []
    for heads in refused:
        layer = ForwardCase(4, 2, 2, heads, 512, 0, torch.bfloat16, torch.bfloat16)
        try:
            new_forward(subject, layer, device)
        except ForwardNotApplicable:
            continue
        made.append(heads)
    assert not made, (
        f"the subject's forward was made for {made} heads a rank, which its own forward_domain says it does not "
        "serve: construction must refuse them (ForwardNotApplicable) before any kernel is reached"
    )
