"""``--vllm-overlay``: the overlay's files run, everything else stays the installed package's.

A synthetic installed ``vllm`` package (a module, a subpackage, a stand-in
for a compiled extension) and overlays of it are written into a temporary
folder; each check runs in a fresh interpreter, so the suite's own process
never imports the synthetic package.  No real vLLM is needed.
"""

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fixtures import ROOT
from fixtures.subjects.vllm.loading.overlay import OverlayError, install, overlay_files


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def installed(tmp_path):
    """site/vllm: __init__, a module, a subpackage with a module, and an "extension"."""
    site = tmp_path / "site"
    write(site / "vllm/__init__.py", "ORIGIN = 'installed'\n")
    write(site / "vllm/backend.py", "ORIGIN = 'installed'\n")
    write(site / "vllm/other.py", "ORIGIN = 'installed'\n")
    write(site / "vllm/sub/__init__.py", "ORIGIN = 'installed'\n")
    write(site / "vllm/sub/deep.py", "ORIGIN = 'installed'\n")
    write(site / "vllm/_ext.py", "ORIGIN = 'installed extension'\n")  # the wheel's compiled part
    return site


def run_probe(site: Path, overlay: Path, code: str) -> dict:
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path[:0] = [{str(ROOT)!r}, {str(site)!r}]
        from fixtures.subjects.vllm.loading import overlay as vllm_overlay
        files = vllm_overlay.install({str(overlay)!r})
        """
    ) + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_changed_files_replace_the_installed_ones_and_nothing_else(installed, tmp_path):
    overlay = tmp_path / "pr"
    changed = write(overlay / "vllm/backend.py", "ORIGIN = 'overlay'\n")
    write(overlay / "vllm/sub/deep.py", "ORIGIN = 'overlay'\n")
    got = run_probe(
        installed,
        overlay,
        """
        import vllm, vllm.backend, vllm.other, vllm.sub, vllm.sub.deep, vllm._ext
        mods = [vllm, vllm.backend, vllm.other, vllm.sub, vllm.sub.deep, vllm._ext]
        print(json.dumps({
            "origins": {m.__name__: m.ORIGIN for m in mods},
            "ran": vllm_overlay.loaded_from_overlay(vllm.backend),
            "summary": vllm_overlay.summary(),
        }))
        """,
    )
    assert got["origins"] == {
        "vllm": "installed",
        "vllm.backend": "overlay",
        "vllm.other": "installed",
        "vllm.sub": "installed",
        "vllm.sub.deep": "overlay",
        "vllm._ext": "installed extension",
    }
    assert got["ran"] is True
    digest = hashlib.sha256(changed.read_bytes()).hexdigest()
    assert f"vllm.backend <- {changed.resolve()} (sha256 {digest}) [ran]" in got["summary"]
    assert "vllm.sub.deep <- " in got["summary"]
    assert (installed / "vllm/backend.py").read_text() == "ORIGIN = 'installed'\n", "installed file modified"


def test_a_checkout_overlays_packages_and_keeps_the_installed_extension(installed, tmp_path):
    """A full checkout has its own ``vllm/__init__.py`` but no compiled extension: the
    installed one is still found, through the package's search path."""
    checkout = tmp_path / "checkout"
    write(checkout / "vllm/__init__.py", "ORIGIN = 'checkout'\n")
    write(checkout / "vllm/backend.py", "ORIGIN = 'checkout'\n")
    got = run_probe(
        installed,
        checkout,
        """
        import vllm, vllm.backend, vllm.other, vllm._ext
        print(json.dumps([vllm.ORIGIN, vllm.backend.ORIGIN, vllm.other.ORIGIN, vllm._ext.ORIGIN, vllm.__path__]))
        """,
    )
    assert got[:4] == ["checkout", "checkout", "installed", "installed extension"]
    assert got[4][0] == str((checkout / "vllm").resolve()) and str(installed / "vllm") in got[4]


def test_an_overlay_after_vllm_was_imported_is_refused(installed, tmp_path):
    overlay = tmp_path / "pr"
    write(overlay / "vllm/backend.py", "ORIGIN = 'overlay'\n")
    script = textwrap.dedent(
        f"""
        import sys
        sys.path[:0] = [{str(ROOT)!r}, {str(installed)!r}]
        import vllm.backend
        from fixtures.subjects.vllm.loading import overlay as vllm_overlay
        vllm_overlay.install({str(overlay)!r})
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "['vllm.backend'] were imported before the overlay was installed" in proc.stderr


def test_a_folder_that_does_not_mirror_vllm_is_refused(tmp_path):
    with pytest.raises(OverlayError, match="no folder vllm/"):
        install(tmp_path)
    (tmp_path / "vllm").mkdir()
    with pytest.raises(OverlayError, match="no Python file"):
        install(tmp_path)


def test_overlay_files_are_named_as_modules(tmp_path):
    write(tmp_path / "vllm/v1/x.py", "")
    write(tmp_path / "vllm/v1/__init__.py", "")
    assert [f.module for f in overlay_files(tmp_path)] == ["vllm.v1", "vllm.v1.x"]


def test_the_option_reaches_the_run_and_a_bad_folder_is_a_usage_error(tmp_path):
    """``pytest --vllm-overlay DIR`` installs the overlay before the subject loads;
    a folder without ``vllm/`` stops the run with the reason."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", f"--vllm-overlay={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "no folder vllm/" in proc.stderr
