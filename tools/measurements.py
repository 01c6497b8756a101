"""Rewrite the generated sections of ``docs/measurements.md`` from a run's reports.

    python -m tools.measurements [REPORTS] [--doc docs/measurements.md]

``REPORTS`` (default ``reports/``) is what a run leaves behind: ``.ci/run``
writes ``junit-*.xml`` there, and the kill-matrix selftest
``kill_matrix_selftest/kill_matrix.json`` (``tox -e mutants``:
``kill_matrix.json``).  A section of the document between
``<!-- generated: NAME -->`` and ``<!-- /generated -->`` is replaced:

* ``junit``: one row per JUnit file (tests, passed, failed, errors, skipped,
  pytest seconds), in file-name order;
* ``kill-matrix``: the kill matrix's summary (profile, mutants killed, kill
  rate, examples to the first kill, kills by generated and pinned examples,
  wall and CPU seconds);
* ``ci-run``: the run itself, one line: its commit, date, wall time, verdict and the machine's
  ``import torch`` time (``ci-run.json`` of ``tools/ci_record.py``, which ``.ci/run`` calls at its end);
* ``ci-envs``: each tox env's wall time, install and commands apart, from the
  ``--result-json`` files of tox (``.ci/run`` writes ``tox-result-*.json``);
* ``cost``: per pytest run, where its CPU time went (``cost-*.json`` of
  :mod:`tools.cost_plugin`, xdist workers added up): imports before pytest
  configured, the subject's imports in configure (vLLM), collection, the tests
  (of which: Triton's interpreter, hypothesis' data generation and shrinking);
* ``cost-tests``: the tests that cost the most CPU over all those runs;
* ``seeds``: the random-seed gate's runs of that CI run (``seed-gate/seeds.jsonl``);
* ``fixes``: the fix check's outcome (``fixes/fixes.json`` of ``tools/verify_fixes.py``);
* ``mutation``: the line-scoped mutation run's summary
  (``vllm-mutants/report.json``);
* ``forward-sizes``: per forward property and run, the largest ``forward_mqa`` (tokens), the widest top-k,
  the most live keys of a token, the examples with a key pool's widened buffer, the head counts drawn and
  the most column tiles one remap launch spanned;
* ``release-matrix``: per vLLM release of the matrix (``tox -m vllm-releases``),
  the verdicts of the release's own backend and of the post-change file
  (``summary-vllm-<release>-{release,overlay}.json``, written with
  ``--summary-json``; an overlay run that did not start says why) and the
  vLLM selftests (``junit-vllm-<release>-self.xml``);
* ``release-matrix-properties``: each property's verdict per release, for the
  release and the post-change file;
* ``sizes``: per property and run (``summary-{cpu,vllm-overlay,vllm-release}.json``,
  ``scale`` of :mod:`fixtures.harness.scale`), the largest step it built
  (requests, tokens, ``M``) and the examples whose launches reached past each
  kernel's second tile.

Text outside the markers (the narrative, numbers measured by hand) is kept as
written.  A section whose reports are missing is left as it was and named on
stderr; a marker without its end is an error naming it.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from fixtures import ROOT

SECTION = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /generated -->)", re.S)


class MeasurementsError(ValueError):
    pass


def junit_rows(reports: Path) -> list[str] | None:
    files = sorted(reports.glob("junit-*.xml"))
    if not files:
        return None
    rows = [
        "| report | tests | passed | failed | errors | skipped | pytest time |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for path in files:
        root = ET.parse(path).getroot()
        suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        count = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
        seconds = sum(float(s.get("time", 0)) for s in suites)
        passed = count["tests"] - count["failures"] - count["errors"] - count["skipped"]
        rows.append(
            f"| `{path.name}` | {count['tests']} | {passed} | {count['failures']} | {count['errors']} "
            f"| {count['skipped']} | {seconds:.0f} s |"
        )
    return rows


def kill_matrix_rows(reports: Path) -> list[str] | None:
    found = sorted(reports.glob("kill_matrix*/kill_matrix.json")) + sorted(reports.glob("kill_matrix.json"))
    if not found:
        return None
    s = json.loads(found[0].read_text())["summary"]
    return [
        "| profile | killed | kill rate | examples to the first kill (median / max) "
        "| kills by generated / pinned examples | wall / CPU |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {s['profile']} | {s['killed']}/{s['mutants']} | {s['kill_rate']:.0%} "
        f"| {s['median_examples_to_first_kill']} / {s['max_examples_to_first_kill']} "
        f"| {s['killed_by_generated_example']} / {s['killed_by_pinned_example']} "
        f"| {s['wall_seconds']:.0f} s / {s['cpu_seconds']:.0f} s |",
    ]


def ci_run_rows(reports: Path) -> list[str] | None:
    """What the run was (``ci-run.json`` of ``tools/ci_record.py``): its commit, date, wall time, verdict and
    the machine's ``import torch`` time, as one line."""
    path = reports / "ci-run.json"
    if not path.exists():
        return None
    r = json.loads(path.read_text())
    minutes, seconds = divmod(r["seconds"], 60)
    green = (
        "green"
        if not any(r["lanes"].values())
        else "red: " + ", ".join(f"{k} exited {v}" for k, v in r["lanes"].items() if v)
    )
    torch_s = r["import_torch_seconds"]
    torch_text = f"{min(torch_s):.1f}-{max(torch_s):.1f} s" if torch_s else "not measured"
    return [
        f"The last CI run: at `{r['commit']}`, {r['date']}, from a fresh clone with `../shared` beside it "
        f"(`bash .ci/run`): **{minutes} min {seconds} s** ({r['seconds']} s), {green}; `import torch` on the "
        f"machine afterwards {torch_text}. Every table on this page marked generated is that run's."
    ]


def ci_env_rows(reports: Path) -> list[str] | None:
    paths = sorted(reports.glob("tox-result*.json"))
    if not paths:
        return None
    envs = {}
    for path in paths:
        # each file lists every env of tox.ini; only the ones its run ran carry a result
        envs.update({k: v for k, v in json.loads(path.read_text()).get("testenvs", {}).items() if v.get("result")})
    rows = ["| tox env | install | commands | wall |", "| --- | --- | --- | --- |"]
    for name, env in sorted(envs.items()):
        setup = sum(r.get("elapsed", 0.0) for r in env.get("setup", []))
        commands = sum(r.get("elapsed", 0.0) for r in env.get("test", []))
        rows.append(f"| `{name}` | {setup:.0f} s | {commands:.0f} s | {setup + commands:.0f} s |")
    return rows


def cost_runs(reports: Path) -> dict[str, dict]:
    """Per run (``cost-NAME.json`` and its workers' ``cost-NAME.gwK.json``): process totals and tests."""
    runs: dict[str, dict] = {}
    for path in sorted(reports.glob("cost-*.json")):
        name = path.name.removeprefix("cost-").split(".")[0]
        data = json.loads(path.read_text())
        run = runs.setdefault(name, {"process": {}, "tests": {}, "processes": 0})
        run["processes"] += 1  # an xdist controller too: it imports what its workers import
        for key, value in data["process"].items():
            if isinstance(value, dict):  # launch_replay: counts per outcome
                counts = run["process"].setdefault(key, {})
                for outcome, n in value.items():
                    counts[outcome] = counts.get(outcome, 0) + n
            else:
                run["process"][key] = run["process"].get(key, 0.0) + value
        run["tests"].update(data["tests"])
    return runs


def cost_rows(reports: Path) -> list[str] | None:
    runs = cost_runs(reports)
    if not runs:
        return None
    rows = [
        "| run | processes | imports (startup) | subject imports (configure) | collection | tests | "
        "of which Triton interpreter | launches replayed | hypothesis generation | hypothesis shrinking | total CPU |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, run in runs.items():
        p, tests = run["process"], run["tests"].values()
        total = {key: sum(t[key] for t in tests) for key in ("cpu", "triton", "generate", "shrink")}
        replay = p.get("launch_replay") or {}
        launches = replay.get("replayed", 0) + replay.get("ran", 0) + replay.get("unkeyed", 0)
        replayed = f"{replay.get('replayed', 0)} of {launches}" if launches else ""
        rows.append(
            f"| `{name}` | {run['processes']} | {p.get('startup_cpu', 0):.0f} s | {p.get('configure_cpu', 0):.0f} s "
            f"| {p.get('collection_cpu', 0):.0f} s | {total['cpu']:.0f} s | {total['triton']:.0f} s | {replayed} "
            f"| {total['generate']:.0f} s | {total['shrink']:.0f} s | {p.get('total_cpu', 0):.0f} s |"
        )
    return rows


def cost_test_rows(reports: Path, top: int = 12) -> list[str] | None:
    runs = cost_runs(reports)
    if not runs:
        return None
    tests = [(t["cpu"], name, test, t) for name, run in runs.items() for test, t in run["tests"].items()]
    rows = [
        "| run | test | CPU | wall | Triton interpreter | hypothesis generation | examples |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for cpu, name, test, t in sorted(tests, reverse=True)[:top]:
        rows.append(
            f"| `{name}` | `{test.removeprefix('tests/')}` | {cpu:.0f} s | {t['wall']:.0f} s | {t['triton']:.0f} s "
            f"| {t['generate']:.1f} s | {t['examples']} |"
        )
    return rows


def mutation_rows(reports: Path) -> list[str] | None:
    path = reports / "vllm-mutants" / "report.json"
    if not path.exists():
        return None
    s = json.loads(path.read_text())["summary"]
    rate = "n/a" if s["kill_rate"] is None else f"{s['kill_rate']:.1%}"
    return [
        "| scope | hunks | mutants | killed | equivalent | survived | gaps | not loadable | errors, timeouts "
        "| kill rate | tests per mutant | wall / CPU |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        f"| {s['scope']} | {s['hunks']} | {s['considered']} | {s['killed']} | {s['equivalent']} | {s['survived']} "
        f"| {s['gap']} | {s['not_loadable']} | {s['error'] + s['timeout']} | {rate} | {s['tests_per_run']} "
        f"| {s['wall_seconds']:.0f} s / {s['cpu_seconds']:.0f} s |",
    ]


# The summary's verdicts as one letter (fixtures.plugin.reporting.VERDICTS, in order).
VERDICT_LETTERS = {
    "PROVEN": "P",
    "PROVEN EXCEPT KNOWN FINDINGS": "K",
    "NOT APPLICABLE": "-",
    "PARTLY SKIPPED": "p",
    "SUITE ERRORS": "E",
    "FAILED": "F",
}
SUMMARY = re.compile(r"summary-vllm-(?P<release>\d+\.\d+\.\d+)-(?P<kind>release|overlay)\.json")


def release_summaries(reports: Path) -> dict[str, dict[str, dict]]:
    """release -> {"release" | "overlay": the run's summary JSON}, releases in version order."""
    found: dict[str, dict[str, dict]] = {}
    for path in reports.glob("summary-vllm-*.json"):
        match = SUMMARY.fullmatch(path.name)
        if match:
            found.setdefault(match["release"], {})[match["kind"]] = json.loads(path.read_text())
    return dict(sorted(found.items(), key=lambda item: tuple(map(int, item[0].split(".")))))


def letter(verdict: str | None) -> str:
    """One letter for a summary verdict (the longest label it starts with: PROVEN EXCEPT ... before PROVEN)."""
    labels = sorted(VERDICT_LETTERS, key=len, reverse=True)
    return next((VERDICT_LETTERS[k] for k in labels if (verdict or "").startswith(k)), "?")


def verdict_counts(summary: dict | None) -> str:
    if summary is None:
        return "not run"
    if summary.get("skipped_run"):
        why = summary["skipped_run"].removesuffix("; this verification did not run")
        match = re.search(r"than the installed [\d.]+: (.*?)( \(/[^)]*\))?(; install .*)?$", why)
        return ("did not run, the file targets another release: " + match[1] if match else "did not run: " + why)[:200]
    counts: dict[str, int] = {}
    for prop in summary["properties"].values():
        counts[letter(prop["verdict"])] = counts.get(letter(prop["verdict"]), 0) + 1
    text = " ".join(f"{counts[v]} {v}" for v in VERDICT_LETTERS.values() if v in counts)
    return f"{text} (exit {summary.get('exitstatus')})"


def stood_in(summary: dict | None) -> str:
    """The configuration objects a run's subject stood in (its summary line names them), or "none"."""
    match = re.search(r"generated stand-ins: (.*?)\. Stood in:", (summary or {}).get("describe") or "")
    if summary is None or not summary.get("describe"):
        return "?"
    return match[1] if match else "none (all vLLM's own classes)"


def release_matrix_rows(reports: Path) -> list[str] | None:
    releases = release_summaries(reports)
    if not releases:
        return None
    rows = [
        "| release | configuration stood in | its own backend | the post-change file overlaid "
        "| vLLM selftests (passed / failed / skipped) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for release, runs in releases.items():
        junit = reports / f"junit-vllm-{release}-self.xml"
        selftests = "not run"
        if junit.exists():
            suites = list(ET.parse(junit).getroot().iter("testsuite"))
            count = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
            bad = count["failures"] + count["errors"]
            selftests = f"{count['tests'] - bad - count['skipped']} / {bad} / {count['skipped']}"
        rows.append(
            f"| {release} | {stood_in(runs.get('release'))} | {verdict_counts(runs.get('release'))} "
            f"| {verdict_counts(runs.get('overlay'))} | {selftests} |"
        )
    return rows


def release_property_rows(reports: Path) -> list[str] | None:
    releases = release_summaries(reports)
    if not releases:
        return None
    names = sorted({n for runs in releases.values() for run in runs.values() for n in run.get("properties", {})})
    header = " | ".join(releases)
    rows = [f"| property (release / post-change file) | {header} |", "| --- |" + " :---: |" * len(releases)]
    for name in names:
        cells = []
        for runs in releases.values():
            pair = [
                letter(run["properties"][name]["verdict"]) if name in run.get("properties", {}) else " "
                for run in (runs.get("release", {}), runs.get("overlay", {}))
            ]
            cells.append(" / ".join(pair))
        rows.append(f"| `{name.removeprefix('tests/')}` | " + " | ".join(cells) + " |")
    return rows


SIZE_RUNS = ("cpu", "vllm-overlay", "vllm-release")


def size_rows(reports: Path) -> list[str] | None:
    runs = {run: reports / f"summary-{run}.json" for run in SIZE_RUNS}
    runs = {run: json.loads(path.read_text()) for run, path in runs.items() if path.exists()}
    if not runs:
        return None
    rows = [
        "| property | run | requests | tokens | M | examples past a kernel's second tile |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    names = sorted({n for summary in runs.values() for n, p in summary["properties"].items() if p.get("scale")})
    for name in names:
        for run, summary in runs.items():
            record = summary["properties"].get(name, {}).get("scale")
            if not record:
                continue
            crossed = ", ".join(f"`{k}` {n}" for k, n in sorted(record["crossed"].items())) or "none"
            rows.append(
                f"| `{name.removeprefix('tests/')}` | `{run}` | {record['requests']} | {record['tokens']} "
                f"| {record['m']} | {crossed} |"
            )
    return rows


def forward_size_rows(reports: Path) -> list[str] | None:
    """Per forward property and run: the largest forward, the widest top-k, the most live keys of a token,
    the examples with a key pool's widened buffer, the head counts (``scale.forward`` of the summaries)."""
    runs = {run: reports / f"summary-{run}.json" for run in SIZE_RUNS}
    runs = {run: json.loads(path.read_text()) for run, path in runs.items() if path.exists()}
    if not runs:
        return None
    rows = [
        "| property | run | largest forward (tokens) | widest top-k | most live keys | key-pooled | heads "
        "| most remap tiles |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for name in sorted({n for summary in runs.values() for n in summary["properties"]}):
        for run, summary in runs.items():
            record = summary["properties"].get(name, {}).get("scale") or {}
            f = record.get("forward") or {}
            if not f.get("heads"):
                continue
            odd = [h for h in f["heads"] if 16 % h and h % 16]
            tiles = record.get("tiles", {}).get("_convert_req_index_to_global_index_kernel", "")
            rows.append(
                f"| `{name.removeprefix('tests/')}` | `{run}` | {f['tokens']} | {f['widest_topk']} | {f['live_keys']} "
                f"| {f['kpool']} | {min(f['heads'])}-{max(f['heads'])}, not dividing 16: {odd or 'none'} | {tiles} |"
            )
    return rows


def seed_rows(reports: Path) -> list[str] | None:
    """The random-seed gate's runs (``seed-gate/seeds.jsonl`` of ``tools/seed_gate.py``), per subject: how many
    seeds it ran under, how many it passed, its false alarms (a FAILED property or a suite error of a right
    subject: the seeds and properties named), the median time of a run and the dates."""
    path = reports / "seed-gate" / "seeds.jsonl"
    if not path.exists():
        return None
    per: dict[str, list[dict]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            per.setdefault(r["subject"], []).append(r)
    rows = [
        "| subject | seeds | passed | false alarms | median seconds | dates |",
        "| --- | ---: | ---: | --- | ---: | --- |",
    ]
    for subject, runs in per.items():
        alarms = [r for r in runs if r["exitstatus"] != 0 or r["failed"] or r["suite_errors"]]
        named = "; ".join(
            f"seed {r['seed']}: exit {r['exitstatus']} {', '.join(r['failed'] + r['suite_errors'])}".rstrip()
            for r in alarms
        )
        dates = sorted({r["date"] for r in runs})
        rows.append(
            f"| `{subject}` | {len(runs)} | {len(runs) - len(alarms)} | {len(alarms)}{': ' + named if named else ''} "
            f"| {statistics.median(r['seconds'] for r in runs):.0f} | {', '.join(dates)} |"
        )
    return rows


def fix_rows(reports: Path) -> list[str] | None:
    """Each fix check of the run (``fixes/fixes.json`` of ``tools/verify_fixes.py``): the findings whose fixes were
    laid over the file together, and whether they held (and why not)."""
    path = reports / "fixes" / "fixes.json"
    if not path.exists():
        return None
    rows = ["| findings fixed | the fixes hold | why not |", "| --- | --- | --- |"]
    for outcome in json.loads(path.read_text()):
        keys = ", ".join(f"`{k}`" for k in outcome["keys"])
        rows.append(f"| {keys} | {'yes' if outcome['ok'] else 'NO'} | {'; '.join(outcome['why'])} |")
    return rows


GENERATORS = {
    "sizes": size_rows,
    "forward-sizes": forward_size_rows,
    "release-matrix": release_matrix_rows,
    "release-matrix-properties": release_property_rows,
    "junit": junit_rows,
    "kill-matrix": kill_matrix_rows,
    "ci-run": ci_run_rows,
    "ci-envs": ci_env_rows,
    "cost": cost_rows,
    "cost-tests": cost_test_rows,
    "mutation": mutation_rows,
    "seeds": seed_rows,
    "fixes": fix_rows,
}


def regenerate(text: str, reports: Path) -> tuple[str, list[str]]:
    """``text`` with every generated section it can fill rewritten, and the names of those it could not."""
    for name in re.findall(r"<!-- generated: ([\w-]+) -->", text):
        if name not in GENERATORS:
            raise MeasurementsError(f"unknown generated section {name!r}; known: {sorted(GENERATORS)}")
    starts = len(re.findall(r"<!-- generated: [\w-]+ -->", text))
    if starts != len(SECTION.findall(text)):
        raise MeasurementsError("a '<!-- generated: NAME -->' marker has no '<!-- /generated -->' after it")
    missing = []

    def fill(match):
        rows = GENERATORS[match["name"]](reports)
        if rows is None:
            missing.append(match["name"])
            return match[0]
        return match[1] + "\n".join(rows) + "\n" + match[4]

    return SECTION.sub(fill, text), missing


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="?", type=Path, default=ROOT / "reports")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "measurements.md")
    args = parser.parse_args(argv)
    try:
        text, missing = regenerate(args.doc.read_text(), args.reports)
    except MeasurementsError as exc:
        print(f"measurements: {args.doc}: {exc}", file=sys.stderr)
        return 2
    args.doc.write_text(text)
    for name in missing:
        print(f"measurements: no reports for section {name!r} in {args.reports}; left as it was", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
