"""The findings registries are reports a maintainer can act on (docs/findings.md): each finding says where vLLM's
own code reaches it or why it is outside what vLLM produces, carries a fix diff that applies to the file it names
(or the upstream fix that landed), names a regression test and properties that exist, and docs/findings.md is what
the registries say.  The diffs of the post-change file apply without vLLM; those of a release's file need it."""

from __future__ import annotations

import ast
import importlib.util

import pytest

from fixtures import ROOT
from fixtures.findings import is_hazard
from fixtures.subjects import registered_findings
from fixtures.subjects.vllm.loading.fixes import FixError, apply, fixed_overlay, parse
from fixtures.subjects.vllm.loading.imports import installed_vllm_version
from tools import findings_doc

pytestmark = pytest.mark.selftest

FINDINGS = registered_findings()
IDS = [f.key for _, f in FINDINGS]
OVERLAY = ROOT.parent / "shared" / "vllm-pr"


def test_docs_findings_is_generated_from_the_registries():
    """``python -m tools.findings_doc`` writes docs/findings.md; a registry edit without it fails here."""
    assert (ROOT / "docs" / "findings.md").read_text() == findings_doc.render(), (
        "docs/findings.md is not what the findings registries say: run python -m tools.findings_doc"
    )


def node_exists(node: str) -> bool:
    """Whether ``path::function`` names a test function of the suite."""
    path, _, name = node.partition("::")
    file = ROOT / path
    if not file.is_file():
        return False
    tree = ast.parse(file.read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == name.split("[")[0] for n in tree.body)


@pytest.mark.parametrize("subject, finding", FINDINGS, ids=IDS)
def test_each_finding_is_a_report_a_maintainer_can_act_on(subject, finding):
    keys = [f.key for _, f in FINDINGS]
    assert keys.count(finding.key) == 1, f"{finding.key} is registered twice"
    assert node_exists(finding.regression_test), f"{finding.key}: no test {finding.regression_test}"
    for node in getattr(finding, "properties", ()):
        assert node_exists(node), f"{finding.key}: no property {node}"
    assert "pytest " in finding.reproducer and finding.description and finding.fix
    assert getattr(finding, "upstream", ""), f"{finding.key}: say whether it was seen upstream (searched when)"
    if is_hazard(finding):
        assert not getattr(finding, "fix_diff", ""), f"{finding.key}: a hazard is no defect of vLLM's to fix"
        return
    fixed_upstream = "fixed upstream by" in finding.upstream
    assert getattr(finding, "fix_diff", "") or fixed_upstream, (
        f"{finding.key}: a defect carries the fix a maintainer applies (fix_diff), or names the upstream fix"
    )
    if getattr(finding, "fix_diff", ""):
        assert finding.properties, f"{finding.key}: the fix check needs the properties that pass over it"
        assert all(p.path.startswith("vllm/") for p in parse(finding.fix_diff)), "paths relative to the overlay root"


@pytest.mark.parametrize(
    "subject, finding", [(s, f) for s, f in FINDINGS if getattr(f, "fix_diff", "")], ids=lambda v: getattr(v, "key", v)
)
def test_each_fix_diff_applies_to_the_file_it_names(subject, finding, tmp_path):
    """Each hunk of a fix matches exactly one place of its file: the post-change file's where the overlay has the
    file, else the installed release's (skipped without vLLM)."""
    for patch in parse(finding.fix_diff):
        if (OVERLAY / patch.path).is_file():
            apply((OVERLAY / patch.path).read_text(), patch)
        elif importlib.util.find_spec("vllm") is None:
            pytest.skip(f"not applicable: {patch.path} is a release's file and vLLM is not installed here")
        elif (version := installed_vllm_version()) not in finding.seen_on:
            pytest.skip(
                f"not applicable: the fix is of vLLM {', '.join(finding.seen_on)}'s {patch.path}, not {version}'s"
            )
    out = fixed_overlay(finding.fix_diff, tmp_path / "fixed", OVERLAY if OVERLAY.is_dir() else None)
    assert all((out / p.path).is_file() for p in parse(finding.fix_diff))


def test_a_hunk_that_matches_nowhere_or_twice_is_an_error_naming_it(tmp_path):
    diff = "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3\n"
    (patch,) = parse(diff)
    assert apply("a = 1\nb = 2\nc = 4\n", patch) == "a = 1\nb = 3\nc = 4\n"
    with pytest.raises(FixError, match="hunk 1 matches nowhere"):
        apply("a = 1\nb = 5\n", patch)
    with pytest.raises(FixError, match="hunk 1 matches 2 places"):
        apply("a = 1\nb = 2\na = 1\nb = 2\n", patch)
