"""The tooling around the properties: opt-in benchmarks, the benchmark report, the GPU check script, measurements."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from tools import bench_report
from tools.fresh_run import ROOT, repo
from tools.measurements import MeasurementsError, regenerate


def test_benchmarks_are_opt_in_and_outside_correctness_runs(run_suite_in):
    run = run_suite_in(repo("tests/benchmarks"), "-p", "no:xdist")
    results = run.tests
    assert run.ret == 0, run.out[-3000:]
    assert results, "no benchmark was collected"
    not_skipped = {t: r["outcome"] for t, r in results.items() if r["outcome"] != "skipped"}
    assert not not_skipped, f"benchmarks ran without opting in: {not_skipped}"
    assert all(r["message"].startswith("opt-in: ") for r in results.values())

    run = run_suite_in(repo("tests/benchmarks"), "-m", "verification or selftest", "-p", "no:xdist")
    assert run.ret == 5, f"-m verification/selftest selected benchmarks:\n{run.out[-2000:]}"


def test_the_nightly_tier_is_what_self_leaves_out_and_mutants_runs(run_suite_in):
    """``nightly`` tests are deselected by ``tox -e self`` (never skipped) and run by ``tox -e mutants``:
    the marker selects at least the catalogue's kill matrix, and nothing outside the selftests."""
    tox = (ROOT / "tox.ini").read_text()
    self_env = tox[tox.index("[testenv:self]") :].split("\n[", 1)[0]
    mutants_env = tox[tox.index("[testenv:mutants]") :].split("\n[", 1)[0]
    assert 'pytest -m "selftest and not nightly"' in self_env, self_env
    assert "pytest -m nightly " in mutants_env, mutants_env
    run = run_suite_in(repo("tests"), "-m", "nightly", "--co", "-q", "-p", "no:xdist")
    assert run.ret == 0, run.out[-3000:]
    chosen = [line for line in run.out.splitlines() if "::" in line]
    assert any("test_kill_matrix.py::test_catalogue_killed_and_reference_clean" in t for t in chosen), run.out
    assert all("tests/selfvalidation/" in t for t in chosen), chosen


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
            bench(
                "build_step",
                host,
                path="host",
                n=8,
                m=8192,
                device="cpu",
                triton_launches_per_step=0,
                device_ops_per_step={"launches": 0, "h2d": 1, "d2h": 0},
                baseline="vllm-release",
                baseline_device_ops_per_step={"launches": 6, "h2d": 2, "d2h": 0},
            ),
            bench(
                "build_step",
                device,
                path="device",
                n=8,
                m=8192,
                device="cpu",
                triton_launches_per_step=1,
                device_ops_per_step={"launches": 4, "h2d": 1, "d2h": 0},
            ),
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
    ops = "launches 0, h2d 1, d2h 0 | launches 4, h2d 1, d2h 0 | launches 4, h2d 0, d2h 0"
    saved = "launches 6, h2d 1, d2h 0"  # against the baseline's (the release's) device path
    assert f"| 8192 | 8 | 20 µs / 40 µs | 600 µs / 1.2 ms | {ratio} | 0 | 1 | {ops} | {saved} |" in text, text
    assert "| 8192 | 512 | 20 µs / 40 µs | — | — | 0 | — | — | — | — | — |" in text, text
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
    # the interpreter running this test has torch, whatever python3 on PATH is
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(
        [bash, str(script), str(tmp_path / "out")], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 3 and "no GPU" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists(), "the script wrote results although it had nothing to check"


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="{errors}" failures="{failures}" skipped="{skipped}" tests="{tests}"
time="{time}"></testsuite></testsuites>"""
DOC = """# Measurements
Narrative kept as written.
<!-- generated: junit -->
old table
<!-- /generated -->
Between the sections.
<!-- generated: kill-matrix -->
old kill matrix
<!-- /generated -->
"""


def test_measurements_rewrite_only_the_generated_sections(tmp_path):
    runs = {"junit-self.xml": (7, 1, 0, 2, 12.4), "junit-cpu.xml": (3, 0, 1, 0, 0.6)}
    for name, (tests, failures, errors, skipped, time) in runs.items():
        xml = JUNIT.format(tests=tests, failures=failures, errors=errors, skipped=skipped, time=time)
        (tmp_path / name).write_text(xml)
    text, missing = regenerate(DOC, tmp_path)
    assert missing == ["kill-matrix"]
    assert "old kill matrix" in text and "Narrative kept as written." in text and "Between the sections." in text
    rows = [line for line in text.splitlines() if line.startswith("| `junit-")]
    want = []
    for name in sorted(runs):  # file-name order
        tests, failures, errors, skipped, time = runs[name]
        passed = tests - failures - errors - skipped
        want.append(f"| `{name}` | {tests} | {passed} | {failures} | {errors} | {skipped} | {time:.0f} s |")
    assert rows == want
    assert regenerate(text, tmp_path)[0] == text, "regenerating from the same reports changes nothing"


def test_measurements_fill_the_kill_matrix_and_refuse_a_broken_marker(tmp_path):
    summary = dict(
        profile="mutants",
        mutants=4,
        killed=3,
        kill_rate=0.75,
        median_examples_to_first_kill=2,
        max_examples_to_first_kill=9,
        killed_by_generated_example=11,
        killed_by_pinned_example=0,
        wall_seconds=80.2,
        cpu_seconds=150.9,
    )
    (tmp_path / "kill_matrix_selftest").mkdir()
    (tmp_path / "kill_matrix_selftest" / "kill_matrix.json").write_text(json.dumps({"summary": summary}))
    text, missing = regenerate(DOC, tmp_path)
    assert missing == ["junit"] and "old table" in text
    assert "| mutants | 3/4 | 75% | 2 / 9 | 11 / 0 | 80 s / 151 s |" in text
    with pytest.raises(MeasurementsError, match="no '<!-- /generated -->'"):
        regenerate(DOC.replace("<!-- /generated -->\nBetween", "Between"), tmp_path)
    with pytest.raises(MeasurementsError, match="unknown generated section 'timing'"):
        regenerate("<!-- generated: timing -->\n<!-- /generated -->\n", tmp_path)


def test_measurements_add_up_the_cost_of_a_run_and_its_workers(tmp_path):
    def cost(process, tests):
        return json.dumps({"process": process, "tests": tests})

    blank = dict(startup_cpu=0, configure_cpu=0, collection_cpu=0, collection_wall=0, total_cpu=1.0)
    test = dict(wall=1.0, cpu=1.0, triton=0.0, triton_launches=0, generate=0.0, shrink=0.0, examples=0)
    (tmp_path / "cost-vllm-overlay.json").write_text(cost(blank, {}))  # the xdist controller: no tests
    for worker, cpu, triton, replayed in (("gw0", 100.0, 70.0, 30), ("gw1", 40.0, 10.0, 5)):
        process = dict(startup_cpu=15.0, configure_cpu=2.0, collection_cpu=1.5, collection_wall=1.6, total_cpu=cpu + 20)
        process["launch_replay"] = dict(replayed=replayed, ran=10, unkeyed=1, collisions=0)
        tests = {f"tests/a.py::test_{worker}": {**test, "cpu": cpu, "triton": triton, "generate": 1.25}}
        (tmp_path / f"cost-vllm-overlay.{worker}.json").write_text(cost(process, tests))
    doc = "<!-- generated: cost -->\n<!-- /generated -->\n<!-- generated: cost-tests -->\n<!-- /generated -->\n"
    text, missing = regenerate(doc, tmp_path)
    assert missing == []
    assert "| `vllm-overlay` | 3 | 30 s | 4 s | 3 s | 140 s | 80 s | 35 of 57 | 2 s | 0 s | 181 s |" in text
    tests = [line for line in text.splitlines() if line.startswith("| `vllm-overlay` | `a.py::")]
    assert tests == [
        "| `vllm-overlay` | `a.py::test_gw0` | 100 s | 1 s | 70 s | 1.2 s | 0 |",
        "| `vllm-overlay` | `a.py::test_gw1` | 40 s | 1 s | 10 s | 1.2 s | 0 |",
    ]


def test_measurements_fill_the_ci_envs_and_the_mutation_run(tmp_path):
    # tox lists every env of tox.ini in each lane's file; only the envs that lane ran carry a result
    ran = {"result": {"success": True}, "setup": [{"elapsed": 50.2}], "test": [{"elapsed": 100.4}, {"elapsed": 9.0}]}
    cpu_lane = {"testenvs": {"cpu": ran, "vllm": {}, "bench": {}}}
    vllm_lane = {"testenvs": {"cpu": {}, "vllm": {**ran, "setup": [{"elapsed": 60.0}]}, "bench": {}}}
    (tmp_path / "tox-result-cpu.json").write_text(json.dumps(cpu_lane))
    (tmp_path / "tox-result-vllm.json").write_text(json.dumps(vllm_lane))
    summary = dict(scope="lines", hunks=6, considered=10, killed=8, equivalent=1, survived=0, gap=0, not_loadable=1)
    summary.update(error=0, timeout=0, kill_rate=0.8889, tests_per_run=3.4, wall_seconds=99.6, cpu_seconds=180.2)
    (tmp_path / "vllm-mutants").mkdir()
    (tmp_path / "vllm-mutants" / "report.json").write_text(json.dumps({"summary": summary}))
    doc = "<!-- generated: ci-envs -->\n<!-- /generated -->\n<!-- generated: mutation -->\n<!-- /generated -->\n"
    text, missing = regenerate(doc, tmp_path)
    assert missing == []
    assert "| `cpu` | 50 s | 109 s | 160 s |" in text
    assert "| `vllm` | 60 s | 109 s | 169 s |" in text and "`bench`" not in text
    assert "| lines | 6 | 10 | 8 | 1 | 0 | 0 | 1 | 0 | 88.9% | 3.4 | 100 s / 180 s |" in text


def test_measurements_fill_the_release_matrix_from_the_summaries(tmp_path):
    def summary(exitstatus, describe=None, skipped_run=None, **verdicts):
        properties = {f"tests/a.py::{name}": {"verdict": verdict} for name, verdict in verdicts.items()}
        return json.dumps(
            dict(exitstatus=exitstatus, describe=describe, skipped_run=skipped_run, properties=properties)
        )

    real = "vLLM X. configuration from vLLM's own classes: ModelConfig. Stood in: torch.cuda"
    stood = (
        "vLLM X. configuration from vLLM's own classes: ModelConfig; generated stand-ins: VllmConfig (why). Stood in:"
    )
    reports = {
        "summary-vllm-0.9.0-release.json": summary(0, real, test_b="PROVEN", test_c="NOT APPLICABLE"),
        "summary-vllm-0.10.0-release.json": summary(
            6, stood, test_b="PROVEN EXCEPT KNOWN FINDINGS (docs)", test_c="SUITE ERRORS (the suite's own)"
        ),
        "summary-vllm-0.10.0-overlay.json": summary(1, real, test_b="FAILED", test_c="PARTLY SKIPPED"),
        "summary-vllm-0.9.0-overlay.json": summary(
            None,
            skipped_run="skipped (x): subject 'vllm': m targets another vLLM release than the installed 0.9.0: "
            "No module named 'vllm.a' (/p/m.py:19); install the vLLM release ...; this verification did not run",
        ),
        "summary-vllm-overlay.json": summary(0, real, test_b="PROVEN"),  # the vllm env's: not a matrix release
    }
    for name, text in reports.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "junit-vllm-0.9.0-self.xml").write_text(
        JUNIT.format(tests=10, failures=1, errors=0, skipped=2, time=1.0)
    )
    doc = "<!-- generated: release-matrix -->\n<!-- /generated -->\n"
    doc += "<!-- generated: release-matrix-properties -->\n<!-- /generated -->\n"
    text, missing = regenerate(doc, tmp_path)
    assert missing == []
    lines = text.splitlines()
    assert lines.index(next(line for line in lines if line.startswith("| 0.9.0"))) < lines.index(
        next(line for line in lines if line.startswith("| 0.10.0"))
    ), "releases in version order, not text order"
    assert (
        "| 0.9.0 | none (all vLLM's own classes) | 1 P 1 - (exit 0) | did not run, the file targets another release: No module named 'vllm.a' | 7 / 1 / 2 |"
        in text
    )
    assert "| 0.10.0 | VllmConfig (why) | 1 K 1 E (exit 6) | 1 p 1 F (exit 1) | not run |" in text
    assert "| `a.py::test_b` | P /   | K / F |" in text and "| `a.py::test_c` | - /   | E / p |" in text


def test_measurements_count_the_seeds_each_subject_passed(tmp_path):
    """The seed gate's table: per subject the seeds run and passed, and each false alarm named by seed."""

    def run(subject, seed, exitstatus=0, failed=(), suite_errors=(), seconds=10.0, date="2026-12-06"):
        return json.dumps(
            dict(
                subject=subject, seed=seed, exitstatus=exitstatus, failed=list(failed), suite_errors=list(suite_errors)
            )
            | dict(seconds=seconds, date=date)
        )

    runs = [
        run("reference", 1, seconds=30.0),
        run("reference", 2, seconds=50.0, date="2026-12-07"),
        run("vllm-overlay", 1, exitstatus=6, suite_errors=["test_a"], seconds=100.0),
    ]
    (tmp_path / "seed-gate").mkdir()
    (tmp_path / "seed-gate" / "seeds.jsonl").write_text("\n".join(runs) + "\n")
    text, missing = regenerate("<!-- generated: seeds -->\n<!-- /generated -->\n", tmp_path)
    assert missing == []
    assert "| `reference` | 2 | 2 | 0 | 40 | 2026-12-06, 2026-12-07 |" in text
    assert "| `vllm-overlay` | 1 | 0 | 1: seed 1: exit 6 test_a | 100 | 2026-12-06 |" in text


def test_a_ci_run_records_itself_and_heads_the_measurements(tmp_path):
    """``tools/ci_record.py`` (the end of ``.ci/run``) writes the run's commit, date, time, lanes and the
    machine's ``import torch`` time; ``tools/measurements.py`` turns it into the page's first line."""
    import sys
    import time

    from tools import ci_record

    out = tmp_path / "ci-run.json"
    assert (
        ci_record.main(
            ["--out", str(out), "--start", str(time.time() - 125), "--cpu", "0", "--vllm", "1"]
            + ["--python", sys.executable, "--times", "1"]
        )
        == 0
    )
    record = json.loads(out.read_text())
    assert record["seconds"] >= 125 and record["lanes"] == {"cpu,self,lint,vllm-fixes": 0, "vllm,vllm-self": 1}
    assert len(record["import_torch_seconds"]) == 1 and record["commit"]
    record.update(
        seconds=899, lanes={"cpu,self,lint,vllm-fixes": 0, "vllm,vllm-self": 0}, import_torch_seconds=[1.94, 2.27]
    )
    out.write_text(json.dumps(record))
    text, missing = regenerate("<!-- generated: ci-run -->\n<!-- /generated -->\n", tmp_path)
    assert missing == []
    assert f"at `{record['commit']}`, {record['date']}" in text
    assert "**14 min 59 s** (899 s), green; `import torch` on the machine afterwards 1.9-2.3 s" in text


def test_the_vllm_install_takes_the_same_pins_with_uv_and_with_pip():
    """tools/install_vllm.py installs the release without its dependencies plus its pinned import chain,
    into this interpreter's environment, whichever installer is there (tox.ini's default release:
    test_vllm_subject.py)."""
    from tools.install_vllm import install_command

    uv = install_command("0.34.0", "/bin/uv")
    pip = install_command("0.34.0", None)
    assert uv[:6] == ["/bin/uv", "pip", "install", "--quiet", "--python", sys.executable]
    assert pip[:4] == [sys.executable, "-m", "pip", "install"]
    assert uv[6:] == pip[5:]
    assert uv[6:8] == ["--no-deps", "vllm==0.34.0"] and uv[8] == "-r"
    assert (ROOT / uv[9]).is_file(), uv[9]
