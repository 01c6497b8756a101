"""The second-oracle mechanism (``fixtures.harness.baseline``) on subjects that need no vLLM.

The reference stands in for the subject and a broken variant for the
"release": a difference in the whole buffers must raise with both sides and
the batch, on the eager runtime at once and on the stream model in stream
order; the baseline's kernel launches are not counted as the subject's; the
one region the change's contract fixes differently (host-path pad tokens'
req_id) is not compared.
"""

import numpy as np
import pytest

from fixtures.harness.baseline import BaselineMismatch, WithBaseline, compare_with_baseline, compared_mask
from fixtures.harness.step import new_config, run_step
from fixtures.inputs.batches import make_batch
from fixtures.models.stream_model import OnModelDevice, StreamModelRuntime
from fixtures.subjects.mutants import MUTANTS
from fixtures.subjects.reference import ReferenceSubject
from oracles.step import expected_indptr

MIXED = make_batch([1, 2], [5, 9])  # a device-path step


def test_identical_subjects_agree_and_the_baselines_launches_are_not_counted():
    paired = WithBaseline(ReferenceSubject(), ReferenceSubject())
    config = new_config("cpu", 6, 4)
    builder = paired.make_builder(config)
    step = run_step(builder, MIXED, config)
    assert step.result.path == "device"
    assert step.seqlen_launches(paired) == 1, dict(step.launches)
    assert builder.buffers()["paged_kv_indptr"].tolist() == expected_indptr(MIXED, 4, 6).tolist()


def test_a_baseline_that_differs_is_reported_with_both_sides_and_the_batch():
    paired = WithBaseline(ReferenceSubject(), MUTANTS["device_tail_wrong_value"]())
    config = new_config("cpu", 6, 4)
    with pytest.raises(BaselineMismatch) as info:
        run_step(paired.make_builder(config), MIXED, config)
    message = str(info.value)
    assert "paged_kv_indptr differs from the vLLM release's (device path" in message
    assert "subject [" in message and "release [" in message and repr(MIXED) in message


def test_on_the_stream_model_the_comparison_reads_in_stream_order():
    paired = WithBaseline(ReferenceSubject(), MUTANTS["device_tail_wrong_value"]())
    runtime = StreamModelRuntime("cpu")
    config = new_config("cpu", 6, 4, runtime=runtime)
    builder = OnModelDevice(paired.make_builder(config), runtime)
    builder.build(make_batch([1, 1], [5, 9]))  # host path: the upload is queued, so is the comparison
    assert runtime.pending >= 2
    builder.build(MIXED)  # the device path's launch drains the first comparison (equal), queues the second
    with pytest.raises(BaselineMismatch, match="step 2: paged_kv_indptr"):
        runtime.synchronize()


def test_only_host_path_pad_tokens_req_ids_are_left_out():
    batch = make_batch([1, 1], [5, 9])
    assert compared_mask("req_id_per_token", 6, batch, "host").all()  # no padding: everything compared
    padded = type("Padded", (), {"query_start_loc": np.array([0, 1, 2]), "num_actual_tokens": 4})()
    assert compared_mask("req_id_per_token", 6, padded, "host").tolist() == [True, True, False, False, True, True]
    assert compared_mask("req_id_per_token", 6, padded, "device").all()
    assert compared_mask("paged_kv_indptr", 7, padded, "host").all()
    ids = {"req_id_per_token": np.array([0, 1, 2, 3, 0, 0], np.int32)}
    release = {"req_id_per_token": np.array([0, 1, 0, 0, 0, 0], np.int32)}
    compare_with_baseline(ids, release, padded, "host", "step 1")
    with pytest.raises(BaselineMismatch, match="first at index 2"):
        compare_with_baseline(ids, release, padded, "device", "step 1")


def test_a_release_that_differs_on_padded_batches_only_is_caught_there_only():
    """The differential against the release sees a general-path divergence that only CUDA-graph padding
    exposes: a "release" whose seqlen kernel gives the pad tokens keys agrees on every unpadded step."""
    paired = WithBaseline(ReferenceSubject(), MUTANTS["kernel_keeps_padding"]())
    config = new_config("cpu", 8, 4, pin_memory=False)  # no pinned memory: every step takes the device path
    builder = paired.make_builder(config)
    assert run_step(builder, make_batch([1, 1], [5, 9]), config).result.path == "device"
    assert run_step(builder, MIXED, config).result.path == "device"
    padded = make_batch([1, 1], [5, 9], cudagraph_pad=4)
    with pytest.raises(BaselineMismatch, match=r"paged_kv_indptr differs from the vLLM release's \(device path"):
        run_step(builder, padded, config)
