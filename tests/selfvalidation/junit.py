"""Running the suite in a subprocess and reading per-test outcomes from its JUnit XML.

:class:`SuiteRun` runs it on probe modules that a test writes with pytester, in
pytester's temporary folder; :func:`run_pytest` runs the repository's own tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from tools.killmatrix import ROOT, pytest_env


def run_pytest(args, junit: Path, *, env_extra=None, timeout=600) -> subprocess.CompletedProcess:
    """``python -m pytest ARGS --junitxml=JUNIT``, CI profile, from the repository root."""
    env = {**pytest_env("ci"), **(env_extra or {})}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@dataclass
class SuiteRun:
    """The suite run by pytester in its temporary folder, in a fresh process: CI
    profile, the repository importable, nothing written into the checkout."""

    pytester: pytest.Pytester

    def __call__(self, *args, load_plugin: bool = True, timeout: float = 600):
        """Run ``args`` (``-p fixtures.plugin.hooks`` first unless ``load_plugin`` is
        False: a run under the repository's root loads it through conftest.py).
        Returns the pytester result, its whole output, and outcomes by test name."""
        junit = self.pytester.path / "junit.xml"
        junit.unlink(missing_ok=True)  # a run that stops early writes none: never read the last one
        plugin = ("-p", "fixtures.plugin.hooks") if load_plugin else ()
        result = self.pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", *plugin, f"--junitxml={junit}", *args, timeout=timeout
        )
        results = outcomes(junit) if junit.exists() else {}
        out = "\n".join(result.outlines + result.errlines)
        return result, out, {name.rsplit("::", 1)[1]: r for name, r in results.items()}


def suite_env(monkeypatch) -> None:
    """This process's environment as :func:`pytest_env` sets it for a fresh run (pytester's
    subprocesses inherit it), with the repository on PYTHONPATH."""
    env = pytest_env("ci", pythonpath=[ROOT])
    for name in set(os.environ) - set(env):
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def outcomes(junit: Path) -> dict[str, dict]:
    """Test id -> {"outcome": passed|failed|error|skipped, "message": str, "properties": {...}}."""
    result = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = node.get("message") or ""
                break
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        result[f"{case.get('classname')}::{case.get('name')}"] = {
            "outcome": outcome,
            "message": message,
            "properties": props,
        }
    return result
