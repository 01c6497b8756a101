"""pytest-xdist gives the same per-test results as a serial run under the ci profile.

A small subset (the oracle tables and one ledger property of the performance
contract, derandomised examples, no Triton launch) runs once serially and once
with ``-n 2``; the
outcome of every test and the number of examples hypothesis generated for
each property must match, and the verification summary must appear in both
(it is built on the controller from the reports the workers ship).
"""

from tools.fresh_run import repo

SUBSET = [
    repo("tests/oracles"),
    repo("tests/performance/test_device_work.py")
    + "::test_host_path_uploads_paged_kv_indptr_once_pinned_and_non_blocking",
]


def test_xdist_results_equal_serial_results(run_suite_in):
    runs = {}
    for label, extra in (("serial", ["-p", "no:xdist"]), ("xdist", ["-n", "2"])):
        run = run_suite_in(*SUBSET, *extra)
        out = run.out
        assert run.ret == 0, f"{label} run failed:\n{out[-3000:]}"
        assert "verification summary" in out and "generated examples" in out, f"{label}: no summary\n{out[-3000:]}"
        runs[label] = {
            test: (r["outcome"], r["properties"].get("hypothesis_examples")) for test, r in run.tests.items()
        }
    serial, xdist = runs["serial"], runs["xdist"]
    assert serial, "the serial run reported no tests"
    assert any(examples for _, examples in serial.values()), "no hypothesis example counts were recorded"
    assert sorted(serial) == sorted(xdist), f"different tests ran: {sorted(set(serial) ^ set(xdist))}"
    differ = {t: (serial[t], xdist[t]) for t in serial if serial[t] != xdist[t]}
    assert not differ, f"serial and -n 2 disagree (outcome, examples): {differ}"
