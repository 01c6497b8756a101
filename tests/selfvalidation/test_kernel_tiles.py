"""The kernels' tiles the strategies draw around (``fixtures.inputs.sizes.KERNEL_TILES``) are the tiles of the code.

The table names each Triton kernel's tile in one place; the sizes of vLLM's
kernels are constants in its source, so they are read here from the installed
release (or the overlay the run lays over it) and must equal the table: a
release that retiles a kernel fails this test instead of leaving the strategies
drawing around the old edges.  The reference kernel's tile is its own constant.
"""

import importlib.util
import inspect
import re

import pytest

from fixtures.inputs.sizes import KERNEL_TILES, crosses_second_tile, tile_edges
from fixtures.subjects import reference_kernel


def read(pattern: str, source: str, what: str) -> int:
    found = re.search(pattern, source)
    assert found, f"{what}: no match for {pattern!r}; the suite reads the tile from there (fixtures/inputs/sizes.py)"
    return int(found.group(1))


@pytest.fixture(scope="module")
def vllm_sources():
    """The installed release's sources of the kernels' launchers, prepared as the vllm subject imports them."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed here (tox -e vllm installs it)")
    from fixtures.subjects.vllm.loading.imports import detect_mode
    from fixtures.subjects.vllm_rocm_aiter_sparse.backend import import_rocm_backend

    backend, _ = import_rocm_backend(detect_mode())
    sources = {"backend": inspect.getsource(backend)}
    try:
        from vllm.v1.attention.ops import metadata
    except ImportError:
        metadata = None  # releases before the common token-to-request mapping
    sources["metadata"] = inspect.getsource(metadata) if metadata is not None else None
    return backend, sources


def test_the_reference_kernels_tile_is_the_tables():
    assert KERNEL_TILES["token_sparse_seqlen_kernel"].size == reference_kernel.BLOCK


def test_vllms_seqlen_kernel_tile_is_the_tables(vllm_sources):
    backend, sources = vllm_sources
    launcher = inspect.getsource(backend.generate_sparse_seqlen_triton)
    size = read(r"block_size = (\d+)", launcher, "generate_sparse_seqlen_triton")
    assert size == KERNEL_TILES["generate_sparse_seqlen_kernel"].size


def test_vllms_remap_kernel_tile_is_the_tables(vllm_sources):
    backend, _ = vllm_sources
    remap = getattr(backend, "triton_convert_req_index_to_global_index", None)
    if remap is None:
        pytest.skip("this vLLM release's backend has no triton_convert_req_index_to_global_index")
    assert (
        inspect.signature(remap).parameters["BLOCK_N"].default
        == KERNEL_TILES["_convert_req_index_to_global_index_kernel"].size
    )


def test_vllms_token_to_request_kernel_tile_is_the_tables(vllm_sources):
    _, sources = vllm_sources
    if sources["metadata"] is None:
        pytest.skip("this vLLM release has no vllm.v1.attention.ops.metadata (no token-to-request kernel)")
    size = read(
        r"tl\.program_id\(0\) \* (\d+) \+ tl\.arange\(0, \1\)", sources["metadata"], "_token_request_mapping_kernel"
    )
    assert size == KERNEL_TILES["_token_request_mapping_kernel"].size


def test_a_launch_crosses_its_second_tile_on_the_third_program_of_the_tiled_axis():
    assert not crosses_second_tile("generate_sparse_seqlen_kernel", (1024, 2))
    assert crosses_second_tile("generate_sparse_seqlen_kernel", (1, 3))
    assert crosses_second_tile("_token_request_mapping_kernel", (3,))
    assert not crosses_second_tile("_token_request_mapping_kernel", (2,))
    assert not crosses_second_tile("an_unknown_kernel", (100, 100))


def test_tile_edges_surround_every_tile():
    edges = set(tile_edges(upto=10**6))
    for tile in KERNEL_TILES.values():
        assert {2 * tile.size, 2 * tile.size + 1, 3 * tile.size + 1} <= edges, tile
