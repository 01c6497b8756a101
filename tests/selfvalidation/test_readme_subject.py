"""The minimal external subject printed in docs/subject-protocol.md works as documented."""

import re

from fixtures.killmatrix import ROOT, run_pytest


def test_readme_minimal_subject_runs_and_passes(tmp_path):
    readme = (ROOT / "docs" / "subject-protocol.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "class MinimalSubject" in b)
    (tmp_path / "_readme_subject_tmp.py").write_text(block)  # a temporary folder, never the checkout
    proc = run_pytest("_readme_subject_tmp:MinimalSubject", "tests/differential", pythonpath=[tmp_path])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "test_step_metadata_matches_oracle  [1 passed" in out, out[-3000:]
    assert "subject 'minimal' lacks device_kernel" in out
    assert "subject 'minimal' lacks host_path" in out
