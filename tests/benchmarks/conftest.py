"""Benchmark-only fixtures and the subjects a benchmark session measures."""

import os

import pytest
import torch

from fixtures.bench.subjects import bench_subjects
from fixtures.plugin.run_state import run_state


def pytest_generate_tests(metafunc):
    """``bench_subject``: the run's subject, and the baseline (reference) when that differs.

    See :mod:`fixtures.bench.subjects`; ``SPARSE_MLA_BENCH_BASELINE=none`` drops the baseline.
    """
    if "bench_subject" in metafunc.fixturenames:
        subjects = bench_subjects(run_state(metafunc.config)["subject"])
        metafunc.parametrize("bench_subject", subjects, ids=[s.name for s in subjects])


@pytest.fixture(autouse=True)
def cpu_threads(device, request):
    """On CPU, one intra-op thread (``SPARSE_MLA_BENCH_THREADS`` overrides).

    torch splits copies above its grain size over its thread pool; on a busy
    shared machine a pool thread that waits for a core adds whole scheduler
    slices (tens of ms) to a microsecond copy, which then says more about the
    machine's load than about the code.  The count used is recorded (in tests
    that time something with the ``benchmark`` fixture).
    """
    benchmark = request.getfixturevalue("benchmark") if "benchmark" in request.fixturenames else None
    if device.type != "cpu":
        if benchmark is not None:
            benchmark.extra_info["cpu_threads"] = torch.get_num_threads()
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("SPARSE_MLA_BENCH_THREADS", "1")))
    if benchmark is not None:
        benchmark.extra_info["cpu_threads"] = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)
