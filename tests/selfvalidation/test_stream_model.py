"""The stream model (fixtures/models/stream_model.py), a stand-in for a GPU stream on CPU.

Checks that the model really is adversarially late (copies read their source
when executed, not when issued), keeps stream order, lets events and device
operations drain exactly what they must, and that its pending-read guard
reports a host write into a pending copy's source with the buffer, the step
and the indices.  Then a fixed two-step program: the reference subject raises
no alarm, and the two broken event disciplines are caught on it.
"""

import pytest
import torch

from fixtures.harness.step import new_config, run_step
from fixtures.inputs.batches import make_batch
from fixtures.models.launches import stood_in_launch
from fixtures.models.stream_model import OnModelDevice, PendingReadViolation, StreamModelRuntime
from fixtures.subjects.mutants import MUTANTS
from fixtures.subjects.reference import ReferenceSubject, device_inputs
from fixtures.subjects.reference_kernel import launch_sparse_seqlen


def runtime_with_buffers(n=4):
    rt = StreamModelRuntime("cpu")
    host = rt.host_empty(n, torch.int32)
    dev = torch.zeros(n, dtype=torch.int32)
    rt.adopt_device_buffers({"dev": dev})
    return rt, host, dev


def test_copy_reads_its_source_when_executed_not_when_issued():
    rt, host, dev = runtime_with_buffers()
    host.copy_(torch.tensor([1, 2, 3, 4], dtype=torch.int32))
    rt.copy_(dev, host)
    assert dev.tolist() == [0, 0, 0, 0] and rt.pending == 1
    rt.synchronize()
    assert dev.tolist() == [1, 2, 3, 4] and rt.pending == 0


def test_host_write_into_pending_source_is_reported_with_buffer_step_and_indices():
    rt, host, dev = runtime_with_buffers()
    rt.step = 1
    rt.copy_(dev, host)
    host.numpy()[2] = 9  # the host runs ahead and rewrites the staging buffer
    rt.step = 2
    with pytest.raises(PendingReadViolation) as err:
        rt.synchronize()
    message = str(err.value)
    assert "pinned host buffer #0" in message and "dev[0:4]" in message
    assert "issued at step 1" in message and "executed at step 2" in message and "indices [2]" in message


def test_event_synchronizes_up_to_its_record_point_only():
    rt, host, dev = runtime_with_buffers()
    before = rt.event()
    before.record()  # recorded before the copy: waiting on it does not cover the copy
    rt.copy_(dev, host)
    after = rt.event()
    after.record()
    assert before.query() and not after.query()
    before.synchronize()
    assert rt.pending == 1 and not after.query()
    after.synchronize()
    assert rt.pending == 0 and after.query()


def test_in_place_device_ops_are_queued_in_stream_order():
    rt, host, dev = runtime_with_buffers()
    host.copy_(torch.tensor([5, 6, 7, 8], dtype=torch.int32))
    with rt.running():
        rt.copy_(dev, host)
        dev[1:].fill_(0)  # queued behind the copy
        assert rt.pending == 2
    assert dev.tolist() == [0, 0, 0, 0]
    rt.synchronize()
    assert dev.tolist() == [5, 0, 0, 0]


def test_host_work_runs_ahead_and_device_reads_drain_the_queue_first():
    rt, host, dev = runtime_with_buffers()
    with rt.running():
        rt.copy_(dev, host)
        host.numpy()  # host-only: does not wait for the device
        host_sum = host + 1  # host-only arithmetic
        assert rt.pending == 1 and host_sum.tolist() == [1, 1, 1, 1]
        doubled = dev * 2  # reads device memory: the queue drains first
        assert rt.pending == 0 and doubled.tolist() == [0, 0, 0, 0]


def test_triton_launch_drains_the_queue_first():
    rt, host, dev = runtime_with_buffers()
    host.copy_(torch.tensor([1, 1, 1, 1], dtype=torch.int32))
    qsl, seq_lens = device_inputs(make_batch([1, 1, 1, 1], [3, 4, 5, 6]), torch.device("cpu"))
    with rt.running():
        rt.copy_(dev, host)
        out = torch.zeros(4, dtype=torch.int32)  # a fresh tensor: created without waiting
        assert rt.pending == 1
        launch_sparse_seqlen(qsl, seq_lens, 64, 1, out)
        assert rt.pending == 0 and dev.tolist() == [1, 1, 1, 1]
    assert out.tolist() == [3, 4, 5, 6]


def test_a_stood_in_kernel_is_one_launch_that_drains_the_queue_and_runs_in_stream_order():
    """AITER's kernels stood in on CPU (``stood_in_launch``): one ledger launch, the queue drained first, its own
    torch work the suite's (nothing more in the ledger); outside the model, it just runs."""
    rt, host, dev = runtime_with_buffers()
    host.copy_(torch.tensor([7, 7, 7, 7], dtype=torch.int32))
    seen = []
    with rt.running():
        rt.copy_(dev, host)
        stood_in_launch("AITER a_kernel", lambda: seen.append(dev.tolist()))
    assert seen == [[7, 7, 7, 7]] and rt.pending == 0
    assert [(op.kind, op.what) for op in rt.ledger.ops] == [("h2d", "copy_"), ("launch", "AITER a_kernel")]
    assert stood_in_launch("AITER a_kernel", lambda: 3) == 3


def test_a_read_back_is_one_sync_and_hands_back_host_memory():
    """``.cpu()`` of device memory is one device-to-host read; what it hands back is host memory (a fresh copy,
    as on a GPU, though CPU torch hands back the tensor itself), so ``.numpy()`` of it reads nothing more."""
    rt, host, dev = runtime_with_buffers()
    with rt.running():
        read = dev.cpu()
        read.numpy()
        read += 1  # host work: the device buffer is not written
    assert [op.kind for op in rt.ledger.ops] == ["d2h"] and dev.tolist() == [0, 0, 0, 0]


# ----- what real code does: Tensor.copy_ and host tensors the model never made -----
def test_a_subjects_own_non_blocking_upload_is_queued_and_guarded_like_runtime_copy():
    """vLLM uploads with ``device.copy_(host, non_blocking=True)`` and writes the host
    buffer through numpy: the model queues that copy and catches a rewrite before it ran."""
    rt, _, dev = runtime_with_buffers()
    staging = torch.zeros(4, dtype=torch.int32)  # host memory the runtime did not allocate
    staging.numpy()[:] = [1, 2, 3, 4]
    with rt.running():
        rt.step = 1
        dev.copy_(staging, non_blocking=True)
        assert rt.pending == 1
        staging.numpy()[0] = 7  # numpy view of the host buffer: invisible to torch, seen at execution
    assert dev.tolist() == [0, 0, 0, 0]  # read outside the model: memory as it is now
    rt.step = 2
    with pytest.raises(PendingReadViolation, match=r"issued at step 1 and executed at step 2; indices \[0\]"):
        rt.synchronize()


def test_a_blocking_upload_drains_the_stream_and_runs_at_once():
    rt, host, dev = runtime_with_buffers()
    other = torch.zeros(4, dtype=torch.int32)
    rt.adopt_device_buffers({"other": other})
    source = torch.tensor([4, 3, 2, 1], dtype=torch.int32)
    with rt.running():
        rt.copy_(other, host)
        dev.copy_(source)  # no non_blocking: the host waits for the stream, then copies
        assert rt.pending == 0 and dev.tolist() == [4, 3, 2, 1]


def test_host_tensors_the_model_never_saw_never_drain_the_stream():
    """Metadata ``*_cpu`` fields, the upper bound and numpy views are host memory:
    reading them leaves queued device work queued."""
    import numpy as np

    rt, host, dev = runtime_with_buffers()
    bound = torch.from_numpy(np.array([5, 9, 3], dtype=np.int32))
    with rt.running():
        rt.copy_(dev, host)
        clamped = np.minimum(bound[:2].numpy(), 4)
        starts = np.asarray(bound, dtype=np.int32)
        total = bound.sum() + torch.tensor(1)
        assert rt.pending == 1
    assert clamped.tolist() == [4, 4] and starts.tolist() == [5, 9, 3] and int(total) == 18


def test_a_factory_makes_device_memory_only_when_told_a_device():
    rt, host, dev = runtime_with_buffers()
    with rt.running():
        on_device = torch.zeros(2, dtype=torch.int32, device="cpu")
        on_host = torch.zeros(2, dtype=torch.int32)
        rt.copy_(dev, host)
        on_device.fill_(3)  # device memory: queued behind the copy
        on_host.fill_(5)  # host memory: runs at once
        assert rt.pending == 2
    assert on_device.tolist() == [0, 0] and on_host.tolist() == [5, 5]
    rt.synchronize()
    assert on_device.tolist() == [3, 3]


# Two pure-decode host-path steps whose pinned contents differ, then the stream is synchronised.
PROGRAM = [make_batch([1, 1], [5, 9]), make_batch([1, 1], [6, 10])]


def run_program(subject):
    runtime = StreamModelRuntime("cpu")
    config = new_config("cpu", 4, 64, runtime=runtime)
    builder = OnModelDevice(subject.make_builder(config), runtime)
    for step, batch in enumerate(PROGRAM, 1):
        runtime.step = step
        assert run_step(builder, batch, config).result.path == "host"
    runtime.synchronize()
    return builder.buffers()


def test_reference_subject_raises_no_alarm_on_back_to_back_host_steps():
    buffers = run_program(ReferenceSubject())
    assert buffers["paged_kv_indptr"].tolist() == [0, 6, 16, 16, 16]


@pytest.mark.parametrize("name", ["no_event_wait", "event_before_copy"])
def test_broken_event_discipline_is_caught_on_back_to_back_host_steps(name):
    with pytest.raises(PendingReadViolation, match="issued at step 1"):
        run_program(MUTANTS[name]())


def test_a_host_tensor_at_a_freed_device_address_is_still_host_memory():
    """Regression: the model kept device storages by address only, so a host tensor that the
    allocator placed where a freed device tensor had been was taken for device memory (found when
    the ledger of a host-path step showed a device-to-host read of a host-only ``.numpy()``)."""
    rt = StreamModelRuntime("cpu")
    dev = torch.zeros(4096, dtype=torch.int32)
    rt.adopt_device_buffers({"dev": dev})
    address = dev.untyped_storage().data_ptr()
    del dev
    fresh = [torch.zeros(4096, dtype=torch.int32) for _ in range(8)]
    assert all(t.untyped_storage().data_ptr() != address for t in fresh), "the device storage must be held"
    assert all(rt._is_host(t) for t in fresh)
