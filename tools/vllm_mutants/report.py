"""The report of a mutation run: JSON and Markdown, per hunk, function and operator; merging shards.

Kill rate = killed / (considered - equivalent - not loadable).  Gaps (mutants
no test reaches) stay in the denominator: they are never killed.  Problems
(exit status 1): the control does not pass, a mutant survives that is not
listed as equivalent, a gap, a run that broke (timeout, error), an
equivalence entry whose mutant was killed (the entry is wrong).

:func:`merge` joins the reports of the shards ``0..N-1`` of one run into the
report the unsharded run writes: the same entries in the same order and the
same counts; times are the shards' (wall: the longest shard, CPU: the sum).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from tools.vllm_mutants.generate import OPERATORS, Generation, Mutant
from tools.vllm_mutants.run import STATUSES, reached

# Fields that depend on the run's timing or temporary paths, not on its verdicts.
VOLATILE = ("seconds", "cpu_seconds", "seconds_to_kill", "log", "returncode")
VOLATILE_SUMMARY = ("wall_seconds", "cpu_seconds", "launcher", "shard", "control", "jobs")


def entries_of(generation: Generation, selected: list[Mutant], run: dict, overlay: Path, equivalent: dict) -> list:
    """One entry per selected mutant: the mutant (without its source) and its verdict."""
    index = {m.id: i for i, m in enumerate(generation.mutants)}
    entries = []
    for m in selected:
        r = dict(run["results"].get(m.id) or {"status": "error", "detail": "not run"})
        if m.id in equivalent and r["status"] == "survived":
            r["status"], r["equivalent_reason"] = "equivalent", equivalent[m.id]
        elif m.id in equivalent:
            r["equivalent_claim"] = equivalent[m.id]
        entry = {k: v for k, v in asdict(m).items() if k != "source"}
        entry.update(r, index=index.get(m.id, len(index) + len(entries)), reached=reached(m, overlay, run.get("reach")))
        entries.append(entry)
    return entries


def build_report(
    generation: Generation,
    selected: list[Mutant],
    run: dict,
    overlay: Path,
    *,
    equivalent: dict,
    wall: float = 0.0,
    cpu: float | None = None,
    profile: str = "mutants",
    jobs: int = 2,
    base: Path | None = None,
    shard: tuple[int, int] | None = None,
    baseline: str = "release",
) -> dict:
    meta = {
        "baseline": baseline,
        "overlay": str(Path(overlay).resolve()),
        "base": str(Path(base).resolve()) if base else "the installed vllm",
        "scope": generation.scope,
        "profile": profile,
        "jobs": jobs,
        "changed_functions": len(generation.functions),
        "generated": len(generation.mutants),
        "duplicates_dropped": generation.duplicates,
        "not_generated": generation.skipped,
        "control": run.get("control"),
        "launcher": run.get("launcher"),
        "shard": list(shard) if shard else None,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": None if cpu is None else round(cpu, 1),
    }
    entries = entries_of(generation, selected, run, overlay, equivalent)
    return summarize(generation_tables(generation), entries, meta)


def generation_tables(generation: Generation) -> dict:
    """What a report keeps of the generation: functions, hunks, and each mutant's key fields."""
    return {
        "functions": [asdict(f) for f in generation.functions],
        "hunks": [{**asdict(h), "header": h.header} for h in generation.hunks],
        "mutants": [
            {
                "id": m.id,
                "relpath": m.relpath,
                "function": m.function,
                "operator": m.operator,
                "line": m.line,
                "reach": list(m.reach),
            }
            for m in generation.mutants
        ],
    }


def summarize(tables: dict, entries: list, meta: dict) -> dict:
    problems = []
    control = meta.get("control")
    if control is not None and control.get("status") != "passed":
        problems.append(
            f"the unmutated overlay does not pass the verification ({control.get('status')}: "
            f"{control.get('killed_by') or control.get('detail')}); the mutants' verdicts mean nothing"
        )
    for e in entries:
        if e["status"] == "killed" and e.get("equivalent_claim"):
            problems.append(f"{e['id']} is listed as equivalent but was killed by {e['killed_by']}: the entry is wrong")
        elif e["status"] == "survived":
            problems.append(f"{e['id']} survived: {e['description']}")
        elif e["status"] == "gap":
            problems.append(f"{e['id']} is a gap: {e['detail']}")
        elif e["status"] in ("timeout", "error"):
            problems.append(f"{e['id']}: {e['status']}: {e.get('detail')}")
    counts = Counter(e["status"] for e in entries)
    denominator = len(entries) - counts["equivalent"] - counts["not_loadable"]
    ran = [e for e in entries if e["status"] not in ("gap", "not_loadable") and "tests" in e]

    def table(key_of, keys):
        blank = dict.fromkeys(("generated", "considered", *STATUSES), 0)
        rows = {k: dict(blank) for k in keys}
        for m in tables["mutants"]:
            rows.setdefault(key_of(m), dict(blank))["generated"] += 1
        for e in entries:
            row = rows.setdefault(key_of(e), dict(blank))
            row["considered"] += 1
            row[e["status"]] += 1
        return rows

    functions = [f"{f['relpath']}::{f['qualname']}" for f in tables["functions"]]
    by_function = table(lambda m: f"{m['relpath']}::{m['function']}", functions)
    for f in tables["functions"]:
        by_function[f"{f['relpath']}::{f['qualname']}"].update(status=f["status"], lines=[f["lineno"], f["end_lineno"]])
    summary = {
        **meta,
        "hunks": len(tables["hunks"]),
        "considered": len(entries),
        "ran": len(ran),
        **{s: counts[s] for s in STATUSES},
        "kill_rate": round(counts["killed"] / denominator, 4) if denominator else None,
        "killed_by_crash": sum(bool(e.get("crash")) for e in entries),
        "tests_per_run": round(sum(e["tests"] for e in ran) / len(ran), 1) if ran else None,
        "ok": not problems,
        "problems": problems,
    }
    return {
        "summary": summary,
        "functions": by_function,
        "operators": table(lambda m: m["operator"], OPERATORS),
        "hunks": [
            {**h, "mutants": [e["id"] for e in entries if e["relpath"] == h["relpath"] and _in_hunk(e, h)]}
            for h in tables["hunks"]
        ],
        "generation": tables,
        "mutants": entries,
    }


def _in_hunk(entry: dict, hunk: dict) -> bool:
    """A mutant belongs to a hunk when one of its lines lies in the hunk's new-side range."""
    first, last = hunk["new_start"], hunk["new_start"] + hunk["new_len"] - 1
    return any(first <= line <= last for line in entry["reach"])


# ----- merging shards -------------------------------------------------------------------------------
class MergeError(ValueError):
    pass


def merge(reports: list[dict]) -> dict:
    """The report of the whole run from its shards' reports (module doc)."""
    if not reports:
        raise MergeError("--merge needs at least one shard report")
    shards = sorted((tuple(r["summary"].get("shard") or (0, 1)), i) for i, r in enumerate(reports))
    n = shards[0][0][1]
    if [k for (k, total), _ in shards] != list(range(n)) or any(total != n for (_, total), _ in shards):
        raise MergeError(f"shard reports must be shards 0..N-1 of one run, each once; got {[s for s, _ in shards]}")
    first = reports[0]
    same = ("overlay", "base", "scope", "profile", "baseline", "generated")
    for r in reports[1:]:
        for key in same:
            if r["summary"][key] != first["summary"][key]:
                raise MergeError(f"shards differ in {key}: {first['summary'][key]!r} vs {r['summary'][key]!r}")
        if r["generation"] != first["generation"]:
            raise MergeError("shards were generated from different mutants")
    entries = sorted((e for r in reports for e in r["mutants"]), key=lambda e: e["index"])
    controls = [r["summary"]["control"] for r in reports]
    failed = [c for c in controls if not c or c.get("status") != "passed"]
    meta = {k: v for k, v in first["summary"].items() if k in (*same, "changed_functions", "duplicates_dropped")}
    meta.update(
        not_generated=first["summary"]["not_generated"],
        jobs=first["summary"]["jobs"],
        control=failed[0] if failed else controls[0],
        launcher=first["summary"]["launcher"],
        shard=None,
        shards=n,
        wall_seconds=max(r["summary"]["wall_seconds"] for r in reports),
        cpu_seconds=round(sum(r["summary"]["cpu_seconds"] or 0.0 for r in reports), 1),
    )
    return summarize(first["generation"], entries, meta)


def comparable(report: dict) -> dict:
    """``report`` without what depends on timing, paths of temporary trees, or how it was sharded."""
    summary = {k: v for k, v in report["summary"].items() if k not in (*VOLATILE_SUMMARY, "shards")}
    mutants = [{k: v for k, v in e.items() if k not in VOLATILE} for e in report["mutants"]]
    return {**report, "summary": summary, "mutants": mutants}


def previous_run(report_json: Path) -> dict:
    return json.loads(Path(report_json).read_text())


def reclassify(report: dict, equivalent: dict) -> dict:
    """``report`` with ``equivalent`` applied as it is now (nothing runs)."""
    entries = []
    for e in report["mutants"]:
        e = dict(e)
        if e["status"] == "equivalent":
            e["status"] = "survived"
        e.pop("equivalent_reason", None)
        e.pop("equivalent_claim", None)
        if e["id"] in equivalent and e["status"] == "survived":
            e["status"], e["equivalent_reason"] = "equivalent", equivalent[e["id"]]
        elif e["id"] in equivalent:
            e["equivalent_claim"] = equivalent[e["id"]]
        entries.append(e)
    meta = {k: v for k, v in report["summary"].items() if k not in _DERIVED}
    return summarize(report["generation"], entries, meta)


_DERIVED = ("hunks", "considered", "ran", *STATUSES, "kill_rate", "killed_by_crash", "tests_per_run", "ok", "problems")


# ----- rendering ----------------------------------------------------------------------------------
def _percent(rate) -> str:
    return "n/a" if rate is None else f"{rate:.1%}"


def summary_lines(s: dict) -> list[str]:
    shard = f", shard {s['shard'][0]} of {s['shard'][1]}" if s.get("shard") else ""
    merged = f", merged from {s['shards']} shards" if s.get("shards") else ""
    return [
        f"overlay {s['overlay']} against {s['base']}, scope {s['scope']}{shard}{merged}: {s['hunks']} hunks, "
        f"{s['changed_functions']} functions, {s['generated']} mutants ({s['duplicates_dropped']} duplicates "
        f"dropped; not generated: {s['not_generated']}); {s['considered']} considered, {s['ran']} run "
        f"(profile {s['profile']}, --baseline {s.get('baseline', 'release')}, {s['jobs']} at a time; {s['launcher']})",
        f"killed {s['killed']} ({s['killed_by_crash']} by a crash of the test process), survived {s['survived']}, "
        f"gaps {s['gap']}, equivalent {s['equivalent']}, not loadable {s['not_loadable']}, timeout {s['timeout']}, "
        f"error {s['error']}",
        f"kill rate {_percent(s['kill_rate'])} = killed / (considered - equivalent - not loadable); tests run per "
        f"mutant (selected by reach): {s['tests_per_run']} on average",
        f"wall {s['wall_seconds']} s, CPU {s['cpu_seconds']} s in the pytest processes",
    ]


def _counts_table(title: str, rows: dict, extra: tuple = ()) -> list[str]:
    cols = ("generated", "considered", *STATUSES)
    out = [f"| {title} | " + " | ".join((*extra, *cols)) + " |", "| --- |" + " --- |" * (len(extra) + len(cols))]
    for key, row in rows.items():
        cells = [str(row.get(c, "")) for c in (*extra, *cols)]
        out.append(f"| `{key}` | " + " | ".join(cells) + " |")
    return out


def render_markdown(report: dict) -> str:
    s = report["summary"]
    entries = {e["id"]: e for e in report["mutants"]}
    out = ["# Mutation adequacy on the change", ""] + [f"- {line}" for line in summary_lines(s)] + [""]
    out += ["## Per hunk of the diff", ""]
    for h in report["hunks"]:
        mine = [entries[i] for i in h["mutants"]]
        tally = ", ".join(f"{n} {st}" for st, n in Counter(e["status"] for e in mine).most_common()) or "no mutant"
        out += [f"### `{h['relpath']}` {h['header']}: {tally}", "", "```diff", h["text"].rstrip("\n"), "```", ""]
        out += [f"- `{e['id']}` {e['status']}: {e['description']}" for e in mine] + [""]
    out += ["## Per function", ""] + _counts_table("function", report["functions"], ("status",)) + [""]
    out += ["## Per operator", ""] + _counts_table("operator", report["operators"]) + [""]
    by_status = {st: [e for e in report["mutants"] if e["status"] == st] for st in STATUSES}
    out += ["## Survivors the suite runs but does not tell apart", ""]
    out += [] if by_status["survived"] else ["None.", ""]
    for e in by_status["survived"]:
        out += [f"### `{e['id']}`", "", f"{e['description']} ({e['tests']} tests ran)", ""]
        out += ["```diff", e["diff"].rstrip("\n"), "```", ""]
    out += ["## Gaps: mutants no test reaches", ""]
    out += [] if by_status["gap"] else ["None.", ""]
    for function in sorted({e["function"] for e in by_status["gap"]}):
        mine = [e for e in by_status["gap"] if e["function"] == function]
        out += [f"<details><summary><code>{function}</code>: {len(mine)} gaps</summary>", ""]
        for e in mine:
            out += [f"`{e['id']}` (line {e['line']}): {e['description']}", "", "```diff", e["diff"].rstrip("\n")]
            out += ["```", ""]
        out += ["</details>", ""]
    for st, title in (("equivalent", "Equivalent"), ("not_loadable", "Not loadable"), ("timeout", "Timed out")):
        if by_status[st] or st == "equivalent":
            out += [f"## {title}", ""]
            out += [f"- `{e['id']}`: {e.get('equivalent_reason') or e.get('detail')}" for e in by_status[st]]
            out += ["None."] if not by_status[st] else []
            out += [""]
    if by_status["error"]:
        out += ["## Errors", ""] + [f"- `{e['id']}`: {e.get('detail')}" for e in by_status["error"]] + [""]
    out += ["## Killed", "", "| mutant | killed by | examples | tests selected | seconds |"]
    out += ["| --- | --- | --- | --- | --- |"]
    for e in by_status["killed"]:
        examples = "pinned" if e.get("pinned") else f"crash ({e['crash']})" if e.get("crash") else e.get("examples")
        killer = e["killed_by"].removeprefix("tests/")
        out.append(f"| `{e['id']}` | `{killer}` | {examples} | {e.get('tests')} | {e.get('seconds')} |")
    out += [""] + [f"- **problem**: {p}" for p in s["problems"]]
    return "\n".join(out) + "\n"


def render_list(generation: Generation, selected: list[Mutant], diffs: bool = False) -> str:
    lines = [
        f"scope {generation.scope}: {len(generation.hunks)} hunks, {len(generation.functions)} functions, "
        f"{len(generation.mutants)} mutants"
    ]
    lines.append(
        f"({generation.duplicates} duplicates dropped, not generated: {generation.skipped}), {len(selected)} selected"
    )
    per_function = Counter(f"{m.relpath}::{m.function}" for m in generation.mutants)
    lines += ["", "per function:"]
    for f in generation.functions:
        key = f"{f.relpath}::{f.qualname}"
        lines.append(f"  {per_function[key]:5d}  {f.qualname} (L{f.lineno}-{f.end_lineno}, {f.status})")
    per_operator = Counter(m.operator for m in generation.mutants)
    lines += ["", "per operator:"] + [f"  {per_operator[op]:5d}  {op}" for op in OPERATORS]
    lines += ["", "mutants:"]
    for m in selected:
        lines.append(f"  {m.id}  {m.description}")
        if diffs:
            lines += ["    " + line for line in m.diff.rstrip("\n").split("\n")]
    return "\n".join(lines)
