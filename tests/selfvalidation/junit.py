"""Running the suite in a subprocess and reading per-test outcomes from its JUnit XML."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from fixtures.killmatrix import ROOT, pytest_env


def run_pytest(
    args, junit: Path, *, env_extra=None, timeout=600, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """``python -m pytest ARGS --junitxml=JUNIT``, CI profile, from the repository root.

    With ``cwd`` (a temporary folder): run there with the suite's plugin loaded by
    ``-p fixtures.plugin`` and the repository importable, nothing written into the checkout.
    """
    env = {**pytest_env("ci", pythonpath=[ROOT] if cwd is not None else []), **(env_extra or {})}
    plugin = ["-p", "fixtures.plugin"] if cwd is not None else []
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin, f"--junitxml={junit}", *args]
    return subprocess.run(cmd, cwd=cwd or ROOT, env=env, capture_output=True, text=True, timeout=timeout)


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
