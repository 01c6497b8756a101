"""The real-stream ledger (``fixtures/models/real_stream.py``) classifies what reaches the device as
the stream model does: driven here on CPU, with ``meta`` tensors standing in for device memory (no
GPU on this machine; CPU torch cannot pin memory, so every host source reads as pageable)."""

import pytest
import torch

from fixtures.harness.device_work import broken_host_clauses, run_program, run_program_on_real_stream
from fixtures.inputs.steps import grow_keep_grow_shrink
from fixtures.models.ledger import Ledger
from fixtures.models.real_stream import DeviceReadOnMeta, Flag, buffer_namer, classify, observing_events, recording
from fixtures.models.stream_model import StreamModelRuntime
from fixtures.subjects.reference import ReferenceSubject
from fixtures.subjects.reference_kernel import launch_sparse_seqlen

DEVICE = "meta"


@pytest.fixture
def buffers():
    return {
        "paged_kv_indptr": torch.zeros(9, dtype=torch.int32, device=DEVICE),
        "req_id_per_token": torch.zeros(8, dtype=torch.int32, device=DEVICE),
    }


def entries(ledger):
    return [(op.kind, op.what, op.target, op.pinned, op.blocking) for op in ledger.ops]


def test_copies_are_classified_by_direction_pinnedness_and_blocking(buffers):
    host = torch.arange(9, dtype=torch.int32)
    ledger = Ledger()
    with recording(ledger, DEVICE, buffers):
        buffers["paged_kv_indptr"].copy_(host, non_blocking=True)
        buffers["paged_kv_indptr"][2:5].copy_(host[2:5])
        host.to(DEVICE, non_blocking=True)
        buffers["req_id_per_token"][2:4].copy_(buffers["paged_kv_indptr"][0:2])
    assert entries(ledger) == [
        ("h2d", "copy_", "paged_kv_indptr[0:9]", False, False),
        ("h2d", "copy_", "paged_kv_indptr[2:5]", False, True),
        ("h2d", "_to_copy", "", False, False),
        ("d2d", "copy_", "req_id_per_token[2:4]", None, None),
    ]


def test_device_operators_are_launches_with_their_target_and_views_are_nothing(buffers):
    ledger = Ledger()
    with recording(ledger, DEVICE, buffers):
        indptr = buffers["paged_kv_indptr"]
        tail = indptr[5:]  # a view: no device work
        torch.empty(4, device=DEVICE)  # an allocation: no device work
        tail.fill_(7)
        torch.cumsum(indptr[:4], 0, out=indptr[1:5])
        torch.arange(4) + 1  # host only: not recorded
    assert entries(ledger) == [
        ("launch", "fill_", "paged_kv_indptr[5:9]", None, None),
        ("launch", "cumsum", "paged_kv_indptr[1:5]", None, None),
    ]


def test_reads_back_are_syncs(buffers):
    """Classified without running them: a meta tensor has no data to read."""
    name_of = buffer_namer(buffers)
    host = torch.zeros(9, dtype=torch.int32)
    read = classify(torch.ops.aten.copy_.default, (host, buffers["paged_kv_indptr"]), {}, DEVICE, name_of)
    item = classify(torch.ops.aten._local_scalar_dense.default, (buffers["req_id_per_token"][3],), {}, DEVICE, name_of)
    assert (read.kind, read.target) == ("d2h", "paged_kv_indptr[0:9]")
    assert (item.kind, item.target) == ("d2h", "req_id_per_token[3:4]")


def test_triton_launches_are_recorded_by_kernel(buffers):
    seq_lens = torch.tensor([5, 9], dtype=torch.int32)
    out = torch.zeros(2, dtype=torch.int32)
    ledger = Ledger()
    with recording(ledger, DEVICE, buffers):
        launch_sparse_seqlen(torch.tensor([0, 1, 2], dtype=torch.int32), seq_lens, 4, 1, out)
    assert entries(ledger) == [("launch", "Triton token_sparse_seqlen_kernel", "", None, None)]


def test_events_and_synchronisations_are_recorded_and_the_originals_restored():
    """CPU torch has no CUDA events: each call is recorded, then the original raises."""
    originals = (torch.cuda.Event.record, torch.cuda.Event.synchronize, torch.cuda.synchronize)
    ledger = Ledger()
    with observing_events(ledger):
        for call in (
            lambda: torch.cuda.Event.record(object()),
            lambda: torch.cuda.Event.synchronize(object()),
            torch.cuda.synchronize,
        ):
            with pytest.raises(Exception):  # noqa: B017 - whichever error CPU torch raises
                call()
    assert [(op.kind, op.what) for op in ledger.ops] == [
        ("event_record", "Event.record"),
        ("event_wait", "Event.synchronize"),
        ("stream_sync", "torch.cuda.synchronize"),
    ]
    assert (torch.cuda.Event.record, torch.cuda.Event.synchronize, torch.cuda.synchronize) == originals


def host_clauses_broken(subject) -> set[str]:
    """The pinned program through ``subject`` with ``meta`` standing in for the device (the host
    buffers the runtime hands out as pinned count as pinned: CPU torch cannot pin)."""
    steps = run_program_on_real_stream(subject, DEVICE, grow_keep_grow_shrink(), m=6, topk=2)
    assert [s.result.path for s in steps] == ["host"] * len(steps)
    return {clause for _, problems in broken_host_clauses(steps) for clause in problems}


def test_the_reference_keeps_every_host_clause_on_the_real_stream_ledger():
    """(That each broken subject of the performance contract breaks its clause on this ledger too is
    proven with the other clauses: tests/selfvalidation/test_performance_contract.py.)"""
    assert host_clauses_broken(ReferenceSubject()) == set()


def test_nothing_is_recorded_while_off_and_syncs_in_an_allowed_region_are_marked(buffers):
    on, allowed, ledger = Flag(True), Flag(False), Ledger()
    indptr = buffers["paged_kv_indptr"]
    with recording(ledger, DEVICE, buffers, on=on, allowed=allowed):
        with on.holding(False):
            indptr.fill_(1)  # the harness's own work: not recorded
        with allowed.holding(True), pytest.raises(DeviceReadOnMeta):
            indptr[0].item()
        with pytest.raises(DeviceReadOnMeta):
            indptr[1].item()
    assert [(op.kind, op.target, op.sync_allowed) for op in ledger.ops] == [
        ("d2h", "paged_kv_indptr[0:1]", True),
        ("d2h", "paged_kv_indptr[1:2]", False),
    ]


def test_a_stream_model_that_drops_an_operation_disagrees_with_the_recorder_below_torch(monkeypatch):
    """What the agreement property of tests/performance compares (``Ledger.shape``): equal for the
    reference's pinned program, unequal once the stream model drops the shrink-tail ``fill_``."""
    program = grow_keep_grow_shrink()

    def shapes(steps):
        return [s.ledger.shape() for s in steps]

    below = shapes(run_program_on_real_stream(ReferenceSubject(), DEVICE, program, m=6, topk=2))
    assert shapes(run_program(ReferenceSubject(), "cpu", program, m=6, topk=2)) == below
    log = StreamModelRuntime._log
    monkeypatch.setattr(StreamModelRuntime, "_log", lambda self, op: None if op.what == "fill_" else log(self, op))
    assert shapes(run_program(ReferenceSubject(), "cpu", program, m=6, topk=2)) != below
