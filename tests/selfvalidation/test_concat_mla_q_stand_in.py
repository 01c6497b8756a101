"""vLLM's ``concat_mla_q`` stood in on CPU (``fixtures.subjects.vllm.stand_ins.concat_mla_q_on_cpu``): the op's
own checks raise as the op does, what its kernel assumes of its arguments fails naming it, and otherwise the
concatenation lands in ``q_out``'s first rows (needs no vLLM)."""

from __future__ import annotations

import pytest
import torch

from fixtures.subjects.vllm.forward.base import CONCAT_MLA_Q_SHAPE_ERRORS
from fixtures.subjects.vllm.stand_ins import concat_mla_q_on_cpu

BF16 = torch.bfloat16


def parts(tokens=3, heads=4, nope=512, rope=64, dtype=BF16, rows=5):
    ql = torch.randn(tokens, heads, nope).to(dtype)
    pe = torch.randn(tokens, heads, rope).to(dtype)
    out = torch.zeros(rows, heads, nope + rope, dtype=dtype)
    return ql, pe, out


def test_the_concatenation_lands_in_the_first_rows_and_nothing_else():
    ql, pe, out = parts()
    concat_mla_q_on_cpu(ql, pe, out)
    assert torch.equal(out[:3], torch.cat((ql, pe), dim=-1)) and not out[3:].any()
    strided = torch.randn(3, 8, 512).to(BF16)[:, ::2]  # stride 1 in dim 2 only, as vLLM's bmm output may be
    _, pe, out = parts()
    concat_mla_q_on_cpu(strided, pe, out)
    assert torch.equal(out[:3, :, :512], strided)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"nope": 256}, "nope_dim must be a multiple of 512, got 256"),
        ({"rope": 32}, "rope_dim must be 64, got 32"),
        ({"dtype": torch.float32}, "Invalid dtype, only supports float16 and bfloat16"),
    ],
)
def test_the_ops_own_checks_raise_as_the_op_does(kw, message):
    ql, pe, out = parts(**kw)
    with pytest.raises(RuntimeError, match=message):
        concat_mla_q_on_cpu(ql, pe, out)
    shape_refusal = bool(CONCAT_MLA_Q_SHAPE_ERRORS.search(message))
    assert shape_refusal == ("nope" in kw or "rope" in kw), "only a layer shape the op refuses is not applicable"


def test_a_layout_the_op_checks_fails_and_only_a_strided_ql_nope_is_a_refusal():
    """A strided ql_nope the op refuses loudly (not applicable: vLLM's MQA bmm never hands one); a q_out of the
    wrong width or a strided q_pe is vLLM's own bug."""
    ql, pe, out = parts()
    for bad, message in (
        ((ql.transpose(1, 2).contiguous().transpose(1, 2), pe, out), "ql_nope must have stride 1 in dim 2"),
        ((ql, pe.transpose(1, 2).contiguous().transpose(1, 2), out), "q_pe must have stride 1 in dim 2"),
        ((ql, pe, out[..., :-1]), "q_out.size"),
    ):
        with pytest.raises(RuntimeError, match=message) as info:
            concat_mla_q_on_cpu(*bad)
        assert bool(CONCAT_MLA_Q_SHAPE_ERRORS.search(str(info.value))) == message.startswith("ql_nope")


def test_without_tokens_only_the_ops_own_checks_apply():
    """The op returns after its checks when there are no tokens: its kernel reads nothing, so what it assumes
    of its arguments cannot be broken (the mutants profile's control drew an fp16 ql_nope of 0 tokens)."""
    ql, pe, out = parts(tokens=0)
    concat_mla_q_on_cpu(ql.half(), pe, out)
    assert not out.any()
    with pytest.raises(RuntimeError, match="rope_dim must be 64"):
        concat_mla_q_on_cpu(*parts(tokens=0, rope=32))


@pytest.mark.parametrize(
    "broken, assumption",
    [
        (lambda ql, pe, out: (ql, pe.half(), out), "q_pe and q_out in ql_nope's dtype"),
        (lambda ql, pe, out: (ql, pe, out.half()), "q_pe and q_out in ql_nope's dtype"),
        (lambda ql, pe, out: (ql, pe[:2], out), "q_pe holds ql_nope's tokens and heads"),
        (lambda ql, pe, out: (ql, pe, out[:2]), "q_out holds ql_nope's tokens and heads"),
        (lambda ql, pe, out: (ql, pe[:, :2], out), "q_pe holds ql_nope's tokens and heads"),
    ],
)
def test_what_its_kernel_assumes_fails_naming_it(broken, assumption):
    """The kernel reads all three in ql_nope's dtype and indexes them by ql_nope's tokens and heads without
    checking: a call that breaks that is vLLM's bug, never computed."""
    with pytest.raises(AssertionError, match=assumption):
        concat_mla_q_on_cpu(*broken(*parts()))
