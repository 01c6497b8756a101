"""Timing the builder's event wait, and stalling a GPU stream for a known time.

The host path waits, before it rewrites its pinned staging buffer, on the
event recorded after the previous step's upload (``event.synchronize()``).
:class:`WaitTimer` times every such wait; :func:`timed_event` puts it on one
event; :func:`instrument_event_wait` finds the builder's event:

* the ``vllm`` subject: ``builder.inner._host_upload_done`` (one
  ``torch.cuda.Event`` made by the builder's ``__init__``, recorded after every
  upload), where that attribute exists and is not None;
* any other subject: protocol subjects make their events through
  ``config.runtime.event()`` (the reference: one new event per host step,
  ``torch.cuda.Event`` on a GPU), so the runtime's ``event`` is wrapped and
  every event it hands out is timed.

:func:`sleep_cycles_per_second` measures how many ``torch.cuda._sleep``
cycles this GPU spins per second (CUDA events around a probe sleep), and
:func:`cycles_for` turns a stall duration into cycles.
"""

from __future__ import annotations

import functools
import statistics
import time


class WaitTimer:
    """Durations of timed waits, grouped into rounds.

    :meth:`begin_round` opens a round; each timed wait adds its duration to
    the open round.  Waits before the first round (warm-up, a round's setup
    that has not opened its round yet) go to :attr:`unassigned`.
    """

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.rounds: list[list[float]] = []
        self.unassigned: list[float] = []
        self._open = False

    def begin_round(self) -> None:
        self.rounds.append([])
        self._open = True

    def close_round(self) -> None:
        """Waits until the next :meth:`begin_round` go to :attr:`unassigned`."""
        self._open = False

    def reset(self) -> None:
        self.rounds.clear()
        self.unassigned.clear()
        self._open = False

    def add(self, seconds: float) -> None:
        (self.rounds[-1] if self._open else self.unassigned).append(seconds)

    def wrap(self, fn):
        """``fn`` timed: each call's duration (also when it raises) is added."""

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = self.clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(self.clock() - start)

        timed.__wrapped_by_wait_timer__ = self
        return timed

    def per_round(self) -> list[float]:
        """Total wait per round."""
        return [sum(r) for r in self.rounds]

    def waits_per_round(self) -> list[int]:
        return [len(r) for r in self.rounds]

    def summary(self) -> dict:
        """``extra_info`` fields: the per-round total wait (min, median, max, mean) and the wait counts."""
        totals = self.per_round()
        counts = self.waits_per_round()
        if not totals:
            return {"wait_rounds": 0}
        return {
            "wait_rounds": len(totals),
            "wait_min_s": min(totals),
            "wait_median_s": statistics.median(totals),
            "wait_max_s": max(totals),
            "wait_mean_s": statistics.fmean(totals),
            "waits_per_round_min": min(counts),
            "waits_per_round_max": max(counts),
        }


class TimedEventProxy:
    """An event whose ``synchronize`` is timed, for event types that take no instance attributes."""

    def __init__(self, event, timer: WaitTimer):
        self._event = event
        self.synchronize = timer.wrap(event.synchronize)

    def __getattr__(self, item):
        return getattr(self._event, item)


def timed_event(event, timer: WaitTimer):
    """``event`` with its ``synchronize`` timed by ``timer``; use the returned object in its place.

    The event itself is returned, its ``synchronize`` replaced by an instance
    attribute (``torch.cuda.Event`` takes one), or, for a type that cannot
    hold one, a :class:`TimedEventProxy`.  ``None`` stays ``None``; an event
    already timed by ``timer`` is returned as it is.
    """
    if event is None:
        return None
    current = getattr(event, "synchronize", None)
    if current is None:
        raise TypeError(f"{type(event).__name__} has no synchronize(); not an event")
    if getattr(current, "__wrapped_by_wait_timer__", None) is timer:
        return event
    try:
        event.synchronize = timer.wrap(current)
    except (AttributeError, TypeError):
        return TimedEventProxy(event, timer)
    return event


VLLM_EVENT_ATTRIBUTE = "_host_upload_done"


def instrument_event_wait(builder, config, timer: WaitTimer) -> str | None:
    """Time the builder's host-path event wait with ``timer``; says what is timed, None if nothing can be.

    Call after the builder is made and before its first timed step.
    """
    inner = getattr(builder, "inner", None)
    if inner is not None:
        if getattr(inner, VLLM_EVENT_ATTRIBUTE, None) is None:
            return None
        setattr(inner, VLLM_EVENT_ATTRIBUTE, timed_event(getattr(inner, VLLM_EVENT_ATTRIBUTE), timer))
        return f"builder.inner.{VLLM_EVENT_ATTRIBUTE}.synchronize()"
    runtime = config.runtime
    make_event = runtime.event

    def event(*args, **kwargs):
        return timed_event(make_event(*args, **kwargs), timer)

    runtime.event = event
    return "synchronize() of every event from config.runtime.event()"


STALL_POSITIONS = ("after_upload", "before_upload")


class StallRounds:
    """The untimed parts of one ``benchmark.pedantic`` round of the stalled-wait benchmark.

    :meth:`setup`: drain the stream (``synchronize``), run the previous step
    (``step``: its upload, then its event) and queue the stall (``stall``)
    after that step's upload (``after_upload``) or before it
    (``before_upload``, the control), then open a :class:`WaitTimer` round, so
    that only the timed step's waits land in it.  :meth:`teardown`: note
    whether the stall was still running when the timed step returned
    (``stall_pending``) and close the round.  The callables are injected so
    the order can be checked without a GPU.
    """

    def __init__(self, step, timer: WaitTimer, position: str, *, synchronize, stall, stall_pending):
        if position not in STALL_POSITIONS:
            raise ValueError(f"stall position must be one of {STALL_POSITIONS}, got {position!r}")
        self.step, self.timer, self.position = step, timer, position
        self.synchronize, self.stall, self.stall_pending = synchronize, stall, stall_pending
        self.pending: list[bool] = []

    def setup(self) -> None:
        self.synchronize()
        if self.position == "before_upload":
            self.stall()
        self.step()
        if self.position == "after_upload":
            self.stall()
        self.timer.begin_round()

    def teardown(self) -> None:
        self.pending.append(bool(self.stall_pending()))
        self.timer.close_round()

    def warm_up(self, rounds: int) -> None:
        """``rounds`` whole untimed rounds; then the timer and the notes start empty."""
        for _ in range(rounds):
            self.setup()
            self.step()
            self.teardown()
        self.timer.reset()
        self.pending.clear()

    def keep(self, rounds: int) -> None:
        """Keep the first ``rounds`` rounds (the timed ones; a profiler may run more)."""
        del self.timer.rounds[rounds:], self.pending[rounds:]


def gpu_stall(cycles: int):
    """``(stall, stall_pending)`` for :class:`StallRounds` on the current GPU stream:
    ``torch.cuda._sleep(cycles)`` then an event recorded after it; pending while that event has not completed."""
    import torch

    done = torch.cuda.Event()

    def stall():
        torch.cuda._sleep(cycles)
        done.record()

    return stall, lambda: not done.query()


def cycles_for(seconds: float, cycles_per_second: float) -> int:
    """``torch.cuda._sleep`` cycles that spin for about ``seconds``."""
    if seconds <= 0 or cycles_per_second <= 0:
        raise ValueError(f"need seconds > 0 and cycles_per_second > 0, got {seconds}, {cycles_per_second}")
    return max(1, round(seconds * cycles_per_second))


PROBE_CYCLES = 10_000_000


@functools.cache
def _timed_sleeps(cycles: int, repeats: int) -> list[float]:
    """Seconds each of ``repeats`` ``torch.cuda._sleep(cycles)`` took on the current device (CUDA events)."""
    import torch

    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return times


def sleep_cycles_per_second(device_index: int, probe_cycles: int = PROBE_CYCLES, repeats: int = 5) -> float:
    """``torch.cuda._sleep`` cycles per second on this GPU: the median over ``repeats`` timed probes."""
    import torch

    with torch.cuda.device(device_index):
        torch.cuda._sleep(probe_cycles)  # warm-up: the kernel's first launch
        torch.cuda.synchronize()
        return statistics.median(probe_cycles / t for t in _timed_sleeps(probe_cycles, repeats))


def measure_sleep(cycles: int, repeats: int = 3) -> float:
    """Seconds ``torch.cuda._sleep(cycles)`` takes on the current device (median of ``repeats``)."""
    import torch

    torch.cuda.synchronize()
    return statistics.median(_timed_sleeps(cycles, repeats))
