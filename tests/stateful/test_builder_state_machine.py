"""Stateful fuzzing of one builder across build steps.

Each test drives one builder of the session's subject through programs of
up to 20 steps (pure decode growing, shrinking or keeping its size, mixed,
prefill-only, multi-token decode, CUDA-graph padded as vLLM's GPU model
runner pads a uniform decode batch, one host-path clause off, and, for
a speculative config, an overstated ``seq_lens_cpu_upper_bound``), comparing
the whole persistent buffers with a model after every step.  A failure
prints the shrunk program, one ``state.<rule>(...)`` line per step, with each
step's batch noted as a ``make_batch(...)`` call.  Each test then runs the
same machine at vLLM's sizes: a pinned program (``run_vllm_sized_program``),
then a few generated programs on a builder of 8192 tokens with steps of
hundreds of requests (``fixtures.harness.machine.AtVllmSizes``); the small
programs come first, where most bugs show at the least cost.

The eager test comes first: its invariant reads the live buffers after every
step, so a wrong buffer fails at the step that wrote it.  The stream-model
test reads them through consumers that run when the model stream reaches
them (one step later at the earliest), and adds the pinned-buffer race.
"""

import contextlib

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test
from hypothesis.statistics import collector, describe_statistics

from fixtures.harness.machine import (
    LARGE_SEQS,
    EagerBuilderMachine,
    LargeEagerBuilderMachine,
    LargeStreamModelBuilderMachine,
    StreamModelBuilderMachine,
    machine_for,
)
from fixtures.inputs.steps import vllm_sized_program
from fixtures.plugin.profiles import STATEFUL_STEPS, sized
from fixtures.protocol import DEVICE_PATH, PERSISTENT_BUFFERS


def machine_settings(kind: str = "stateful") -> settings:
    """The loaded profile with the machines' own size (``fixtures.plugin.profiles.SIZES[kind]``)."""
    return sized(kind, stateful_step_count=STATEFUL_STEPS, report_multiple_bugs=False)


@contextlib.contextmanager
def statistics_for(item):
    """Hypothesis's pytest plugin keeps statistics (generated programs, events such
    as ``cudagraph padded`` steps) only for ``@given`` items; a machine run inside
    a plain test hands them to its item the same way, for the run summary."""

    def note(stats):
        stats["nodeid"] = item.nodeid
        item.hypothesis_statistics = describe_statistics(stats)

    with collector.with_value(note):
        yield


def run_vllm_sized_program(machine: type, check) -> None:
    """The machine's pinned program, first: a builder at vLLM's sizes through
    ``fixtures.inputs.steps.vllm_sized_program`` (grown to the large builder's 512 decodes, kept, shrunk to one
    request, grown back, padded, a long prefill, grown again), ``check(state)`` after every step, as
    the generated programs are checked (then a few generated programs at that size, ``AtVllmSizes``).  It
    runs as one hypothesis example, so a failure prints the machine's notes; a profile without
    pinned examples (``mutants``: only the generated ones may find a bug) leaves it out."""
    if Phase.explicit not in settings.default.phases:
        return

    @settings(max_examples=1, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.just("the pinned program"))
    def program(_):
        state = machine()
        state.configure(topk=2048, config="host_capable", large=True)
        for batch in vllm_sized_program(max_num_seqs=LARGE_SEQS):
            state.step(batch)
            if state.passed_over is not None:  # a known finding or hazard ended the program (BuilderMachine.step)
                break
            check(state)
        state.teardown()

    program()


@pytest.mark.costly
@pytest.mark.needs(DEVICE_PATH, PERSISTENT_BUFFERS)
def test_builder_steps_match_model(subject, device, request):
    """Whole persistent buffers and the path taken match the model after every
    step (of the small programs, then those at vLLM's sizes), with the config's own runtime (on CPU: eager copies, and pinned
    memory stood in by plain host memory; on a GPU: the real stream)."""
    machine = machine_for(EagerBuilderMachine, subject, device)
    with statistics_for(request.node):
        run_state_machine_as_test(machine, settings=machine_settings())
    run_vllm_sized_program(machine, lambda state: state.persistent_buffers_match_model())
    large = machine_for(LargeEagerBuilderMachine, subject, device)
    run_state_machine_as_test(large, settings=machine_settings("stateful_large"))


@pytest.mark.costly
@pytest.mark.needs(DEVICE_PATH, PERSISTENT_BUFFERS)
def test_builder_steps_on_stream_model_stand_in_for_gpu_stream(subject, device, request):
    """The programs on the stream model, a stand-in for an adversarially slow
    GPU stream: copies read their source late, a queued consumer (stand-in for
    the attention kernel) snapshots the buffers in stream order and must see
    the model's buffers of its step, and a host write into a pending copy's
    source fails, naming the buffer, the step and the indices."""
    machine = machine_for(StreamModelBuilderMachine, subject, device)
    with statistics_for(request.node):
        run_state_machine_as_test(machine, settings=machine_settings())
    run_vllm_sized_program(machine, lambda state: state.consumers_read_model_buffers())
    large = machine_for(LargeStreamModelBuilderMachine, subject, device)
    run_state_machine_as_test(large, settings=machine_settings("stateful_large"))
