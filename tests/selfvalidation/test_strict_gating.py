"""Strict gating: what skips, what errors, and what stops the run (rule: fixtures/gating.py).

A probe module with one test per kind of skip, plus a subject that has only
the device path, is written into a temporary folder and run there in
subprocesses with the suite's plugin (``-p fixtures.plugin``), with and
without ``--strict-gating``.
"""

import importlib.util

import pytest
import torch

from tests.selfvalidation.junit import outcomes, run_pytest

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


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("strict_probe")
    (folder / f"{MODULE}.py").write_text(PROBE)
    return folder


def run_probe(probe, tmp_path, *args):
    junit = tmp_path / "probe.xml"
    proc = run_pytest([f"{MODULE}.py", f"--subject={MODULE}:DevicePathOnly", *args], junit, cwd=probe)
    results = outcomes(junit) if junit.exists() else {}
    return proc, {name.rsplit("::", 1)[1]: r for name, r in results.items()}


def test_plain_cpu_run_skips_with_reasons(probe, tmp_path):
    proc, res = run_probe(probe, tmp_path, "--device=cpu")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert {name: r["outcome"] for name, r in res.items()} == dict.fromkeys(
        ("test_gpu_probe", "test_needs_probe", "test_importorskip_probe", "test_bench_probe"), "skipped"
    ), out[-3000:]
    assert "needs a GPU" in res["test_gpu_probe"]["message"]
    assert "lacks host_path" in res["test_needs_probe"]["message"]
    assert "--benchmark-enable" in res["test_bench_probe"]["message"]


def test_strict_run_errors_on_every_skip_but_not_applicable(probe, tmp_path):
    proc, res = run_probe(probe, tmp_path, "--device=cpu", "--strict-gating")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert res["test_gpu_probe"]["outcome"] == "skipped", "asked for --device cpu: GPU tests are not applicable"
    assert res["test_needs_probe"]["outcome"] == "skipped"
    assert res["test_bench_probe"]["outcome"] == "skipped"
    assert res["test_importorskip_probe"]["outcome"] == "failed", out[-3000:]
    assert "strict gating: this test would have been skipped" in out
    assert "FAILED (1)" in out, "the summary must list the strict-gating failure"


def test_strict_run_without_explicit_cpu_errors_on_gpu_tests(probe, tmp_path):
    proc, res = run_probe(probe, tmp_path, "--strict-gating", "-k", "gpu_probe")
    out = proc.stdout + proc.stderr
    expected = "passed" if HAS_GPU else "error"
    assert res["test_gpu_probe"]["outcome"] == expected, out[-3000:]
    assert proc.returncode == (0 if HAS_GPU else 1), out[-3000:]


def test_requested_but_missing_stops_the_run(probe, tmp_path):
    proc, _ = run_probe(probe, tmp_path, "--device=cpu", "--require=host_path")
    assert proc.returncode == 4 and "lacks required capabilities ['host_path']" in proc.stderr, proc.stderr[-2000:]
    if not HAS_GPU:
        proc, _ = run_probe(probe, tmp_path, "--device=cuda")
        assert proc.returncode == 4 and "sees no GPU" in proc.stderr, proc.stderr[-2000:]
    missing = [name for name in ("vllm", "aiter") if importlib.util.find_spec(name) is None]
    if missing:
        proc, _ = run_probe(probe, tmp_path, "--device=cpu", *(f"--expect={name}" for name in missing))
        assert proc.returncode == 4, proc.stderr[-2000:]
        for name in missing:
            assert f"  {name}: " in proc.stderr, proc.stderr[-2000:]
