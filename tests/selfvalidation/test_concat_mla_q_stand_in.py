"""vLLM's ``concat_mla_q`` stood in on CPU (:mod:`fixtures.subjects.vllm.concat_mla_q`): each source vLLM has built
the op from raises as that source does, what its kernel assumes of its arguments fails naming it, and otherwise the
concatenation lands in ``q_out``'s first rows (needs no vLLM); the installed release's binary names the source the
stand-in follows and holds every message it raises (needs vLLM)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from fixtures.subjects.vllm.concat_mla_q import (
    SCALAR_NAMES,
    SHAPE_MESSAGES,
    SOURCES,
    binary_holds,
    concat_mla_q_on_cpu,
    installed_source,
    torch_library,
    typed_pointer_message,
)
from fixtures.subjects.vllm.forward.base import CONCAT_MLA_Q_SHAPE_ERRORS

BF16 = torch.bfloat16

pytestmark = pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.name.replace(" ", "_"))


def parts(tokens=3, heads=4, nope=512, rope=64, dtype=BF16, rows=5):
    ql = torch.randn(tokens, heads, nope).to(dtype)
    pe = torch.randn(tokens, heads, rope).to(dtype)
    out = torch.zeros(rows, heads, nope + rope, dtype=dtype)
    return ql, pe, out


def test_the_concatenation_lands_in_the_first_rows_and_nothing_else(source):
    ql, pe, out = parts()
    concat_mla_q_on_cpu(ql, pe, out, source)
    assert torch.equal(out[:3], torch.cat((ql, pe), dim=-1)) and not out[3:].any()
    strided = torch.randn(3, 8, 512).to(BF16)[:, ::2]  # stride 1 in dim 2 only, as vLLM's bmm output may be
    _, pe, out = parts()
    concat_mla_q_on_cpu(strided, pe, out, source)
    assert torch.equal(out[:3, :, :512], strided)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"nope": 256}, "nope_dim must be a multiple of 512, got 256"),
        ({"rope": 32}, "rope_dim must be 64, got 32"),
        ({"dtype": torch.float32}, "dtype"),
    ],
)
def test_the_ops_own_checks_raise_as_the_op_does(source, kw, message):
    ql, pe, out = parts(**kw)
    expected = source.dtype_check if message == "dtype" else message
    with pytest.raises(RuntimeError, match=expected):
        concat_mla_q_on_cpu(ql, pe, out, source)
    shape_refusal = bool(CONCAT_MLA_Q_SHAPE_ERRORS.search(expected))
    assert shape_refusal == ("nope" in kw or "rope" in kw), "only a layer shape the op refuses is not applicable"


def test_a_layout_the_op_checks_fails_and_only_a_strided_ql_nope_is_a_refusal(source):
    """A strided ql_nope the op refuses loudly (not applicable: vLLM's MQA bmm never hands one); a q_out of the
    wrong width or a strided q_pe is vLLM's own bug."""
    ql, pe, out = parts()
    for bad, message in (
        ((ql.transpose(1, 2).contiguous().transpose(1, 2), pe, out), "ql_nope must have stride 1 in dim 2"),
        ((ql, pe.transpose(1, 2).contiguous().transpose(1, 2), out), "q_pe must have stride 1 in dim 2"),
        ((ql, pe, out[..., :-1]), "q_out.size"),
    ):
        with pytest.raises(RuntimeError, match=message) as info:
            concat_mla_q_on_cpu(*bad, source)
        assert bool(CONCAT_MLA_Q_SHAPE_ERRORS.search(str(info.value))) == message.startswith("ql_nope")


def test_without_tokens_the_op_returns_after_the_checks_its_source_makes_first(source):
    """The op returns when there are no tokens: its kernel reads nothing, so what it assumes of its arguments
    cannot be broken; the stable-ABI source checks ql_nope's dtype before that return, the legacy one after it."""
    ql, pe, out = parts(tokens=0)
    concat_mla_q_on_cpu(ql.half(), pe, out, source)
    assert not out.any()
    with pytest.raises(RuntimeError, match="rope_dim must be 64"):
        concat_mla_q_on_cpu(*parts(tokens=0, rope=32), source)
    fp32 = (ql.float(), pe, out)
    if source.dtype_check_first:
        with pytest.raises(RuntimeError, match=source.dtype_check):
            concat_mla_q_on_cpu(*fp32, source)
    else:
        concat_mla_q_on_cpu(*fp32, source)


@pytest.mark.parametrize("broken", ["q_pe", "q_out"])
def test_mixed_dtypes_raise_from_the_typed_pointers_or_fail_as_raw_bits(source, broken):
    """A ``q_pe`` or ``q_out`` in another dtype than ``ql_nope``'s: a typed pointer raises with its message (the
    stable ABI's, spelled as the installed binary spells it; ATen's, bare); the legacy kernel would read or write
    raw bits, a failure naming the assumption."""
    ql, pe, out = parts()
    args = (ql, pe.half(), out) if broken == "q_pe" else (ql, pe, out.half())
    if source.typed_pointers:
        prefix = "" if source.pointer_check_in_torch else None
        with pytest.raises(RuntimeError, match=typed_pointer_message(BF16, torch.float16, prefix)):
            concat_mla_q_on_cpu(*args, source)
    else:
        with pytest.raises(AssertionError, match="q_pe and q_out in ql_nope's dtype"):
            concat_mla_q_on_cpu(*args, source)


@pytest.mark.parametrize(
    "broken, assumption",
    [
        (lambda ql, pe, out: (ql, pe[:2], out), "q_pe holds ql_nope's tokens and heads"),
        (lambda ql, pe, out: (ql, pe, out[:2]), "q_out holds ql_nope's tokens and heads"),
        (lambda ql, pe, out: (ql, pe[:, :2], out), "q_pe holds ql_nope's tokens and heads"),
    ],
)
def test_what_its_kernel_assumes_fails_naming_it(source, broken, assumption):
    """The kernel indexes ``q_pe`` and ``q_out`` by ql_nope's tokens and heads without checking: a call that breaks
    that is vLLM's bug, never computed."""
    with pytest.raises(AssertionError, match=assumption):
        concat_mla_q_on_cpu(*broken(*parts()), source)


def test_the_installed_binary_names_the_source_and_holds_every_message_the_stand_in_raises(source):
    """The stand-in follows the source the installed release's extension was built from (the binary that registers
    the op carries that source's marker and not the other's), and every message it raises for that source is in
    that binary: a release built from another source, or a message the stand-in made up, fails here."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed here (tox -e vllm installs it)")
    installed = installed_source()
    if installed is None:
        pytest.skip("no extension of the installed vLLM registers concat_mla_q (its backends never call it)")
    if installed.source is not source:
        pytest.skip(f"the installed vLLM builds concat_mla_q from the {installed.source.name} source")
    messages = [*SHAPE_MESSAGES, source.dtype_check]
    pointers = [
        typed_pointer_message(d, BF16, installed.scalar_prefix).removesuffix("BFloat16")
        for d in SCALAR_NAMES
        if d != torch.float32 and source.typed_pointers
    ]
    if source.pointer_check_in_torch:  # ATen's TensorBase::data_ptr<T> builds it at run time from its parts
        parts = ["expected scalar type ", " but found "]
        assert all(binary_holds(torch_library(), *(p.encode() for p in parts))), f"{torch_library()} lacks {parts}"
        assert installed.scalar_prefix == "", "ATen names the expected type bare"
    else:
        messages += pointers
    found = binary_holds(installed.binary, *(m.encode() for m in messages))
    missing = [m for m, holds in zip(messages, found, strict=True) if not holds]
    assert not missing, f"{installed.binary.name} lacks messages the stand-in raises: {missing}"
    for other in (s for s in SOURCES if s is not source):  # no other source's identifying messages, or fewer
        held = all(binary_holds(installed.binary, *(m.encode() for m in (other.marker, *other.also))))
        assert not held or len(other.also) < len(source.also), f"it also holds the {other.name} source's messages"
    assert installed.citation.startswith(f"vllm-project/vllm {source.paths[0]} ") and "@ v" in installed.citation
