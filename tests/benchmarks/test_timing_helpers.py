"""The benchmarks' own helpers, checked on CPU: the wait timer, the event wrapper, the stall rounds,
the subjects a session measures and what their timed step is.

These run with the benchmarks (``--benchmark-enable``; ``tox -e bench``) and
time nothing.  The stalled-wait benchmark itself needs a GPU; its parts that
do not (which waits land in which round, the order of a round's setup, the
event each subject's builder waits on) are checked here with fake events and
with the real builders on CPU.
"""

import sys

import pytest

from fixtures.bench.stall import (
    StallRounds,
    TimedEventProxy,
    WaitTimer,
    cycles_for,
    instrument_event_wait,
    timed_event,
)
from fixtures.bench.subjects import (
    BASELINE_ENV,
    TOPK,
    baseline_spec,
    bench_subjects,
    build_step,
    pure_decode_batch,
    subject_info,
    subject_label,
    timed,
)
from fixtures.harness.step import new_config
from fixtures.models.runtime import Event
from fixtures.plugin.gating import NOT_APPLICABLE
from fixtures.plugin.run_state import run_state
from fixtures.protocol import HOST_PATH
from fixtures.subjects.vllm.loading import overlay as vllm_overlay


class FakeClock:
    """A clock that advances by ``tick`` seconds on every read."""

    def __init__(self, tick: float = 1.0):
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


class FakeEvent:
    """An event that counts its calls (instance attributes allowed)."""

    def __init__(self):
        self.calls = []

    def record(self, *args):
        self.calls.append("record")

    def synchronize(self):
        self.calls.append("synchronize")
        return "synced"

    def query(self):
        return True


class SlottedEvent:
    """An event type that takes no instance attributes."""

    __slots__ = ("calls",)

    def __init__(self):
        self.calls = []

    def record(self):
        self.calls.append("record")

    def synchronize(self):
        self.calls.append("synchronize")


# ----- WaitTimer ---------------------------------------------------------------------------
def test_wait_timer_groups_waits_into_rounds():
    timer = WaitTimer(clock=FakeClock(tick=0.5))
    wait = timer.wrap(lambda: "done")
    assert wait() == "done"  # before any round: unassigned
    timer.begin_round()
    wait()
    wait()
    timer.close_round()
    wait()  # between rounds: unassigned
    timer.begin_round()
    wait()
    assert timer.unassigned == [0.5, 0.5]
    assert timer.rounds == [[0.5, 0.5], [0.5]]
    assert timer.per_round() == [1.0, 0.5]
    assert timer.waits_per_round() == [2, 1]
    summary = timer.summary()
    assert summary["wait_rounds"] == 2
    assert (summary["wait_min_s"], summary["wait_median_s"], summary["wait_max_s"]) == (0.5, 0.75, 1.0)
    assert (summary["waits_per_round_min"], summary["waits_per_round_max"]) == (1, 2)
    timer.reset()
    assert timer.rounds == [] and timer.unassigned == [] and timer.summary() == {"wait_rounds": 0}


def test_wait_timer_times_a_wait_that_raises():
    timer = WaitTimer(clock=FakeClock())
    timer.begin_round()

    def failing():
        raise RuntimeError("device lost")

    with pytest.raises(RuntimeError, match="device lost"):
        timer.wrap(failing)()
    assert timer.rounds == [[1.0]]


# ----- timed_event -------------------------------------------------------------------------
def test_timed_event_times_synchronize_in_place():
    timer, event = WaitTimer(clock=FakeClock()), FakeEvent()
    timer.begin_round()
    same = timed_event(event, timer)
    assert same is event
    event.record()
    assert event.synchronize() == "synced"
    assert event.calls == ["record", "synchronize"]
    assert timer.rounds == [[1.0]]
    # Wrapping twice with the same timer does not time a wait twice.
    assert timed_event(event, timer) is event
    event.synchronize()
    assert timer.rounds == [[1.0, 1.0]]


def test_timed_event_falls_back_to_a_proxy():
    timer, event = WaitTimer(clock=FakeClock()), SlottedEvent()
    timer.begin_round()
    proxy = timed_event(event, timer)
    assert isinstance(proxy, TimedEventProxy)
    proxy.record()
    proxy.synchronize()
    assert event.calls == ["record", "synchronize"]
    assert timer.rounds == [[1.0]]


def test_timed_event_none_and_non_events():
    timer = WaitTimer()
    assert timed_event(None, timer) is None
    with pytest.raises(TypeError, match="not an event"):
        timed_event(object(), timer)


def test_timed_event_on_the_runtime_event_type():
    timer = WaitTimer(clock=FakeClock())
    timer.begin_round()
    event = timed_event(Event(), timer)
    event.record()
    event.synchronize()
    assert timer.rounds == [[1.0]]


# ----- instrument_event_wait ---------------------------------------------------------------
class FakeVllmBuilder:
    def __init__(self, event):
        self.inner = type("Inner", (), {})()
        self.inner._host_upload_done = event


def test_instrument_vllm_style_builder():
    timer, event = WaitTimer(clock=FakeClock()), FakeEvent()
    builder = FakeVllmBuilder(event)
    where = instrument_event_wait(builder, config=None, timer=timer)
    assert where == "builder.inner._host_upload_done.synchronize()"
    timer.begin_round()
    builder.inner._host_upload_done.synchronize()
    assert timer.rounds == [[1.0]] and event.calls == ["synchronize"]


def test_instrument_vllm_style_builder_without_host_event():
    assert instrument_event_wait(FakeVllmBuilder(None), config=None, timer=WaitTimer()) is None
    bare = type("Bare", (), {})()
    bare.inner = type("Inner", (), {})()
    assert instrument_event_wait(bare, config=None, timer=WaitTimer()) is None


def test_instrument_protocol_builder_wraps_runtime_events():
    config = new_config("cpu", 16, 4)
    timer = WaitTimer(clock=FakeClock())
    where = instrument_event_wait(object(), config, timer)
    assert "config.runtime.event()" in where
    timer.begin_round()
    first, second = config.runtime.event(), config.runtime.event()
    first.synchronize()
    second.synchronize()
    assert timer.rounds == [[1.0, 1.0]]


# ----- StallRounds -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "position, order",
    [("after_upload", ["sync", "step", "stall"]), ("before_upload", ["sync", "stall", "step"])],
)
def test_stall_rounds_order_and_round_bookkeeping(position, order):
    log, timer = [], WaitTimer(clock=FakeClock())
    wait = timer.wrap(lambda: log.append("wait"))

    def step():
        wait()  # every step waits once, as the host path does
        log.append("step")

    pending = iter([True, False, True, True, True])
    rounds = StallRounds(
        step,
        timer,
        position,
        synchronize=lambda: log.append("sync"),
        stall=lambda: log.append("stall"),
        stall_pending=lambda: next(pending),
    )
    rounds.setup()
    assert [e for e in log if e != "wait"] == order
    rounds.step()
    rounds.teardown()
    # The setup's step waited before the round opened: only the timed step's wait is in the round.
    assert timer.rounds == [[1.0]] and timer.unassigned == [1.0]
    rounds.warm_up(1)
    assert timer.rounds == [] and rounds.pending == []
    for _ in range(3):
        rounds.setup()
        rounds.step()
        rounds.teardown()
    rounds.keep(2)
    assert timer.waits_per_round() == [1, 1] and rounds.pending == [True, True]
    with pytest.raises(ValueError, match="stall position"):
        StallRounds(step, timer, "sideways", synchronize=None, stall=None, stall_pending=None)


def test_cycles_for():
    assert cycles_for(1e-3, 1.5e9) == 1_500_000
    assert cycles_for(1e-12, 1e9) == 1
    with pytest.raises(ValueError):
        cycles_for(0, 1e9)
    with pytest.raises(ValueError):
        cycles_for(1e-3, 0)


# ----- the subjects a session measures -----------------------------------------------------
def test_baseline_spec():
    assert baseline_spec({}) == "reference"
    assert baseline_spec({BASELINE_ENV: "none"}) is None
    assert baseline_spec({BASELINE_ENV: ""}) is None
    assert baseline_spec({BASELINE_ENV: " fixtures.subjects.mutants:x "}) == "fixtures.subjects.mutants:x"


def test_bench_subjects_adds_the_reference_baseline():
    other = type("Other", (), {"name": "other"})()
    names = [s.name for s in bench_subjects(other, environ={})]
    assert names == ["reference", "other"]
    assert bench_subjects(other, environ={BASELINE_ENV: "none"}) == [other]
    same = type("Ref", (), {"name": "reference"})()
    assert bench_subjects(same, environ={}) == [same]


def test_session_measures_its_subject_and_the_baseline(pytestconfig):
    session = run_state(pytestconfig)["subject"]
    measured = bench_subjects(session)
    assert measured[-1] is session
    assert len(measured) == (1 if session.name == "reference" or baseline_spec() is None else 2)


def test_subject_labels(bench_subject):
    label, info = subject_label(bench_subject), subject_info(bench_subject)
    assert label.startswith(bench_subject.name) and info["subject_label"] == label
    assert info["subject"] == bench_subject.name
    backend = getattr(bench_subject, "backend", None)
    overlaid = backend is not None and vllm_overlay.active() is not None
    overlaid = overlaid and vllm_overlay.loaded_from_overlay(backend)
    assert ("+ overlay " in label) == overlaid
    assert ("vllm_overlay_file_sha256" in info) == overlaid
    if getattr(bench_subject, "version", None):
        assert bench_subject.version in label


# ----- the real builders on CPU ------------------------------------------------------------
def test_event_wait_instrumentation_on_the_real_builder(bench_subject, device):
    """Every host-path step after the first waits exactly once on the event the timer sees."""
    if HOST_PATH not in bench_subject.capabilities:
        pytest.skip(f"{NOT_APPLICABLE}subject {bench_subject.name!r} lacks {HOST_PATH}")
    config = new_config(device, 64, TOPK, pin_memory=True)
    builder = bench_subject.make_builder(config)
    timer = WaitTimer()
    assert instrument_event_wait(builder, config, timer) is not None
    with build_step(builder, pure_decode_batch(8)) as step:
        assert step.path() == "host"
        for _ in range(3):
            timer.begin_round()
            step.run()
            timer.close_round()
    assert timer.waits_per_round() == [1, 1, 1]


def test_vllm_step_makes_its_inputs_once(pytestconfig, device, monkeypatch):
    """The vllm subject's timed call is vLLM's build(): its CommonAttentionMetadata is made once."""
    subject = timed(run_state(pytestconfig)["subject"])  # with --vllm-overlay: without the release beside it
    if subject.name != "vllm":
        pytest.skip(f"{NOT_APPLICABLE}checks the vllm subject's step; this session's subject is {subject.name!r}")
    driver = sys.modules["fixtures.subjects.vllm.builder"]
    made = []
    real = driver.common_attn_metadata
    monkeypatch.setattr(driver, "common_attn_metadata", lambda *a, **k: made.append(1) or real(*a, **k))
    calls = []
    builder = subject.make_builder(new_config(device, 64, TOPK, pin_memory=False))
    real_build = builder.inner.build
    monkeypatch.setattr(builder.inner, "build", lambda *a, **k: calls.append(a) or real_build(*a, **k))
    with build_step(builder, pure_decode_batch(4)) as step:
        step.path()
        for _ in range(3):
            step.run()
    assert len(made) == 1 and len(calls) == 4
    assert "build(0, common_attn_metadata)" in step.timed


def test_reference_session_imports_no_vllm(pytestconfig):
    """A default (reference) benchmark session never imports vLLM (this file runs after the benchmarks)."""
    if run_state(pytestconfig)["subject"].name != "reference":
        pytest.skip(f"{NOT_APPLICABLE}this session's subject is not the reference")
    if pytestconfig.getoption("--expect"):
        pytest.skip(f"{NOT_APPLICABLE}--expect probes the stack, which may import vLLM's dependencies")
    assert not [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]
