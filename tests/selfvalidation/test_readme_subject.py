"""The minimal external subject printed in docs/subject-protocol.md works as documented, and as
written for each earlier protocol version it keeps running, with one DeprecationWarning."""

import re

import pytest

from fixtures.protocol import PROTOCOL_VERSION
from tools.fresh_run import ROOT, repo

STEP_PROPERTY = "tests/differential/test_single_step.py::test_step_metadata_matches_oracle"
DECLARED = f"    protocol_version = {PROTOCOL_VERSION}  # the protocol it is written for\n"


def readme_block() -> str:
    readme = (ROOT / "docs" / "subject-protocol.md").read_text()
    return next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "class MinimalSubject" in b)


def as_written_for(version: int | None, declared: bool) -> str:
    """The README's subject as written for ``version`` (before 6: no paged_kv_metadata), declaring
    it or (``declared`` False) not, as every subject did before versions could be declared."""
    block = readme_block()
    assert DECLARED in block, "the README's subject declares the current protocol version"
    block = block.replace(DECLARED, f"    protocol_version = {version}\n" if declared else "")
    if version < 6:
        block = block.replace(', "paged_kv_metadata"}', "}")
    return block


@pytest.mark.parametrize(("version", "declared"), [(5, False), (5, True), (7, False), (9, True)])
def test_readme_minimal_subject_as_written_for_an_earlier_protocol_still_passes(
    pytester, run_suite_in, version, declared
):
    pytester.makepyfile(_readme_subject_old=as_written_for(version, declared))
    run = run_suite_in(repo(STEP_PROPERTY), "--subject=_readme_subject_old:MinimalSubject", profile="dev")
    assert run.ret == 0, run.out[-3000:]
    assert "test_step_metadata_matches_oracle  [1 passed" in run.out, run.out[-3000:]
    warned = re.findall(r"DeprecationWarning: subject 'minimal' (declares [^:]+): it runs as written for", run.out)
    assert len(warned) == 1, run.out[-3000:]
    assert warned[0] == (f"declares protocol_version {version}" if declared else "declares no protocol_version")
    assert ("add 'paged_kv_metadata' to its capabilities" in run.out) == (version < 6), run.out[-3000:]


def test_readme_minimal_subject_runs_and_passes(pytester, run_suite_in):
    block = readme_block()
    pytester.makepyfile(_readme_subject_tmp=block)  # pytester's temporary folder, never the checkout
    run = run_suite_in(repo("tests/differential"), "--subject=_readme_subject_tmp:MinimalSubject")
    out = run.out
    assert run.ret == 0, out[-3000:]
    assert "DeprecationWarning: subject 'minimal'" not in out, "the README's subject is written for this protocol"
    assert "test_step_metadata_matches_oracle  [1 passed" in out, out[-3000:]
    assert "subject 'minimal' lacks device_kernel" in out
    assert "subject 'minimal' lacks host_path" in out


def test_a_subject_importing_a_name_moved_out_of_the_protocol_still_runs_and_is_warned(pytester, run_suite_in):
    """Protocol 10 moved the suite's own names out of ``fixtures.protocol``: a subject written against the old
    place (here the README's, importing ``exposed_buffers`` from it) still runs, and the import warns, naming
    the new home."""
    block = readme_block().replace(
        "import torch\n", "import torch\n\nfrom fixtures.protocol import exposed_buffers\n", 1
    )
    assert "from fixtures.protocol import exposed_buffers" in block
    pytester.makepyfile(_readme_subject_moved=block)
    run = run_suite_in(
        repo(STEP_PROPERTY), "--subject=_readme_subject_moved:MinimalSubject", "-W", "always::DeprecationWarning"
    )
    assert run.ret == 0, run.out[-3000:]
    assert "fixtures.protocol.exposed_buffers moved to fixtures.harness.contract.exposed_buffers" in run.out, run.out[
        -3000:
    ]
