"""Benchmark: per-step ``build()`` cost of the host path versus the device path.

Opt-in (``--benchmark-enable``; ``tox -e bench``), never part of a correctness
run.  Pure-decode batches of ``n`` requests (one token each, context lengths
drawn with a fixed seed around ``topk`` = 2048) are built again and again by
one builder, as consecutive decode steps of the same batch are; both paths see
the same batch, and the path is chosen the way the suite's properties choose
it: ``pin_memory=True`` takes the host path, ``pin_memory=False`` the device
path.  ``M = max_num_batched_tokens``; the host path uploads its whole
``M + 1`` staging buffer every step, so its cost grows with ``M``.

Each row also records the device operations of a steady step from the
stream model's ledger and, for a subject run beside a baseline (``--subject
vllm --vllm-overlay DIR``: the release), the baseline's on the same batch and
configuration, so the report shows what the host path saves against the
release per pure-decode step.

Subjects: the run's ``--subject`` and, when that is another one, the reference
as a baseline in the same session (:mod:`fixtures.bench.subjects`), so
``--subject vllm --vllm-overlay DIR`` measures the post-change vLLM builder
next to the reference.  For the ``vllm`` subject the timed call is vLLM's own
``build()`` (its inputs made once, untimed); for the others ``builder.build``.

On a GPU each timed step ends with ``torch.cuda.synchronize()`` and kernels
are compiled by warm-up steps first.  On CPU the device path's kernel runs
under the Triton interpreter (milliseconds per program instance, one program
per decode request), so the device-path sweep stops at
``CPU_DEVICE_PATH_MAX_N``: CPU numbers are host-side cost only and say
nothing about GPU kernel time.
"""

import os

import pytest

from fixtures.bench.subjects import M_SWEEP, N_SWEEP, TOPK, build_step, pure_decode_batch, subject_info, timed
from fixtures.bench.timing import warmed_step
from fixtures.harness.baseline import WithBaseline
from fixtures.harness.device_work import run_program
from fixtures.harness.step import count_triton_launches, new_config
from fixtures.plugin.gating import NOT_APPLICABLE
from fixtures.protocol import DEVICE_PATH, HOST_PATH
from oracles import device_work as contract

CPU_DEVICE_PATH_MAX_N = int(os.environ.get("SPARSE_MLA_BENCH_CPU_DEVICE_MAX_N", "64"))
PATH_CAPABILITY = {"host": HOST_PATH, "device": DEVICE_PATH}


def device_ops_per_step(subject, device, batch, m: int, *, pin_memory: bool) -> dict[str, int]:
    """The device operations of a steady step on ``batch`` (its second), from the stream model's
    ledger (docs/performance.md): kernels (launches and device-to-device copies), host-to-device
    copies, device-to-host reads."""
    alone = subject.unpaired if isinstance(subject, WithBaseline) else subject
    steady = run_program(alone, device, [batch, batch], m=m, topk=TOPK, pin_memory=pin_memory)[1].ledger
    return {"launches": len(contract.launches(steady)), "h2d": len(steady.of("h2d")), "d2h": len(steady.of("d2h"))}


@pytest.mark.parametrize("m", M_SWEEP)
@pytest.mark.parametrize("n", N_SWEEP)
@pytest.mark.parametrize("path", ["host", "device"])
def test_build_step(benchmark, bench_subject, device, path, n, m):
    subject = bench_subject
    if PATH_CAPABILITY[path] not in subject.capabilities:
        note = getattr(subject, "capability_notes", {}).get(PATH_CAPABILITY[path])
        pytest.skip(
            f"{NOT_APPLICABLE}subject {subject.name!r} lacks {PATH_CAPABILITY[path]}" + (f" ({note})" if note else "")
        )
    if device.type == "cpu" and path == "device" and n > CPU_DEVICE_PATH_MAX_N:
        pytest.skip(
            f"{NOT_APPLICABLE}on CPU the device path runs the Triton interpreter; the sweep stops at "
            f"n = {CPU_DEVICE_PATH_MAX_N} (SPARSE_MLA_BENCH_CPU_DEVICE_MAX_N raises it)"
        )
    batch = pure_decode_batch(n)
    config = new_config(device, m, TOPK, pin_memory=(path == "host"))
    builder = timed(subject).make_builder(config)
    with build_step(builder, batch) as step:
        timed_call = warmed_step(step.run, device)
        with count_triton_launches() as launches:
            taken = step.path()
        # Measure the path that was asked for, not another one.
        assert taken == path, f"asked for the {path} path, the subject took {taken}"
        ops = device_ops_per_step(subject, device, batch, m, pin_memory=(path == "host"))
        against = {}
        if path == "host" and isinstance(subject, WithBaseline):
            # The change's saving: the release's (device-path) builder on the same batch and config.
            against = dict(
                baseline=subject.baseline.name,
                baseline_device_ops_per_step=device_ops_per_step(subject.baseline, device, batch, m, pin_memory=True),
            )
        benchmark.group = f"build step, M={m}"
        benchmark.extra_info.update(
            kind="build_step",
            path=path,
            n=n,
            m=m,
            topk=TOPK,
            device=device.type,
            triton_launches_per_step=sum(launches.values()),
            device_ops_per_step=ops,
            **against,
            timing="synchronised GPU step" if device.type == "cuda" else "host-side only (CPU, Triton interpreter)",
            timed=step.timed,
            **subject_info(subject),
        )
        benchmark(timed_call)
