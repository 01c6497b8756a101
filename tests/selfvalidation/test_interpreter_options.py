"""The Triton interpreter without its discarded overflow checks computes what it computed with them.

``drop_discarded_overflow_checks`` (fixtures/plugin/devices.py) turns off the
interpreter's ``sanitize_overflow`` option because the checks it adds end in a
``device_assert`` that the interpreter, whose ``debug`` option is never set,
throws away.  These tests run a kernel whose int32 arithmetic overflows both
ways and compare the two settings bit for bit, and show that the option is
left alone where ``debug`` would make the checks count.
"""

import dataclasses

import pytest
import torch
import triton
import triton.language as tl

from fixtures.plugin.devices import drop_discarded_overflow_checks

interpreter = pytest.importorskip("triton.runtime.interpreter")

pytestmark = pytest.mark.skipif(
    not isinstance(getattr(interpreter, "interpreter_builder", None), interpreter.InterpreterBuilder),
    reason="this triton has no module-level interpreter builder",
)


@triton.jit
def _wrapping_arithmetic(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, (a + b) * b - a, mask=mask)


def _run(options):
    builder = interpreter.interpreter_builder
    saved = builder.options
    builder.options = options
    try:
        info = torch.iinfo(torch.int32)
        a = torch.tensor([info.max, info.min, 7, info.max - 1, -3], dtype=torch.int32)
        b = torch.tensor([1, -1, 3, info.max, info.min], dtype=torch.int32)
        out = torch.zeros_like(a)
        _wrapping_arithmetic[(1,)](a, b, out, a.numel(), BLOCK=8)
        return out
    finally:
        builder.options = saved


@pytest.mark.skipif(triton.knobs.runtime.interpret is not True, reason="needs the Triton interpreter (--device cpu)")
def test_overflowing_kernel_gives_the_same_bits_with_and_without_the_checks():
    base = dataclasses.replace(interpreter.interpreter_builder.options, debug=False)
    checked = _run(dataclasses.replace(base, sanitize_overflow=True))
    unchecked = _run(dataclasses.replace(base, sanitize_overflow=False))
    assert torch.equal(checked, unchecked), (checked, unchecked)
    # the inputs really overflow: the int64 result differs from the stored int32 one
    info = torch.iinfo(torch.int32)
    a = torch.tensor([info.max, info.min, 7, info.max - 1, -3], dtype=torch.int64)
    b = torch.tensor([1, -1, 3, info.max, info.min], dtype=torch.int64)
    wide = (a + b) * b - a
    assert (wide != checked.to(torch.int64)).any()


def test_the_session_runs_without_the_discarded_checks_and_keeps_them_under_debug():
    builder = interpreter.interpreter_builder
    saved = builder.options
    try:
        if triton.knobs.runtime.interpret is True:
            # pytest_configure already dropped them for this CPU session
            assert builder.options.sanitize_overflow is False and builder.options.debug is False
        builder.options = dataclasses.replace(saved, debug=True, sanitize_overflow=True)
        assert drop_discarded_overflow_checks() is False
        assert builder.options.sanitize_overflow is True
        builder.options = dataclasses.replace(saved, debug=False, sanitize_overflow=True)
        assert drop_discarded_overflow_checks() is True
        assert builder.options.sanitize_overflow is False
    finally:
        builder.options = saved


@triton.jit
def _clamped_plus_one(x, limit):
    return tl.where(x + 1 < limit, x + 1, limit)


@triton.jit
def _seqlen_like(seq_ptr, out_ptr, n, LIMIT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(seq_ptr + offs, mask=mask, other=0)
    tl.store(out_ptr + offs, _clamped_plus_one(x * 2 - 1, LIMIT), mask=mask)


def _launch_both():
    seq = torch.tensor([0, 5, 300, 70, 1000, 2**20, 3], dtype=torch.int32)
    out = torch.zeros_like(seq)
    _seqlen_like[(2,)](seq, out, seq.numel(), LIMIT=256, BLOCK=4)
    info = torch.iinfo(torch.int32)
    a = torch.tensor([info.max, info.min, 7, info.max - 1, -3], dtype=torch.int32)
    b = torch.tensor([1, -1, 3, info.max, info.min], dtype=torch.int32)
    wrapped = torch.zeros_like(a)
    _wrapping_arithmetic[(1,)](a, b, wrapped, a.numel(), BLOCK=8)
    return out, wrapped


@pytest.mark.skipif(triton.knobs.runtime.interpret is not True, reason="needs the Triton interpreter (--device cpu)")
def test_the_language_patched_once_computes_what_the_per_launch_patch_computes():
    """``keep_language_patched`` (installed by this CPU session): two kernels, one calling a device
    function, give the same bits as under the interpreter's own patch-and-restore per launch; the
    patched language is the same objects from one launch to the next (no wrapper re-wrapped); and
    released, the language is triton's own again."""
    kept = interpreter._patch_lang
    assert getattr(kept, "_kept", False), "pytest_configure did not install keep_language_patched"
    kept.release()  # earlier launches of this session patched it
    original_add = tl.core.tensor.__add__
    first = _launch_both()
    patched_add = tl.core.tensor.__add__
    assert patched_add is not original_add, "the first launch did not patch the language"
    second = _launch_both()
    assert tl.core.tensor.__add__ is patched_add, "the language was patched again between launches"
    kept.release()
    try:
        assert tl.core.tensor.__add__ is original_add, "released, the language is not triton's own"
        interpreter._patch_lang = kept.stock
        stock = _launch_both()
        assert tl.core.tensor.__add__ is original_add, "triton's patch-and-restore left the language patched"
    finally:
        interpreter._patch_lang = kept
    for got, want in zip(first + second, stock + stock, strict=True):
        assert torch.equal(got, want), (got, want)
    expected = torch.clamp(torch.tensor([0, 5, 300, 70, 1000, 2**20, 3]) * 2, max=256).to(torch.int32)
    assert torch.equal(stock[0], expected), stock[0]
