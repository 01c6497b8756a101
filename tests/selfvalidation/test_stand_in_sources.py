"""Every stand-in names the exact source it models: repository, path, and the commit or release the installed vLLM
is built against (AITER's and FlashMLA's from each vLLM sdist's pins, FlashInfer's from the installed vLLM's
requirement, vLLM's own ops from the installed release).  No citation is unversioned; with vLLM installed, each
names a version for that release (a release the pin tables lack is the suite's limit, named here)."""

from __future__ import annotations

import importlib.util
import re

import pytest

from fixtures import ROOT
from fixtures.subjects.vllm.concat_mla_q import SOURCES as CONCAT_SOURCES
from fixtures.subjects.vllm.forward.sparse import flashinfer_source, flashmla_source
from fixtures.subjects.vllm_rocm_aiter_sparse import aiter_door
from fixtures.subjects.vllm_rocm_aiter_sparse.forward import sparse_kernel_sources

pytestmark = pytest.mark.selftest

# owner/repo path...@version: a release tag (v1.2.3...) or a commit (7 to 40 hex digits)
VERSIONED = re.compile(r"^[\w.-]+/[\w.-]+ \S.*@ ?(v\d[\w.]*|[0-9a-f]{7,40})\b")


def cited() -> dict[str, tuple[str, bool]]:
    """What each stand-in cites, and whether the installed release reaches it (without vLLM: none of the citations
    that name the installed release's pins)."""
    installed = importlib.util.find_spec("vllm") is not None
    sources = {f"aiter door {i}": (s, installed) for i, s in enumerate(aiter_door.SOURCES)}
    sources.update({f"concat_mla_q {s.name}": (s.citation("0.34.0"), True) for s in CONCAT_SOURCES})
    sources["flashinfer"] = (flashinfer_source(), installed and _drives("vllm-flashinfer-sparse"))
    sources["flashmla"] = (flashmla_source(), installed and _drives("vllm-flashmla-sparse"))
    sources.update({f"sparse kernel {i}": (s, installed) for i, s in enumerate(sparse_kernel_sources())})
    return sources


def test_every_stand_in_cites_a_versioned_source():
    """Every citation the installed release reaches names the version its release pins; the AITER door's rows each
    cite one of the door's sources."""
    for what, (source, reached) in cited().items():
        if reached:
            assert VERSIONED.match(source), f"{what} cites an unversioned source: {source}"
    for row in aiter_door.PRECONDITIONS:
        assert any(source.split("@")[0] in row.where for source in aiter_door.SOURCES), (
            f"AITER's door: the precondition {row.what!r} of {row.function} cites none of the door's sources"
        )


def test_no_citation_points_into_a_search_index():
    """A citation is a repository, a path and a version, never an id of a search index."""
    for path in (ROOT / "fixtures").rglob("*.py"):
        assert "index id" not in path.read_text(), f"{path.relative_to(ROOT)} cites a search index id"


def test_the_pins_cover_the_installed_release():
    """The AITER and FlashMLA a vLLM release builds against are read from its sdist (docker/Dockerfile.rocm_base,
    cmake/external_projects/flashmla.cmake) into the tables; the installed release must be in them."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed here (tox -e vllm installs it)")
    assert aiter_door.aiter_release() is not None, "add the installed vLLM's AITER_BRANCH to aiter_door.AITER_BUILT_BY"
    assert "<no FlashMLA pin" not in flashmla_source() or not _drives("vllm-flashmla-sparse"), (
        "add the installed vLLM's FlashMLA GIT_TAG to forward.sparse.FLASHMLA_BUILT_BY"
    )
    assert "@v?" not in flashinfer_source() or not _drives("vllm-flashinfer-sparse"), (
        "the installed vLLM pins no flashinfer"
    )


def _drives(sibling: str) -> bool:
    """Whether the installed release has ``sibling``'s forward, which the suite drives with its kernel stood in."""
    from fixtures.subjects import load_subject
    from fixtures.subjects.vllm.siblings import NotASiblingHere

    try:
        return "nope_forward" in load_subject(sibling).capabilities
    except NotASiblingHere:
        return False
