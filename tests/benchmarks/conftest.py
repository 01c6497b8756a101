"""Benchmark-only fixtures."""

import os

import pytest
import torch


@pytest.fixture(autouse=True)
def cpu_threads(device, benchmark):
    """On CPU, one intra-op thread (``SPARSE_MLA_BENCH_THREADS`` overrides).

    torch splits copies above its grain size over its thread pool; on a busy
    shared machine a pool thread that waits for a core adds whole scheduler
    slices (tens of ms) to a microsecond copy, which then says more about the
    machine's load than about the code.  The count used is recorded.
    """
    if device.type != "cpu":
        benchmark.extra_info["cpu_threads"] = torch.get_num_threads()
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("SPARSE_MLA_BENCH_THREADS", "1")))
    benchmark.extra_info["cpu_threads"] = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)
