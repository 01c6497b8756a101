"""The tooling around the properties: opt-in benchmarks, the benchmark report, the GPU check script."""

import importlib.util
import json
import shutil
import subprocess

import pytest
import torch

from tests.selfvalidation.junit import ROOT, outcomes, run_pytest
from tools import bench_report


def test_benchmarks_are_opt_in_and_outside_correctness_runs(tmp_path):
    proc = run_pytest(["tests/benchmarks", "-p", "no:xdist"], tmp_path / "plain.xml")
    results = outcomes(tmp_path / "plain.xml")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert results, "no benchmark was collected"
    not_skipped = {t: r["outcome"] for t, r in results.items() if r["outcome"] != "skipped"}
    assert not not_skipped, f"benchmarks ran without opting in: {not_skipped}"
    assert all(r["message"].startswith("opt-in: ") for r in results.values())

    proc = run_pytest(["tests/benchmarks", "-m", "verification or selftest", "-p", "no:xdist"], tmp_path / "m.xml")
    assert proc.returncode == 5, f"-m verification/selftest selected benchmarks:\n{proc.stdout[-2000:]}"


def bench(kind, stats_min, **info):
    return {
        "stats": {"min": stats_min, "median": stats_min * 2, "mean": stats_min * 2},
        "extra_info": {"kind": kind, **info},
    }


def test_bench_report_tables_and_plot(tmp_path):
    host, device = 2e-5, 6e-4
    data = {
        "machine_info": {"cpu": {"brand_raw": "test cpu"}, "python_version": "3"},
        "datetime": "now",
        "benchmarks": [
            bench("build_step", host, path="host", n=8, m=8192, device="cpu", triton_launches_per_step=0),
            bench("build_step", device, path="device", n=8, m=8192, device="cpu", triton_launches_per_step=1),
            bench("build_step", host, path="host", n=512, m=8192, device="cpu", triton_launches_per_step=0),
            bench("nope_query_standin", 1e-3, variant="copy", tokens=64, heads=16, bytes=2**20),
            bench("nope_query_standin", 1e-6, variant="zero_copy", tokens=64, heads=16, bytes=2**20),
        ],
    }
    src = tmp_path / "bench.json"
    src.write_text(json.dumps(data))
    assert bench_report.main([str(src), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report.md").read_text()
    ratio = f"{device / host:.0f}x"
    assert f"| 8192 | 8 | 20 µs / 40 µs | 600 µs / 1.2 ms | {ratio} | 0 | 1 |" in text, text
    assert "| 8192 | 512 | 20 µs / 40 µs | — | — | 0 | — |" in text, text
    assert "| 16 | 64 | 1 MiB | 1 ms / 2 ms | 1 µs / 2 µs | 999 µs |" in text, text
    assert "host-side cost only" in text
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "report.png").stat().st_size > 0
        assert "![time per step against n](report.png)" in text
    else:
        assert "matplotlib is not installed" in text


def test_bench_report_rejects_other_json(tmp_path):
    src = tmp_path / "other.json"
    src.write_text("{}")
    with pytest.raises(SystemExit, match="not a pytest-benchmark JSON"):
        bench_report.main([str(src), "--out", str(tmp_path / "r")])


def test_gpu_check_script_parses_and_fails_fast_without_gpu(tmp_path):
    bash = shutil.which("bash")
    script = ROOT / "tools" / "gpu_check.sh"
    syntax = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    usage = subprocess.run([bash, str(script)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr
    if torch.cuda.is_available():
        pytest.skip("not applicable: this machine has a GPU; the no-GPU exit is checked on CPU machines")
    proc = subprocess.run([bash, str(script), str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3 and "no GPU" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists(), "the script wrote results although it had nothing to check"
