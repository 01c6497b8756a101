"""Strict gating: what skips, what errors, and what stops the run (rule: fixtures/plugin/gating.py).

A probe module with one test per kind of skip, plus a subject that has only
the device path, is written by pytester into its temporary folder and run
there in fresh processes with the suite's plugin, with and without
``--strict-gating``.
"""

import importlib.util

import pytest
import torch

from tools.fresh_run import repo

PROBE = """
import pytest


class DevicePathOnly:
    name = "device-path-only"
    capabilities = frozenset({"device_path"})

    def make_builder(self, config):
        raise NotImplementedError("the probes never build")


@pytest.mark.gpu
def test_gpu_probe(device):
    assert device.type == "cuda"


@pytest.mark.needs("host_path")
def test_needs_probe(subject):
    assert "host_path" in subject.capabilities


def test_importorskip_probe():
    pytest.importorskip("no_such_module_for_the_strict_probe")


@pytest.mark.bench
def test_bench_probe():
    assert False, "a benchmark ran without opting in"
"""
MODULE = "_strict_gating_probe_tmp"
HAS_GPU = torch.cuda.is_available()


@pytest.fixture
def run_probe(pytester, run_suite_in):
    """Runs the probe module against the device-path-only subject with extra arguments."""
    pytester.makepyfile(**{MODULE: PROBE})
    return lambda *args: run_suite_in(f"{MODULE}.py", f"--subject={MODULE}:DevicePathOnly", *args)


def test_plain_cpu_run_skips_with_reasons(run_probe):
    run = run_probe("--device=cpu")
    assert run.ret == 0, run.out[-3000:]
    assert {name: r["outcome"] for name, r in run.by_name().items()} == dict.fromkeys(
        ("test_gpu_probe", "test_needs_probe", "test_importorskip_probe", "test_bench_probe"), "skipped"
    ), run.out[-3000:]
    assert "needs a GPU" in run.by_name()["test_gpu_probe"]["message"]
    assert "lacks host_path" in run.by_name()["test_needs_probe"]["message"]
    assert "--benchmark-enable" in run.by_name()["test_bench_probe"]["message"]


def test_strict_run_errors_on_every_skip_but_not_applicable(run_probe):
    run = run_probe("--device=cpu", "--strict-gating")
    assert run.ret == 1, run.out[-3000:]
    assert run.by_name()["test_gpu_probe"]["outcome"] == "skipped", (
        "asked for --device cpu: GPU tests are not applicable"
    )
    assert run.by_name()["test_needs_probe"]["outcome"] == "skipped"
    assert run.by_name()["test_bench_probe"]["outcome"] == "skipped"
    assert run.by_name()["test_importorskip_probe"]["outcome"] == "failed", run.out[-3000:]
    assert "strict gating: this test would have been skipped" in run.out
    assert "FAILED (1)" in run.out, "the summary must list the strict-gating failure"


def test_strict_run_without_explicit_cpu_errors_on_gpu_tests(run_probe):
    run = run_probe("--strict-gating", "-k", "gpu_probe")
    expected = "passed" if HAS_GPU else "error"
    assert run.by_name()["test_gpu_probe"]["outcome"] == expected, run.out[-3000:]
    assert run.ret == (0 if HAS_GPU else 1), run.out[-3000:]


def test_requested_but_missing_stops_the_run(run_probe):
    run = run_probe("--device=cpu", "--require=host_path")
    assert run.ret == 4 and "lacks required capabilities ['host_path']" in run.out, run.out[-2000:]
    if not HAS_GPU:
        run = run_probe("--device=cuda")
        assert run.ret == 4 and "sees no GPU" in run.out, run.out[-2000:]
    missing = [name for name in ("vllm", "aiter") if importlib.util.find_spec(name) is None]
    if missing:
        run = run_probe("--device=cpu", *(f"--expect={name}" for name in missing))
        assert run.ret == 4, run.out[-2000:]
        for name in missing:
            assert f"  {name}: " in run.out, run.out[-2000:]


# ----- a subject that declares its stand-ins -----------------------------------------
class StoodInSubject:
    """A subject that declares what it stands in for (as the vllm subject on CPU)."""

    name = "stood-in"
    capabilities = frozenset({"device_path"})

    def make_builder(self, config):
        raise AssertionError("not reached")

    def gating_problems(self):
        return ["no ROCm GPU", "AITER missing (no module 'aiter')"]


def test_strict_gating_turns_stand_ins_into_an_error(run_suite_in):
    spec = f"--subject={__name__}:StoodInSubject"
    strict = run_suite_in(spec, repo("tests/differential"), "--strict-gating")
    assert strict.ret == 4, strict.out
    assert "--strict-gating: subject 'stood-in': no ROCm GPU; AITER missing" in strict.out
    lenient = run_suite_in(spec, repo("tests/differential"), "--co")
    assert lenient.ret == 0, lenient.out
