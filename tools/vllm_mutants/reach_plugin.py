"""A pytest plugin that records, per test, which lines of some files the test executed.

Loaded by the mutation runner's control run (the unmutated overlay) with
``-p tools.vllm_mutants.reach_plugin --reach-file=FILE ... --reach-json=PATH``
and optionally ``--reach-function=FILE::QUALNAME ...``; or, in a verification
session that is to serve as the control (CI's run against the post-change
file), with ``--reach-overlay=DIR --reach-base=BASE [--reach-scope=lines]``,
from which it works out the files and functions the mutants will touch
(:func:`tools.vllm_mutants.generate.generate`).  It runs coverage.py with one
dynamic context per test (``Coverage.switch_context`` with the test's node
id), measuring only those files, and writes JSON: ``reach`` ``{file: {line:
[node ids]}}``, ``seconds`` ``{node id: wall seconds}``, and ``meta`` (the
hypothesis profile, whether shrinking was on, the files' sha256, the
session's exit status, how it measured).  Under xdist each worker writes
``PATH`` with ``.<worker>`` before the suffix; :func:`load` joins them.  A
mutant then runs only the tests that executed one of its lines
(:mod:`tools.vllm_mutants.run`).

Where to measure:

- **Only inside the mutated functions** (``--reach-function``, what the runner
  passes when every mutated function is a plain function or method): each is
  wrapped so that coverage runs from its entry to its return, and is stopped
  everywhere else.  On Python 3.11 any trace function slows every frame while
  it is set; stopped outside those functions, the control costs little more
  than a plain run (docs/measurements.md, "Reach").  The functions are found
  once their module (matched by file) is imported, at the latest before each
  test.
- **Everywhere** (``--reach-everywhere``, no ``--reach-function``, or a
  function that is not a plain function: a Triton kernel, a nested function):
  coverage runs for the whole session.  Triton's interpreter runs a kernel as Python compiled under its
  source file's name and line numbers, so kernel lines are recorded too.

Hypothesis' own tracing (its ``explain`` phase) would compete for the trace
function; the ``mutation`` profile, which mutation runs use, has no such phase.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import sys
import time
from pathlib import Path

import pytest

from tools import worker_path

_KEY = pytest.StashKey[object]()


def load(paths) -> dict:
    """The reach files of one session (its workers' included) joined: ``{"reach", "seconds", "meta"}``."""
    reach, seconds, metas = {}, {}, []
    for path in paths:
        data = json.loads(Path(path).read_text())
        metas.append(data["meta"])
        seconds.update(data["seconds"])
        for file, lines in data["reach"].items():
            into = reach.setdefault(file, {})
            for line, tests in lines.items():
                into[line] = sorted(set(into.get(line, ())) | set(tests))
    if not metas:
        raise ValueError("no reach file given")
    return {"reach": reach, "seconds": seconds, "meta": metas}


def pytest_addoption(parser):
    group = parser.getgroup("reach", "lines each test executes (mutation runner)")
    group.addoption("--reach-file", action="append", default=[], metavar="FILE", help="record the lines of FILE")
    group.addoption(
        "--reach-function",
        action="append",
        default=[],
        metavar="FILE::QUALNAME",
        help="measure only inside these functions of the --reach-file files (else: the whole session)",
    )
    group.addoption("--reach-json", default=None, metavar="PATH", help="write {file: {line: [test ids]}} here")
    group.addoption(
        "--reach-everywhere", action="store_true", help="measure the whole session, not only inside the functions"
    )
    group.addoption("--reach-overlay", default=None, metavar="DIR", help="files and functions: the mutants' of DIR")
    group.addoption("--reach-base", default=None, metavar="DIR", help="with --reach-overlay: the change's base")
    group.addoption("--reach-scope", default="lines", metavar="SCOPE", help="with --reach-overlay: lines or function")


class Reach:
    def __init__(self, config, files, functions, out: Path):
        import coverage

        self.files, self.out = files, out
        self.seconds: dict[str, float] = {}
        self.exitstatus = None
        # One data file per process: xdist's workers writing one SQLite file race on making its tables
        # (coverage's "no such table: context", a suite error of the control run).
        self.cov = coverage.Coverage(
            data_file=str(worker_path(out).with_suffix(".coverage")), include=files, config_file=False, branch=False
        )
        self.context = ""
        self.depth = 0
        self.pending = {}  # realpath -> [qualname]: functions not wrapped yet
        for spec in functions:
            path, _, qualname = spec.partition("::")
            self.pending.setdefault(os.path.realpath(path), []).append(qualname)
        if config.getoption("--reach-everywhere"):
            self.pending = {}
        self.scoped = bool(self.pending)
        self.mode = "inside the mutated functions" if self.scoped else "the whole session"
        if not self.scoped:
            self.cov.start()
        self._untrace_kernel_launches()

    def _untrace_kernel_launches(self) -> None:
        """Measuring inside the mutated functions, a Triton kernel they launch runs untraced: the
        interpreter's millions of Python calls under the trace function more than doubled the cost of
        the control's launches, and no mutant is a kernel's line (a kernel as mutated function measures
        the whole session, where launches stay traced).  The trace function is put back as it was
        (coverage's tracer takes ``settrace(gettrace())``), so the lines of the mutated function after
        the launch are measured as before (docs/measurements-log.md, "Time cuts")."""
        try:
            from triton.runtime import interpreter
        except ImportError:  # no Triton: nothing launches
            return
        launch = interpreter.GridExecutor.__call__
        reach = self

        @functools.wraps(launch)
        def untraced(executor, *args, **kwargs):
            tracer = sys.gettrace()
            if not reach.scoped or tracer is None:
                return launch(executor, *args, **kwargs)
            sys.settrace(None)
            try:
                return launch(executor, *args, **kwargs)
            finally:
                sys.settrace(tracer)

        interpreter.GridExecutor.__call__ = untraced

    # -- scoped measurement
    def wrap_pending(self) -> None:
        if not self.pending:
            return
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if not path or os.path.realpath(path) not in self.pending:
                continue
            for qualname in self.pending.pop(os.path.realpath(path)):
                if not self._wrap(module, qualname):
                    self._fall_back(f"{qualname} is not a plain function or method")
                    return

    def _wrap(self, module, qualname: str) -> bool:
        *owners, name = qualname.split(".")
        owner = module
        for part in owners:
            owner = getattr(owner, part, None)
            if owner is None or inspect.isfunction(owner):
                return False  # a nested function: not reachable by attribute
        fn = inspect.getattr_static(owner, name, None)
        if not inspect.isfunction(fn):
            return False
        reach = self

        @functools.wraps(fn)
        def measured(*args, **kwargs):
            if reach.depth == 0 and reach.scoped:
                reach.cov.start()
                reach.cov.switch_context(reach.context)
            reach.depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                reach.depth -= 1
                if reach.depth == 0 and reach.scoped:
                    reach.cov.stop()

        setattr(owner, name, measured)
        return True

    def _fall_back(self, why: str) -> None:
        self.scoped, self.pending = False, {}
        self.mode = f"the whole session ({why})"
        self.cov.start()
        self.cov.switch_context(self.context)

    # -- contexts
    def switch(self, context: str) -> None:
        self.context = context
        if not self.scoped:
            self.cov.switch_context(context)

    def write(self) -> None:
        from fixtures.plugin import profiles

        if not self.scoped:
            self.cov.stop()
        self.cov.save()
        data = self.cov.get_data()
        measured = set(data.measured_files())
        reach = {}
        for path in self.files:
            by_line = data.contexts_by_lineno(path) if path in measured else {}
            reach[path] = {str(line): sorted(c for c in contexts if c) for line, contexts in sorted(by_line.items())}
        meta = {
            "measured": self.mode,
            "profile": profiles.current(),
            "no_shrink": os.environ.get(profiles.NO_SHRINK) == "1",
            "sha256": {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in self.files},
            "exitstatus": self.exitstatus,
        }
        out = worker_path(self.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"meta": meta, "reach": reach, "seconds": self.seconds}, indent=1))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    files = [os.path.realpath(f) for f in config.getoption("--reach-file")]
    functions = list(config.getoption("--reach-function"))
    out = config.getoption("--reach-json")
    overlay = config.getoption("--reach-overlay")
    if overlay and out:
        if not os.path.isdir(overlay):
            return  # the session itself reports a missing overlay
        from tools.vllm_mutants.generate import generate

        base = config.getoption("--reach-base")
        mutants = generate(Path(overlay), Path(base) if base else None, scope=config.getoption("--reach-scope")).mutants
        files += sorted({os.path.realpath(Path(overlay) / m.relpath) for m in mutants})
        functions += sorted({f"{os.path.realpath(Path(overlay) / m.relpath)}::{m.function}" for m in mutants})
    if files and out:
        config.stash[_KEY] = Reach(config, files, functions, Path(out))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    reach = item.config.stash.get(_KEY, None)
    if reach is None:
        return (yield)
    reach.wrap_pending()
    reach.switch(item.nodeid)
    start = time.perf_counter()
    try:
        return (yield)
    finally:
        reach.seconds[item.nodeid] = round(time.perf_counter() - start, 3)
        reach.switch("")


def pytest_sessionfinish(session, exitstatus):
    reach = session.config.stash.get(_KEY, None)
    if reach is not None:
        reach.exitstatus = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    reach = config.stash.get(_KEY, None)
    if reach is not None:
        reach.write()
