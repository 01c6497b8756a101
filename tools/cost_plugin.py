"""A pytest plugin that splits a run's time: imports, collection, and per test its Triton interpreter
and hypothesis time.

Loaded with ``-p tools.cost_plugin --cost-json=PATH`` (every tox env CI runs does; under xdist each
worker writes ``PATH`` with ``.<worker>`` before the suffix).  It writes::

    {"process": {"startup_cpu": CPU seconds before pytest configured (interpreter start and imports),
                 "configure_cpu": ... in pytest_configure (the subject's imports: vLLM),
                 "collection_cpu": ..., "collection_wall": ...,
                 "launch_replay": {"replayed", "ran", "unkeyed", "collisions"} (interpreted launches:
                 fixtures.plugin.launch_replay)},
     "tests": {node id: {"wall", "cpu", "triton", "triton_launches", "generate", "shrink", "examples"}}}

``triton``: seconds inside Triton's interpreted kernel launches (``InterpretedFunction.run``; the
compiled ``JITFunction.run`` on a GPU); ``generate``: hypothesis' data generation (the sum of its
per-example draw times); ``shrink``: the length of its shrink phase.  Hypothesis reports these
through its statistics hook (``hypothesis.statistics.collector``), the same one
``--hypothesis-show-statistics`` uses.  :mod:`tools.measurements` turns the files into the tables
of docs/measurements.md.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fixtures.plugin import launch_replay
from tools import worker_path

_STATE: dict = {"triton": 0.0, "launches": 0, "stats": []}


def pytest_addoption(parser):
    parser.getgroup("cost").addoption("--cost-json", default=None, metavar="PATH", help="write the run's cost split")


def _wrap_triton() -> None:
    import triton.runtime.jit as jit

    classes = [jit.JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:  # pragma: no cover - very old triton
        pass
    for cls in classes:
        original = cls.__dict__.get("run")
        if original is None or getattr(original, "_cost_wrapped", False):
            continue

        def run(self, *args, _original=original, **kwargs):
            start = time.perf_counter()
            try:
                return _original(self, *args, **kwargs)
            finally:
                _STATE["triton"] += time.perf_counter() - start
                _STATE["launches"] += 1

        run._cost_wrapped = True
        cls.run = run


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    path = config.getoption("--cost-json")
    if not path:
        return
    config._cost = {"path": worker_path(Path(path)), "startup_cpu": time.process_time(), "tests": {}}
    _wrap_triton()


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    cost = getattr(session.config, "_cost", None)
    if cost is not None:
        cost["configured_cpu"] = time.process_time()


def pytest_collection(session):
    cost = getattr(session.config, "_cost", None)
    if cost is not None:
        cost["collect_start"] = (time.process_time(), time.perf_counter())


def pytest_collection_finish(session):
    cost = getattr(session.config, "_cost", None)
    if cost is not None and "collect_start" in cost:
        cpu, wall = cost["collect_start"]
        cost["collection_cpu"] = time.process_time() - cpu
        cost["collection_wall"] = time.perf_counter() - wall


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item):
    # trylast: inside hypothesis' own wrapper, whose statistics callback this one chains.
    cost = getattr(item.config, "_cost", None)
    if cost is None:
        return (yield)
    from hypothesis.statistics import collector

    previous = collector.value
    stats = []

    def note(s):
        stats.append(s)
        if previous is not None:
            previous(s)

    with collector.with_value(note):
        try:
            return (yield)
        finally:
            rec = cost["tests"].setdefault(item.nodeid, _blank())
            for s in stats:
                for phase, data in s.items():
                    if not isinstance(data, dict) or "test-cases" not in data:
                        continue
                    cases = data["test-cases"]
                    rec["generate"] += sum(c.get("drawtime", 0.0) for c in cases)
                    rec["examples"] += len(cases)
                    if phase.startswith("shrink"):
                        rec["shrink"] += data.get("duration-seconds", 0.0)


def _blank() -> dict:
    return {"wall": 0.0, "cpu": 0.0, "triton": 0.0, "triton_launches": 0, "generate": 0.0, "shrink": 0.0, "examples": 0}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cost = getattr(item.config, "_cost", None)
    if cost is None:
        return (yield)
    start = (time.perf_counter(), time.process_time(), _STATE["triton"], _STATE["launches"])
    try:
        return (yield)
    finally:
        rec = cost["tests"].setdefault(item.nodeid, _blank())
        rec["wall"] += time.perf_counter() - start[0]
        rec["cpu"] += time.process_time() - start[1]
        rec["triton"] += _STATE["triton"] - start[2]
        rec["triton_launches"] += _STATE["launches"] - start[3]


def pytest_unconfigure(config):
    cost = getattr(config, "_cost", None)
    if cost is None:
        return
    process = {
        "startup_cpu": round(cost["startup_cpu"], 2),
        "configure_cpu": round(cost.get("configured_cpu", cost["startup_cpu"]) - cost["startup_cpu"], 2),
        "collection_cpu": round(cost.get("collection_cpu", 0.0), 2),
        "collection_wall": round(cost.get("collection_wall", 0.0), 2),
        "total_cpu": round(time.process_time(), 2),
    }
    replayer = launch_replay.installed()
    if replayer is not None:
        process["launch_replay"] = dict(replayer.stats)
    tests = {t: {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for t, r in cost["tests"].items()}
    cost["path"].parent.mkdir(parents=True, exist_ok=True)
    cost["path"].write_text(json.dumps({"process": process, "tests": tests}, indent=1))
