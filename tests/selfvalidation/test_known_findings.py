"""A known finding excuses exactly the failure it documents, nothing else."""

import types

import pytest

from fixtures.findings import match_builder_finding, match_forward_finding
from fixtures.protocol import known_findings
from fixtures.subjects.reference import ReferenceSubject
from fixtures.subjects.vllm_rocm_aiter_sparse.findings import ALL_FINDINGS, FORWARD_FINDINGS, KNOWN_FINDINGS

# A subject that hands the suite vLLM's findings, without importing vLLM.
WITH_FINDINGS = types.SimpleNamespace(known_findings=lambda: KNOWN_FINDINGS)

MESSAGE = "cannot reshape tensor of 0 elements into shape [0, -1]"


def raise_from(filename: str, exc: BaseException) -> BaseException:
    code = compile("raise exc", filename, "exec")
    try:
        exec(code, {"exc": exc})
    except BaseException as caught:  # noqa: BLE001 - the point is to capture it
        return caught
    raise AssertionError("unreachable")


def test_matches_only_the_documented_source_message_and_inputs():
    source = "/site-packages/vllm/model_executor/layers/attention/mla_attention.py"
    exc = raise_from(source, RuntimeError(MESSAGE))
    assert match_forward_finding(WITH_FINDINGS, exc, kv_cache_dtype="fp8", num_tokens=0) is FORWARD_FINDINGS[0]
    # Another batch size, another cache dtype, another file, another message, another type: no match.
    assert match_forward_finding(WITH_FINDINGS, exc, kv_cache_dtype="fp8", num_tokens=1) is None
    assert match_forward_finding(WITH_FINDINGS, exc, kv_cache_dtype="auto", num_tokens=0) is None
    assert (
        match_forward_finding(
            WITH_FINDINGS,
            raise_from("fixtures/subjects/reference_forward.py", RuntimeError(MESSAGE)),
            kv_cache_dtype="fp8",
            num_tokens=0,
        )
        is None
    )
    assert (
        match_forward_finding(
            WITH_FINDINGS, raise_from(source, RuntimeError("other")), kv_cache_dtype="fp8", num_tokens=0
        )
        is None
    )
    assert (
        match_forward_finding(
            WITH_FINDINGS, raise_from(source, ValueError(MESSAGE)), kv_cache_dtype="fp8", num_tokens=0
        )
        is None
    )


def test_a_subject_without_the_hook_has_no_findings():
    """Only the subject's own findings excuse a failure: the reference (no ``known_findings()``)
    and no subject at all get none, even on vLLM's documented failure."""
    exc = raise_from("/site-packages/vllm/model_executor/layers/attention/mla_attention.py", RuntimeError(MESSAGE))
    for subject in (ReferenceSubject(), None):
        assert known_findings(subject).all() == ()
        assert match_forward_finding(subject, exc, kv_cache_dtype="fp8", num_tokens=0) is None
        assert match_builder_finding(subject, exc, batch=None) is None


@pytest.mark.parametrize("finding", ALL_FINDINGS, ids=lambda f: f.key)
def test_every_finding_says_where_it_happens_how_to_reproduce_and_fix_it(finding):
    assert finding.deployment and finding.reproducer and finding.fix and finding.description


@pytest.mark.parametrize("finding", ALL_FINDINGS, ids=lambda f: f.key)
def test_every_finding_names_an_existing_regression_test(finding):
    from pathlib import Path

    path, _, name = finding.regression_test.partition("::")
    source = (Path(__file__).resolve().parents[2] / path).read_text()
    assert f"def {name}(" in source
