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
  wall and CPU seconds).

Text outside the markers (the narrative, numbers measured by hand) is kept as
written.  A section whose reports are missing is left as it was and named on
stderr; a marker without its end is an error naming it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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


GENERATORS = {"junit": junit_rows, "kill-matrix": kill_matrix_rows}


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
