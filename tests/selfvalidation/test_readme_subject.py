"""The minimal external subject printed in docs/subject-protocol.md works as documented."""

import re

from fixtures.plugin.fresh_run import ROOT, repo


def test_readme_minimal_subject_runs_and_passes(pytester, run_suite_in):
    readme = (ROOT / "docs" / "subject-protocol.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "class MinimalSubject" in b)
    pytester.makepyfile(_readme_subject_tmp=block)  # pytester's temporary folder, never the checkout
    run = run_suite_in(repo("tests/differential"), "--subject=_readme_subject_tmp:MinimalSubject")
    out = run.out
    assert run.ret == 0, out[-3000:]
    assert "test_step_metadata_matches_oracle  [1 passed" in out, out[-3000:]
    assert "subject 'minimal' lacks device_kernel" in out
    assert "subject 'minimal' lacks host_path" in out
