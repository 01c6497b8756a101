"""The Triton interpreter's speed-ups change nothing a kernel computes.

``replay_repeated_launches`` (fixtures/plugin/launch_replay.py) answers a launch that repeats an earlier one
bit for bit with what that one wrote: the last tests show it replays only such a launch.

``drop_discarded_overflow_checks`` (fixtures/plugin/devices.py) turns off the
interpreter's ``sanitize_overflow`` option because the checks it adds end in a
``device_assert`` that the interpreter, whose ``debug`` option is never set,
throws away.  These tests run a kernel whose int32 arithmetic overflows both
ways and compare the two settings bit for bit, and show that the option is
left alone where ``debug`` would make the checks count.
"""

import dataclasses
import sys

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


# ----- a launch that repeats an earlier one bit for bit is replayed (fixtures/plugin/launch_replay.py) -----------
_CAP = tl.constexpr(6)


@triton.jit
def _capped_plus_one(seq_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(seq_ptr + offs, mask=mask, other=0)
    tl.store(out_ptr + offs, tl.where(x + 1 < _CAP, x + 1, _CAP), mask=mask)


@triton.jit
def _increment_in_place(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


@triton.jit
def _refused_past_eight(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.static_assert(BLOCK < 8)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


def _replayer():
    from fixtures.plugin.launch_replay import installed

    replayer = installed()
    if replayer is None:
        pytest.skip("the launch replay is not installed in this session (GPU, or SPARSE_MLA_NO_REPLAY=1)")
    return replayer


def _counts(replayer):
    return replayer.stats["replayed"], replayer.stats["ran"]


@pytest.mark.skipif(triton.knobs.runtime.interpret is not True, reason="needs the Triton interpreter (--device cpu)")
def test_a_repeated_launch_is_replayed_and_any_difference_in_what_it_reads_runs_the_kernel(monkeypatch):
    """The replay answers a launch equal to a remembered one with what that one wrote, and runs the kernel on
    any byte of an argument's storage that differs (the output's bytes the kernel leaves alone included), on
    another grid or scalar, and on a module constant the kernel names that a test lowered.  Every launch, the
    replayed ones too, is seen where the suite counts launches."""
    from fixtures.models.launches import observing_triton_launches

    replayer = _replayer()
    seq = torch.tensor([3, 5, 9, 0, 1], dtype=torch.int32)
    seen = []
    with observing_triton_launches(lambda kernel, kwargs: seen.append(kernel)):

        def launch(out, n=5, grid=(3,)):
            before = _counts(replayer)
            _capped_plus_one[grid](seq, out, n, BLOCK=2)
            after = _counts(replayer)
            return "replayed" if after[0] > before[0] else "ran" if after[1] > before[1] else "neither"

        first = torch.full((6,), -7, dtype=torch.int32)
        assert launch(first) == "ran"
        assert first.tolist() == [4, 6, 6, 1, 2, -7]
        again = torch.full((6,), -7, dtype=torch.int32)
        assert launch(again) == "replayed"
        assert torch.equal(again, first)
        other_tail = torch.full((6,), -8, dtype=torch.int32)  # a byte the kernel never writes differs
        assert launch(other_tail) == "ran"
        assert other_tail.tolist() == [4, 6, 6, 1, 2, -8]
        seq[3] = 4  # an input byte differs
        changed = torch.full((6,), -7, dtype=torch.int32)
        assert launch(changed) == "ran"
        assert changed.tolist() == [4, 6, 6, 5, 2, -7]
        fewer = torch.full((6,), -7, dtype=torch.int32)
        assert launch(fewer, n=4) == "ran"  # a scalar differs
        assert fewer.tolist() == [4, 6, 6, 5, -7, -7]
        one_program = torch.full((6,), -7, dtype=torch.int32)
        assert launch(one_program, grid=(1,)) == "ran"  # the grid differs
        assert one_program.tolist() == [4, 6, -7, -7, -7, -7]
        monkeypatch.setattr(sys.modules[__name__], "_CAP", tl.constexpr(5))
        lowered = torch.full((6,), -7, dtype=torch.int32)
        assert launch(lowered) == "ran"  # a global the kernel names differs
        assert lowered.tolist() == [4, 5, 5, 5, 2, -7]
    assert len(seen) == 7, "a replayed launch must still be a launch to the suite's observers"


@pytest.mark.skipif(triton.knobs.runtime.interpret is not True, reason="needs the Triton interpreter (--device cpu)")
def test_an_in_place_launch_repeated_on_its_own_output_runs_again_and_a_failing_launch_is_never_remembered():
    replayer = _replayer()
    replayed = replayer.stats["replayed"]
    x = torch.arange(4, dtype=torch.int32)
    _increment_in_place[(1,)](x, 4, BLOCK=4)
    ran = replayer.stats["ran"]
    _increment_in_place[(1,)](x, 4, BLOCK=4)  # its input is now the first launch's output
    assert replayer.stats["ran"] == ran + 1
    assert x.tolist() == [2, 3, 4, 5]
    for _ in range(2):  # the interpreter refuses the launch each time: nothing to replay
        ran = replayer.stats["ran"]
        with pytest.raises(interpreter.InterpreterError):
            _refused_past_eight[(1,)](torch.zeros(8, dtype=torch.int32), torch.zeros(8, dtype=torch.int32), BLOCK=8)
        assert replayer.stats["ran"] == ran and replayer.stats["replayed"] == replayed


@pytest.mark.skipif(triton.knobs.runtime.interpret is not True, reason="needs the Triton interpreter (--device cpu)")
def test_the_suites_torch_modes_see_a_replayed_launch_as_they_see_one_that_runs():
    """The stream model, the write recorders and the dispatch-level ledger watch torch calls through modes; the
    interpreter's own host views and copies back are torch calls they see.  A replayed launch makes the same
    calls, and nothing of the replay's own comparing and copying shows."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    replayer = _replayer()

    class Functions(TorchFunctionMode):
        def __init__(self, seen):
            super().__init__()
            self.seen = seen

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.seen.append(("function", getattr(func, "__name__", str(func))))
            return func(*args, **(kwargs or {}))

    class Dispatches(TorchDispatchMode):
        def __init__(self, seen):
            super().__init__()
            self.seen = seen

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(("dispatch", str(func)))
            return func(*args, **(kwargs or {}))

    seq = torch.tensor([1, 2, 3, 40], dtype=torch.int32)
    calls = []
    for _ in range(2):
        out = torch.zeros(4, dtype=torch.int32)
        seen: list = []
        replayed = replayer.stats["replayed"]
        with Functions(seen), Dispatches(seen):
            _capped_plus_one[(2,)](seq, out, 4, BLOCK=2)
        calls.append((replayer.stats["replayed"] > replayed, seen, out.tolist()))
    (ran_first, ran_seen, ran_out), (replayed_second, replayed_seen, replayed_out) = calls
    assert not ran_first and replayed_second, "the second launch was not replayed"
    assert ran_seen, "the modes saw nothing of a launch that ran: this check would be empty"
    assert replayed_seen == ran_seen
    assert replayed_out == ran_out == [2, 3, 4, 6]
