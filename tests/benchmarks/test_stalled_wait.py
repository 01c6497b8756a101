"""Benchmark (GPU): host time of a host-path ``build()`` while the stream is stalled by one step.

Opt-in (``--benchmark-enable``; ``tox -e bench``); GPU only: on CPU copies
run at once and events are always complete, so each case skips with a
``not applicable:`` reason.

The host path waits, before it rewrites its pinned staging buffer, only on
the event recorded after the previous step's upload, not on the stream.  Each
round (``benchmark.pedantic``, one step per round; :class:`StallRounds`):

1. setup (untimed): ``torch.cuda.synchronize()`` (nothing spills over from the
   last round), then the previous step: one host-path ``build()`` (its upload,
   its event), then ``torch.cuda._sleep(cycles)`` queued on the stream after
   that upload (``stall=after_upload``): the stream is busy for about one
   step while the host builds the next one;
2. the timed call: the next ``build()`` on the host, with no synchronisation
   (what is measured is how long the host is held; the stream is drained in
   the next round's setup);
3. teardown (untimed): whether the stall was still running when ``build()``
   returned (``stall_pending_after_build`` rounds of ``rounds``).

Separately from ``build()``'s time, the time spent inside the builder's event
wait is taken in every round (:mod:`fixtures.bench.stall`: vLLM's
``builder.inner._host_upload_done.synchronize``; for the reference, the
``synchronize`` of each event from ``config.runtime.event()``) and recorded in
``extra_info`` (``wait_min_s`` / ``wait_median_s`` / ``wait_max_s`` over
rounds, and the waits per round).  Expected: the wait is about the upload's
time, not the stall's.  The control ``stall=before_upload`` queues the sleep
before the previous step's upload instead, so its event is recorded behind
the stall and the wait takes about the rest of the stall: it shows the timer
sees a real wait.

The stall: ``SPARSE_MLA_BENCH_STALL_US`` microseconds (default 1000, about one
decode step's device time), turned into ``torch.cuda._sleep`` cycles by timing
a probe sleep with CUDA events once per session; the sleep's measured length is
recorded (``stall_measured_s``).  ``SPARSE_MLA_BENCH_STALL_ROUNDS`` rounds
(default 50) after ``WARMUP_ROUNDS`` untimed ones.  ``build()`` includes any
other stream synchronisation the builder does (a device-to-host read, say), so
a ``build()`` time near the stall while the wait is short points there.
"""

import os

import pytest
import torch

from fixtures.bench.stall import (
    STALL_POSITIONS,
    StallRounds,
    WaitTimer,
    cycles_for,
    gpu_stall,
    instrument_event_wait,
    measure_sleep,
    sleep_cycles_per_second,
)
from fixtures.bench.subjects import M_SWEEP, N_SWEEP, TOPK, build_step, pure_decode_batch, subject_info, timed
from fixtures.bench.timing import warmed_step
from fixtures.harness.step import new_config
from fixtures.plugin.gating import NOT_APPLICABLE
from fixtures.protocol import HOST_PATH

STALL_US = float(os.environ.get("SPARSE_MLA_BENCH_STALL_US", "1000"))
ROUNDS = int(os.environ.get("SPARSE_MLA_BENCH_STALL_ROUNDS", "50"))
WARMUP_ROUNDS = 3


def stall_skip_reason(device) -> str | None:
    if device.type != "cuda":
        return (
            f"{NOT_APPLICABLE}needs a GPU stream to stall (torch.cuda._sleep); on CPU copies run at once "
            "and events are always complete"
        )
    if not hasattr(torch.cuda, "_sleep"):
        return f"{NOT_APPLICABLE}this torch has no torch.cuda._sleep"
    return None


@pytest.mark.parametrize("m", M_SWEEP)
@pytest.mark.parametrize("n", N_SWEEP)
@pytest.mark.parametrize("stall", STALL_POSITIONS)
def test_host_wait_stalled(benchmark, bench_subject, device, stall, n, m):
    reason = stall_skip_reason(device)
    if reason:
        pytest.skip(reason)
    if HOST_PATH not in bench_subject.capabilities:
        pytest.skip(f"{NOT_APPLICABLE}subject {bench_subject.name!r} lacks {HOST_PATH}")
    batch = pure_decode_batch(n)
    config = new_config(device, m, TOPK, pin_memory=True)
    builder = timed(bench_subject).make_builder(config)
    timer = WaitTimer()
    timed_wait = instrument_event_wait(builder, config, timer)
    if timed_wait is None:
        pytest.skip(f"{NOT_APPLICABLE}subject {bench_subject.name!r}'s builder has no host-path event to time")
    index = device.index if device.index is not None else torch.cuda.current_device()
    cycles = cycles_for(STALL_US * 1e-6, sleep_cycles_per_second(index))

    with build_step(builder, batch) as step:
        warmed_step(step.run, device)
        taken = step.path()
        torch.cuda.synchronize(device)
        # Measure the path that was asked for, not another one.
        assert taken == "host", f"asked for the host path, the subject took {taken}"
        stall_fn, stall_pending = gpu_stall(cycles)
        rounds = StallRounds(
            step.run,
            timer,
            stall,
            synchronize=lambda: torch.cuda.synchronize(device),
            stall=stall_fn,
            stall_pending=stall_pending,
        )
        rounds.warm_up(WARMUP_ROUNDS)
        benchmark.group = f"host wait, stream stalled ({stall}), M={m}"
        benchmark.extra_info.update(
            kind="stalled_wait",
            stall=stall,
            path="host",
            n=n,
            m=m,
            topk=TOPK,
            device=device.type,
            stall_target_s=STALL_US * 1e-6,
            stall_cycles=cycles,
            timing="host time of build() with the stream stalled; no synchronisation in the timed call",
            timed=step.timed,
            timed_wait=timed_wait,
            **subject_info(bench_subject),
        )
        benchmark.pedantic(step.run, setup=rounds.setup, teardown=rounds.teardown, rounds=ROUNDS, iterations=1)
        torch.cuda.synchronize(device)
    rounds.keep(ROUNDS)
    benchmark.extra_info.update(
        timer.summary(),
        stall_measured_s=measure_sleep(cycles),
        stall_pending_after_build=sum(rounds.pending),
        rounds=len(rounds.pending),
    )
