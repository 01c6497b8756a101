"""Running the mutants: a control run that records what each test reaches, then each mutant against
only the tests that can see it, all through the fork server.

1. **Control.**  The unmutated overlay through the verification (``pytest -m
   verification <paths> --subject vllm --vllm-overlay=OVERLAY``), with the
   kill-matrix plugin (per-test outcomes and seconds) and
   :mod:`tools.vllm_mutants.reach_plugin` (per test, the lines of the overlaid
   files it executed, from coverage.py's dynamic contexts).  It must pass;
   otherwise no mutant runs.
2. **Selection.**  A mutant's tests are those that executed one of its
   lines (``Mutant.reach``), cheapest first by the control's seconds.  A
   mutant no test reaches is a **gap**: not run, never counted as killed,
   reported with its line.  ``--all-tests`` runs every test of ``paths``
   instead (what the selection is measured against).
3. **Runs.**  Each mutant's tree (the overlay with one file replaced) runs its
   tests with ``-x``: the first failure ends it.  Its log must show that the
   mutated file is the one that ran (the overlay line of the run summary
   names the tree's file, its sha256, and ``[ran]``), else the run is an
   error.  A run's time limit is ``min(--timeout, 60 s + 3 x`` the control's
   seconds for its tests).
4. **Shards.**  ``--shard-id K --num-shards N`` keeps mutants ``K, K + N,
   K + 2N, ...`` of the deterministic order (each shard runs its own control);
   :func:`tools.vllm_mutants.report.merge` joins the shards' reports.

Verdicts (:func:`classify`): *killed* (by which test, after how many
examples; a process that dies inside a test, e.g. an out-of-bounds access
under the Triton interpreter, is killed by a crash), *survived*, *gap*, *not
loadable* (does not compile, or pytest exits 2/3/4: never a kill),
*timeout* and *error* (the run broke).  A mutant's run that times out is killed by a hang
(:func:`hang_verdict`); only the control's timeout stays one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from fixtures.outcomes import EXIT_SUITE_ERROR
from fixtures.plugin.profiles import NO_SHRINK
from fixtures.subjects.vllm.loading.compat import ABSENT_MODULE_REASON
from fixtures.subjects.vllm.loading.overlay import PACKAGE
from tools.forkserver import Launcher, Outcome, Run
from tools.fresh_run import ROOT, VLLM_PRELOAD, pytest_env
from tools.killmatrix import ERRORED, KILLED, NA
from tools.killmatrix import verdicts as property_verdicts
from tools.killmatrix_plugin import crashed_test, running_file, signal_name
from tools.vllm_mutants import reach_plugin
from tools.vllm_mutants.generate import Mutant

CONTROL = "control"
STATUSES = ("killed", "survived", "gap", "equivalent", "not_loadable", "timeout", "error")


def verification_args(paths, tree: Path, record: Path, extra=(), reach=None) -> list[str]:
    """pytest arguments: ``paths`` against ``--subject vllm`` with ``tree`` as the overlay, ``-x``,
    the kill-matrix plugin's records in ``record``; with ``reach=(files, json[, functions])`` the
    reach plugin (measuring inside ``functions``, ``FILE::QUALNAME``, when given)."""
    args = [*paths, "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-m", "verification", "-x"]
    args += ["-p", "_hypothesis_pytestplugin", "-p", "tools.killmatrix_plugin", f"--kill-matrix-json={record}"]
    args += [f"--vllm-overlay={tree}", *extra]
    if reach is not None:
        files, out, *functions = reach
        args += ["-p", "tools.vllm_mutants.reach_plugin", f"--reach-json={out}"]
        args += [f"--reach-file={f}" for f in files]
        args += [f"--reach-function={f}" for f in (functions[0] if functions else ())]
    return args


def write_tree(overlay: Path, out: Path, relpath: str, source: str) -> Path:
    """``out`` as the overlay with ``relpath`` replaced by ``source``: the other files are links to the
    overlay's (copies where links cannot be made), the overlay itself is only read."""
    overlay = Path(overlay).resolve()
    for path in sorted((overlay / PACKAGE).rglob("*")):
        rel = path.relative_to(overlay)
        if "__pycache__" in rel.parts or rel.as_posix() == relpath:
            continue
        target = Path(out) / rel
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.symlink(path, target)
        except OSError:
            shutil.copyfile(path, target)
    target = Path(out) / relpath
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", encoding="utf-8", newline="") as fh:
        fh.write(source)
    return Path(out)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:120]


def load_error(mutant: Mutant) -> str | None:
    """Why the mutated file cannot even compile, or None."""
    try:
        compile(mutant.source, mutant.relpath, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return f"does not compile: {type(exc).__name__}: {exc}"
    return None


def _log_tail(log: Path, lines: int = 6) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])


def classify(returncode, record: Path, log: Path, timeout: float) -> dict:
    """A run's verdict from pytest's exit status and the kill-matrix plugin's records."""
    if returncode is None:
        return {"status": "timeout", "detail": f"no verdict within {timeout} s (see {log})"}
    if returncode in (2, 3, 4):
        return {"status": "not_loadable", "detail": f"pytest exited {returncode}: {_log_tail(log)}"}
    died_after = False
    if returncode < 0:
        crashed_in = crashed_test(record, log)
        if crashed_in:
            # The mutant made the process die (e.g. an out-of-bounds access under the Triton
            # interpreter aborts): the verification fails on it, though no assertion did.
            return {
                "status": "killed",
                "killed_by": crashed_in,
                "crash": signal_name(-returncode),
                "examples": None,
                "seconds_to_kill": None,
                "pinned": False,
            }
        died_after = record.exists()  # outside any test: the records of the tests run before decide
    if returncode == EXIT_SUITE_ERROR:
        # The suite could not drive the mutant (its own limit): neither killed nor survived.
        return {"status": "error", "detail": f"suite error (exit {returncode}): {_log_tail(log)}"}
    if (returncode not in (0, 1) and not died_after) or not record.exists():
        return {"status": "error", "detail": f"exited {returncode} without per-test records (see {log})"}
    tests = json.loads(record.read_text())["tests"]
    props = property_verdicts(tests)
    killers = [p for p, v in props.items() if v["verdict"] == KILLED]
    passed = sorted(p for p, v in props.items() if v["verdict"] not in (KILLED, NA, ERRORED))
    errored = sorted(p for p, v in props.items() if v["verdict"] == ERRORED)
    na = sorted(p for p, v in props.items() if v["verdict"] == NA)
    if killers:
        v = props[killers[0]]
        # A process that died by a signal after a property failed on the mutant (at teardown or exit: the
        # interpreter's out-of-bounds reads leave garbage behind) was killed by that property all the same.
        crash = {"crash": f"{signal_name(-returncode)}, after the kill"} if died_after else {}
        return {
            **crash,
            "status": "killed",
            "killed_by": killers[0],
            "examples": v["examples"],
            "seconds_to_kill": v["seconds_to_first_failure"],
            "pinned": v["pinned"],
            "passed": passed,
            "not_applicable": na,
        }
    if died_after:  # died by a signal outside any test, and no property failed: no verdict
        return {"status": "error", "detail": f"exited {returncode} outside a test, no property failed (see {log})"}
    if errored:  # the suite's own error in a property, and no kill: neither killed nor survived
        return {"status": "error", "detail": f"suite error in {', '.join(errored)} (see {log})", "not_applicable": na}
    if (
        returncode == 0
        and not passed
        and na
        and all(ABSENT_MODULE_REASON in (props[p]["skip_reason"] or "") for p in na)
    ):
        # The mutant sends every input down a path that needs a vLLM module the installed release lacks: it cannot
        # run here (it would on the vLLM the file was written for), as a mutant that does not load.
        reason = props[na[0]]["skip_reason"]
        return {"status": "not_loadable", "detail": f"every property it reached was not applicable: {reason}"}
    if returncode == 1 or not passed:
        why = "failed without a failing test" if returncode == 1 else "no property passed or failed"
        return {"status": "error", "detail": f"pytest {why} (see {log})", "not_applicable": na}
    return {"status": "survived", "passed": passed, "not_applicable": na}


def hang_verdict(verdict: dict, limit: float) -> dict:
    """A mutant whose tests give no verdict within ``limit`` (three times what they took unmutated, plus 60 s) is
    killed by a hang, as a gate with a time limit fails it (e.g. an out-of-bounds read the Triton interpreter turns
    into a garbage loop bound); its detail keeps the run's own.  Reported apart (``hang``), never as a property's
    kill."""
    return {**verdict, "status": "killed", "killed_by": f"a hang (no verdict within {limit:.0f} s)", "hang": True,
            "examples": None, "seconds_to_kill": None, "pinned": False}  # fmt: skip


def ran_from_tree(log: Path, tree: Path, relpath: str, source: str) -> bool:
    """Whether the run's summary says the tree's ``relpath`` (with ``source``'s sha256) is what ran."""
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    expected = f"<- {(Path(tree) / relpath).resolve()} (sha256 {digest}) [ran]"
    try:
        return expected in log.read_text(errors="replace")
    except OSError:
        return False


# ----- reach and selection ------------------------------------------------------------------------
def tests_for(mutant: Mutant, overlay: Path, reach: dict, seconds: dict) -> list[str]:
    """The tests that executed one of ``mutant``'s lines in the control, cheapest first."""
    lines = reach.get(str((Path(overlay) / mutant.relpath).resolve()), {})
    found = {test for line in mutant.reach for test in lines.get(str(line), ())}
    return sorted(found, key=lambda t: (seconds.get(t, 0.0), t))


def reached(mutant: Mutant, overlay: Path, reach: dict | None) -> str:
    """``yes`` when a line of the mutant ran in the control, ``no`` when none did, ``unknown`` untraced."""
    if reach is None:
        return "unknown"
    lines = reach.get(str((Path(overlay) / mutant.relpath).resolve()))
    if lines is None:
        return "unknown"
    return "yes" if any(lines.get(str(line)) for line in mutant.reach) else "no"


def shard(items: list, shard_id: int, num_shards: int) -> list:
    """Items ``shard_id, shard_id + num_shards, ...``: a deterministic partition into ``num_shards``."""
    if num_shards < 1 or not 0 <= shard_id < num_shards:
        raise ValueError(f"--shard-id must be in 0..{num_shards - 1} and --num-shards >= 1")
    return items[shard_id::num_shards]


# ----- the run ----------------------------------------------------------------------------------
def run_mutants(
    mutants: list[Mutant],
    overlay: Path,
    out: Path,
    *,
    paths=("tests",),
    extra=("--subject=vllm",),
    profile: str = "mutants",
    jobs: int = 2,
    timeout: float = 900,
    preload=(VLLM_PRELOAD,),
    mode: str = "auto",
    all_tests: bool = False,
    keep_trees: bool = False,
    reach_from=None,
    control_workers: int = 1,
    cwd: Path = ROOT,
    env: dict | None = None,
) -> dict:
    """The control, then every mutant (module doc).

    Returns ``{"control": verdict, "results": {id: verdict}, "reach": {file: {line: [tests]}},
    "seconds": {test: control seconds}, "launcher": how runs were started}``.
    """
    out = Path(out).resolve()
    overlay = Path(overlay).resolve()
    files = sorted({str((overlay / m.relpath).resolve()) for m in mutants})
    env = {**pytest_env(profile, autoload=False), NO_SHRINK: "1"} if env is None else env
    results: dict[str, dict] = {}
    for folder in ("runs", "logs"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    launcher = Launcher(jobs=jobs, mode=mode, preload=preload, env=env, server_log=out / "logs" / "forkserver.log")
    run = {"control": None, "results": results, "reach": None, "seconds": {}, "launcher": launcher.why}
    with launcher:
        if reach_from:
            control = taken_control(reach_from, profile, files)
            run["control"] = control
            print(f"  control: {control['status']} ({control['detail']})", flush=True)
            if control["status"] != "passed":
                return run
            joined = reach_plugin.load(reach_from)
        else:
            joined = control_run(
                launcher, paths, overlay, extra, files, mutants, out, env, timeout, cwd, run, control_workers
            )
            if joined is None:
                return run
        run["reach"], run["seconds"] = joined["reach"], joined["seconds"]
        trees = out / "trees" if keep_trees else Path(tempfile.mkdtemp(prefix="vllm-mutants-"))
        runs = []
        for i, m in enumerate(mutants):
            error = load_error(m)
            selected = tests_for(m, overlay, run["reach"], run["seconds"])
            if error:
                results[m.id] = {"status": "not_loadable", "detail": error, "seconds": 0.0}
                continue
            if not selected:
                lines = ", ".join(map(str, m.reach))
                detail = f"no test executed its line(s) {lines} in the control run, so no property can see it"
                results[m.id] = {"status": "gap", "detail": detail, "seconds": 0.0, "tests": []}
                continue
            name = f"{i + 1:04d}-{_slug(m.id)}"
            mrecord = out / "runs" / f"{name}.json"
            for stale in (mrecord, running_file(mrecord)):
                stale.unlink(missing_ok=True)
            tree = write_tree(overlay, trees / name, m.relpath, m.source)
            budget = sum(run["seconds"].get(t, 0.0) for t in selected)
            limit = min(timeout, 60.0 + 3.0 * budget)
            targets = list(paths) if all_tests else selected
            margs = verification_args(targets, tree, mrecord, extra)
            runs.append(Run((m, mrecord, tree, selected, limit), margs, env, out / "logs" / f"{name}.log", limit, cwd))

        def mutant_done(r: Run, outcome: Outcome):
            m, mrecord, tree, selected, limit = r.key
            verdict = _verdict(outcome, mrecord, r.log, limit)
            if verdict["status"] == "timeout":
                verdict = hang_verdict(verdict, limit)
            # A run killed by a crash or a hang prints no summary: what killed it is the mutated tree's doing.
            if verdict["status"] in ("killed", "survived") and not verdict.get("crash") and not verdict.get("hang"):
                if not ran_from_tree(r.log, tree, m.relpath, m.source):
                    verdict = {
                        "status": "error",
                        "detail": f"the run's summary does not show the mutated file {tree / m.relpath} as the "
                        f"one that ran (see {r.log})",
                        "seconds": verdict["seconds"],
                        "cpu_seconds": verdict.get("cpu_seconds"),
                    }
            verdict.update(tests=len(selected), log=str(r.log))
            results[m.id] = verdict
            if not keep_trees:
                shutil.rmtree(tree, ignore_errors=True)
            extra_text = verdict.get("killed_by") or verdict.get("detail") or ""
            print(f"  {m.id}: {verdict['status']} ({verdict['seconds']} s) {extra_text}".rstrip(), flush=True)

        print(f"  {len(runs)} mutant runs, {jobs} at a time", flush=True)
        try:
            launcher.run(runs, mutant_done)
        finally:
            if not keep_trees:
                shutil.rmtree(trees, ignore_errors=True)
    return run


def control_run(launcher, paths, overlay, extra, files, mutants, out, env, timeout, cwd, run, workers=1):
    """The unmutated overlay through the verification with the reach plugin; its joined reach, or
    None (``run["control"]`` says why) when it does not pass.  With ``workers > 1`` it runs under
    pytest-xdist (each worker records its reach; passing is the exit status 0)."""
    record, reach_json = out / "runs" / "control.json", out / "control-reach.json"
    for path in (record, running_file(record), *out.glob("control-reach*.json")):
        path.unlink(missing_ok=True)
    functions = sorted({f"{(overlay / m.relpath).resolve()}::{m.function}" for m in mutants})
    args = verification_args(paths, overlay, record, extra, reach=(files, reach_json, functions))
    if workers > 1:
        args[args.index("no:xdist") - 1 : args.index("no:xdist") + 1] = [
            "-p",
            "xdist.plugin",
            "-n",
            str(workers),
            "--dist",
            "loadgroup",
        ]
    log = out / "logs" / "control.log"
    how = f"{launcher.mode}, {workers} xdist workers" if workers > 1 else launcher.mode
    print(f"  control run (the unmutated overlay; lines reached per test) by {how} ...", flush=True)
    control = {}

    def done(_run: Run, outcome: Outcome):
        if workers > 1 and outcome.error is None and outcome.returncode == 0:
            control.update(status="survived", seconds=outcome.seconds, cpu_seconds=outcome.cpu_seconds)
        elif workers > 1 and outcome.error is None and outcome.returncode is not None:
            control.update(status="error", detail=f"pytest exited {outcome.returncode}: {_log_tail(log)}")
            control.update(seconds=outcome.seconds, cpu_seconds=outcome.cpu_seconds)
        else:
            control.update(_verdict(outcome, record, log, timeout))

    launcher.run([Run(CONTROL, args, env, log, timeout, cwd)], done)
    control["status"] = {"survived": "passed", "killed": "failed"}.get(control["status"], "error")
    print(f"  control: {control['status']} ({control['seconds']} s)", flush=True)
    run["control"] = control
    found = sorted(out.glob("control-reach*.json"))
    if control["status"] != "passed" or not found:
        return None
    return reach_plugin.load(found)


def taken_control(reach_from, profile: str, files) -> dict:
    """The control's verdict from the reach files of a verification session run earlier: it passed
    (every process exited 0), under ``profile``, on these very files (their sha256)."""
    try:
        metas = reach_plugin.load(reach_from)["meta"]
    except (OSError, ValueError, KeyError) as exc:
        return {"status": "error", "detail": f"--reach-from: {exc}"}
    names = ", ".join(str(p) for p in reach_from)
    problems = []
    for meta in metas:
        if meta["profile"] != profile:
            problems.append(f"recorded under hypothesis profile {meta['profile']!r}, the mutants run under {profile!r}")
        for path in files:
            if path not in meta["sha256"]:
                problems.append(f"{path} was not measured")
            elif meta["sha256"][path] != hashlib.sha256(Path(path).read_bytes()).hexdigest():
                problems.append(f"{path} changed since it was measured")
        if meta["exitstatus"] not in (0, None):
            problems.append(f"the session that recorded it exited {meta['exitstatus']}")
    if not any(meta["exitstatus"] == 0 for meta in metas):
        problems.append("no process of that session finished its tests")
    if problems:
        return {"status": "error", "detail": f"--reach-from {names}: " + "; ".join(sorted(set(problems)))}
    return {"status": "passed", "detail": f"the verification session that wrote {names} passed", "seconds": 0.0}


def _verdict(outcome: Outcome, record: Path, log: Path, limit: float) -> dict:
    if outcome.error:
        verdict = {"status": "error", "detail": f"not run: {outcome.error}"}
    else:
        verdict = classify(outcome.returncode, record, log, limit)
    verdict.update(seconds=outcome.seconds, cpu_seconds=outcome.cpu_seconds, returncode=outcome.returncode)
    return verdict
