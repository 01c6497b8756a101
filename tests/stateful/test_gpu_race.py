"""The pinned-buffer race on a real GPU (CUDA or ROCm; skips with a reason on CPU).

The stream is stalled with ``torch.cuda._sleep`` so the host runs ahead of
it; several pure-decode steps are built back to back, each followed by a
device-side snapshot of the persistent buffers (``clone`` on the stream, in
stream order, as the attention kernel would read them); then the host
synchronises and every snapshot must equal the oracle of its step.  A subject
that rewrites its pinned buffer before the previous upload executed hands a
stale step the values of a later one.  The builder uses the config's default
runtime on a cuda device (``fixtures.models.runtime.CudaRuntime``: real pinned
memory, non-blocking copies, ``torch.cuda.Event``), the same on ROCm.
"""

import pytest
import torch

from fixtures.harness.compare import compare_state
from fixtures.harness.contract import step_contract
from fixtures.harness.step import new_config
from fixtures.inputs.batches import make_batch
from fixtures.protocol import HOST_PATH
from oracles.step import expected_path, expected_state

M = 64
TOPK = 2048
# Back to back, each step's indptr differs from the one before (sizes and contexts change).
STEP_SEQ_LENS = [[3 + 11 * i + step for i in range(n)] for step, n in enumerate((5, 9, 3, 12, 12, 1, 7, 30))]
# Stall lengths in GPU clock cycles (~0.1 s, ~1 s at 1-2 GHz); the longer one only if the
# shorter ended before the host had issued the first step.
STALL_CYCLES = (200_000_000, 2_000_000_000)


def run_stalled(subject, device, cycles):
    """Build all steps behind a stall; returns (stalled_after_first_step, paths, snapshots, config)."""
    # Without a --baseline twin: reading the release's buffers would synchronise the
    # shared stream and end the stall this test depends on.
    subject = getattr(subject, "unpaired", subject)
    config = new_config(device, M, TOPK)
    builder = subject.make_builder(config)
    buffers = builder.buffers()
    batches = [make_batch([1] * len(s), s) for s in STEP_SEQ_LENS]
    torch.cuda.synchronize(device)
    stream = torch.cuda.current_stream(device)
    torch.cuda._sleep(cycles)
    stall_done = torch.cuda.Event()
    stall_done.record(stream)
    paths, snapshots, ran_ahead = [], [], None
    for batch in batches:
        paths.append(builder.build(batch).path)
        snapshots.append({name: buf.clone() for name, buf in buffers.items()})
        if ran_ahead is None:
            ran_ahead = not stall_done.query()
    torch.cuda.synchronize(device)
    return ran_ahead, batches, paths, snapshots, config


@pytest.mark.gpu
@pytest.mark.needs(HOST_PATH)
def test_pinned_buffer_race_on_gpu_with_stalled_stream(subject, device):
    for cycles in STALL_CYCLES:
        ran_ahead, batches, paths, snapshots, config = run_stalled(subject, device, cycles)
        if ran_ahead:
            break
    else:
        pytest.fail(f"the stream stall ({STALL_CYCLES[-1]} cycles) ended before the host built the first step")
    for i, (batch, path, snapshot) in enumerate(zip(batches, paths, snapshots, strict=True)):
        assert path == expected_path(batch, speculative=False, pin_memory=True), f"step {i + 1}: took {path}"
        expected = expected_state(batch, None, TOPK, M, **step_contract(subject))
        compare_state(snapshot, expected, f"as read on the stream after step {i + 1}")
    config.allocator.check()
