"""Benchmark: per-step ``build()`` cost of the host path versus the device path.

Opt-in (``--benchmark-enable``; ``tox -e bench``), never part of a correctness
run.  Pure-decode batches of ``n`` requests (one token each, context lengths
drawn with a fixed seed around ``topk`` = 2048) are built again and again by
one builder, as consecutive decode steps of the same batch are; both paths see
the same batch, and the path is chosen the way the suite's properties choose
it: ``pin_memory=True`` takes the host path, ``pin_memory=False`` the device
path.  ``M = max_num_batched_tokens``; the host path uploads its whole
``M + 1`` staging buffer every step, so its cost grows with ``M``.

On a GPU each timed step ends with ``torch.cuda.synchronize()`` and kernels
are compiled by warm-up steps first.  On CPU the device path's kernel runs
under the Triton interpreter (milliseconds per program instance, one program
per decode request), so the device-path sweep stops at
``CPU_DEVICE_PATH_MAX_N``: CPU numbers are host-side cost only and say
nothing about GPU kernel time.
"""

import os

import numpy as np
import pytest

from fixtures.batches import make_batch
from fixtures.gating import NOT_APPLICABLE
from fixtures.harness import count_triton_launches, new_config
from fixtures.subjects import DEVICE_PATH, HOST_PATH
from tests.benchmarks.timing import warmed_step

N_SWEEP = (1, 8, 64, 512, 4096)
M_SWEEP = (8192, 16384, 65536)
TOPK = 2048
CPU_DEVICE_PATH_MAX_N = int(os.environ.get("SPARSE_MLA_BENCH_CPU_DEVICE_MAX_N", "64"))
PATH_CAPABILITY = {"host": HOST_PATH, "device": DEVICE_PATH}


def pure_decode_batch(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return make_batch([1] * n, rng.integers(1, 4 * TOPK, size=n).tolist())


@pytest.mark.parametrize("m", M_SWEEP)
@pytest.mark.parametrize("n", N_SWEEP)
@pytest.mark.parametrize("path", ["host", "device"])
def test_build_step(benchmark, subject, device, path, n, m):
    if PATH_CAPABILITY[path] not in subject.capabilities:
        pytest.skip(f"{NOT_APPLICABLE}subject {subject.name!r} lacks {PATH_CAPABILITY[path]}")
    if device.type == "cpu" and path == "device" and n > CPU_DEVICE_PATH_MAX_N:
        pytest.skip(
            f"{NOT_APPLICABLE}on CPU the device path runs the Triton interpreter; the sweep stops at "
            f"n = {CPU_DEVICE_PATH_MAX_N} (SPARSE_MLA_BENCH_CPU_DEVICE_MAX_N raises it)"
        )
    batch = pure_decode_batch(n)
    config = new_config(device, m, TOPK, pin_memory=(path == "host"))
    builder = subject.make_builder(config)
    step = warmed_step(lambda: builder.build(batch), device)
    with count_triton_launches() as launches:
        result = step()
    # Measure the path that was asked for, not another one.
    assert result.path == path, f"asked for the {path} path, the subject took {result.path}"
    benchmark.group = f"build step, M={m}"
    benchmark.extra_info.update(
        kind="build_step",
        path=path,
        n=n,
        m=m,
        topk=TOPK,
        subject=subject.name,
        device=device.type,
        triton_launches_per_step=sum(launches.values()),
        timing="synchronised GPU step" if device.type == "cuda" else "host-side only (CPU, Triton interpreter)",
    )
    benchmark(step)
