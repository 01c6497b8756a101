"""Stateful fuzzing of one builder across build steps.

Each test drives one builder of the session's subject through programs of
up to 20 steps (pure decode growing, shrinking or keeping its size, mixed,
prefill-only, multi-token decode, CUDA-graph padded as vLLM's GPU model
runner pads a uniform decode batch, one host-path clause off, and, for
a speculative config, an overstated ``seq_lens_cpu_upper_bound``), comparing
the whole persistent buffers with a model after every step.  A failure
prints the shrunk program, one ``state.<rule>(...)`` line per step, with each
step's batch noted as a ``make_batch(...)`` call.

The eager test comes first: its invariant reads the live buffers after every
step, so a wrong buffer fails at the step that wrote it.  The stream-model
test reads them through consumers that run when the model stream reaches
them (one step later at the earliest), and adds the pinned-buffer race.
"""

import contextlib

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test
from hypothesis.statistics import collector, describe_statistics

from fixtures.harness.machine import EagerBuilderMachine, StreamModelBuilderMachine, machine_for
from fixtures.plugin.profiles import STATEFUL_STEPS, sized
from fixtures.protocol import DEVICE_PATH, PERSISTENT_BUFFERS


def machine_settings() -> settings:
    """The loaded profile with the machines' own size (``fixtures.plugin.profiles.SIZES["stateful"]``)."""
    return sized("stateful", stateful_step_count=STATEFUL_STEPS, report_multiple_bugs=False)


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


@pytest.mark.costly
@pytest.mark.needs(DEVICE_PATH, PERSISTENT_BUFFERS)
def test_builder_steps_match_model(subject, device, request):
    """Whole persistent buffers and the path taken match the model after every
    step, with the config's own runtime (on CPU: eager copies, and pinned
    memory stood in by plain host memory; on a GPU: the real stream)."""
    with statistics_for(request.node):
        run_state_machine_as_test(machine_for(EagerBuilderMachine, subject, device), settings=machine_settings())


@pytest.mark.costly
@pytest.mark.needs(DEVICE_PATH, PERSISTENT_BUFFERS)
def test_builder_steps_on_stream_model_stand_in_for_gpu_stream(subject, device, request):
    """The programs on the stream model, a stand-in for an adversarially slow
    GPU stream: copies read their source late, a queued consumer (stand-in for
    the attention kernel) snapshots the buffers in stream order and must see
    the model's buffers of its step, and a host write into a pending copy's
    source fails, naming the buffer, the step and the indices."""
    with statistics_for(request.node):
        machine = machine_for(StreamModelBuilderMachine, subject, device)
        run_state_machine_as_test(machine, settings=machine_settings())
