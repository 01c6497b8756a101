"""What the suite can drive of a vLLM backend file, read by introspection: no vLLM needed.

The launcher bound by parameter name whatever its signature, the host path
found only where its state is, the NoPE branches found in ``forward_mqa``'s
source, and the layer that keeps AITER's metadata off, each on small stand-in
classes written as the releases write them.  What the code under review is
found to have decides only what can be driven; what it owes comes from the
release (``tests/selfvalidation/test_owed_capabilities.py``).
"""

import types

import torch

from fixtures.protocol import DEVICE_KERNEL, HOST_PATH, NOPE_FORWARD, NOPE_ZERO_COPY
from fixtures.subjects.vllm.introspection import (
    HOST_PATH_STATE,
    bind_launcher,
    capabilities_of,
    forward_capabilities,
    forward_notes,
    has_nope_zero_copy,
)
from fixtures.subjects.vllm_rocm_aiter_sparse.subject import layer_stand_in


def test_launcher_is_bound_by_name_in_either_signature():
    values = dict(query_lens="Q", seq_lens="S", cu_query_lens="C", topk_token=7, num_tokens=3, max_query_len=2)

    def released(seq_lens, cu_query_lens, topk_token, num_tokens, max_query_len):
        return (seq_lens, cu_query_lens, topk_token, num_tokens, max_query_len)

    def query_lens_first(query_lens, seq_lens, cu_query_lens, topk, num_tokens, max_query_len):
        return (query_lens, seq_lens, cu_query_lens, topk, num_tokens, max_query_len)

    assert bind_launcher(released, values) == ("S", "C", 7, 3, 2)
    assert bind_launcher(query_lens_first, values) == ("Q", "S", "C", 7, 3, 2)


class _Released:
    def __init__(self):
        self.paged_kv_indptr = None


class _WithHostPath(_Released):
    def __init__(self):
        super().__init__()
        self._host_decode_indptr = None
        self._host_indptr = None
        self._host_upload_done = None
        self._decode_req_id_extent = 0
        self._prev_req_extent = 0


def _launcher(seq_lens, cu_query_lens, topk_token, num_tokens, max_query_len):
    pass


def _unknown_launcher(seq_lens, cu_query_lens, topk_token, num_tokens, max_query_len, new_flag):
    pass


def test_host_path_declared_only_where_its_state_exists():
    caps, notes = capabilities_of(_Released, _launcher, "X")
    assert HOST_PATH not in caps and DEVICE_KERNEL in caps
    assert "has no pure-decode host path" in notes[HOST_PATH]
    assert all(name in notes[HOST_PATH] for name in HOST_PATH_STATE)
    caps, notes = capabilities_of(_WithHostPath, _launcher, "X")
    assert HOST_PATH in caps and HOST_PATH not in notes


def test_unknown_launcher_signature_is_not_applicable_with_reason():
    caps, notes = capabilities_of(_Released, _unknown_launcher, "X")
    assert DEVICE_KERNEL not in caps
    assert "new_flag" in notes[DEVICE_KERNEL] and _unknown_launcher.__name__ in notes[DEVICE_KERNEL]


def _launcher_with_out(seq_lens, cu_query_lens, topk_token, num_tokens, max_query_len, out=None):
    return ("called", out)


def test_a_launcher_parameter_with_a_default_keeps_it_and_the_kernel_is_driven():
    """A fork's launcher that takes an optional ``out`` buffer (its builder passes one, other callers none): the
    suite calls it as those callers do, with the default, never declaring the device kernel lost."""
    caps, _ = capabilities_of(_Released, _launcher_with_out, "X")
    assert DEVICE_KERNEL in caps
    values = dict(seq_lens=1, cu_query_lens=2, topk_token=3, num_tokens=4, max_query_len=5, query_lens=6)
    assert bind_launcher(_launcher_with_out, values) == ("called", None)


class _CopyOnly:
    def forward_mqa(self, q, kv_cache, attn_metadata, layer):
        ql_nope, q_pe = q
        q = self.q_concat_buffer[: ql_nope.shape[0]]
        if q_pe.shape[-1] == 0:
            q.copy_(ql_nope)
        return q


class _ZeroCopy:
    def forward_mqa(self, q, kv_cache, attn_metadata, layer):
        ql_nope, q_pe = q
        if q_pe.shape[-1] == 0 and ql_nope.is_contiguous() and ql_nope.dtype == self.q_concat_buffer.dtype:
            q = ql_nope
        else:
            q = self.q_concat_buffer[: ql_nope.shape[0]]
        return q


def test_nope_zero_copy_detected_from_forward_mqa_source():
    assert not has_nope_zero_copy(_CopyOnly) and has_nope_zero_copy(_ZeroCopy)
    assert "no NoPE zero-copy branch" in forward_notes(_CopyOnly, "X")["nope_zero_copy"]
    assert "nope_zero_copy" not in forward_notes(_ZeroCopy, "X")
    assert forward_capabilities(_CopyOnly, "X")[0] == {NOPE_FORWARD}
    assert forward_capabilities(_ZeroCopy, "X")[0] == {NOPE_FORWARD, NOPE_ZERO_COPY}


class _NeedsIndexer(_ZeroCopy):
    def __init__(self, indexer=None):
        assert indexer is not None
        self.topk_indices_buffer = indexer.topk_indices_buffer


class _NoNopeBranch:
    def forward_mqa(self, q, kv_cache, attn_metadata, layer):
        ql_nope, q_pe = q
        q = self.q_concat_buffer[: ql_nope.shape[0]]
        ops.concat_mla_q(ql_nope, q_pe, q)  # noqa: F821 (never run: read as source)
        return q


def test_an_impl_that_asserts_an_indexer_is_made_with_one_as_vllm_makes_it():
    """Releases 0.21-0.23 (and forks of them) assert an indexer module is given and read the top-k buffer off
    it: vLLM makes every layer of a model with an indexer so, and so does the suite (its forward is driven,
    never declared lost for the suite's own construction choice)."""
    from fixtures.subjects.vllm.forward.base import impl_arguments, requires_indexer

    assert requires_indexer(_NeedsIndexer) and not requires_indexer(_ZeroCopy)
    caps, _ = forward_capabilities(_NeedsIndexer, "X")
    assert caps == {NOPE_FORWARD, NOPE_ZERO_COPY}
    buffer = object()
    layer = types.SimpleNamespace(num_heads=16, head_size=512, scale=1.0, kv_cache_dtype="auto", kv_lora_rank=512,
                                  qk_rope_head_dim=0, attention_sinks=None)  # fmt: skip
    impl = _NeedsIndexer(impl_arguments(layer, buffer, indexer=True)["indexer"])
    assert impl.topk_indices_buffer is buffer
    assert impl_arguments(layer, buffer)["indexer"] is None, "a layer whose buffer is passed alone, where it can be"


def test_a_forward_that_has_no_nope_branch_is_not_applicable_with_reason():
    """Releases 0.24-0.29 send every query to concat_mla_q."""
    caps, notes = forward_capabilities(_NoNopeBranch, "X")
    assert caps == set() and "has no NoPE branch" in notes[NOPE_FORWARD] and NOPE_ZERO_COPY in notes


def test_the_layer_keeps_aiter_metadata_off_with_the_switch_the_builder_has():
    """Where AITER is stood in: AITER's Triton sparse MLA where the builder reads that switch, else
    attention sinks; with AMD AITER present neither (the persistent-metadata branch runs)."""

    class WithSwitch:
        def __init__(self):
            self.on = getattr(object(), "use_aiter_sparse_mla", False)

    class WithoutSwitch:
        def __init__(self):
            self.sinks = None

    with_switch = layer_stand_in("cpu", False, WithSwitch).impl
    assert with_switch.use_aiter_sparse_mla is True and with_switch.sinks is None
    without = layer_stand_in("cpu", False, WithoutSwitch).impl
    assert without.use_aiter_sparse_mla is False and without.sinks.dtype == torch.float32
    real = layer_stand_in("rocm", True, WithSwitch).impl
    assert real.use_aiter_sparse_mla is False and real.sinks is None
    for mode, aiter_real in (("cpu", False), ("rocm", True)):  # a drawn layer is the one drawn, everywhere
        plain = layer_stand_in(mode, aiter_real, WithSwitch, sinks=False).impl
        assert plain.use_aiter_sparse_mla is False and plain.sinks is None
        sunk = layer_stand_in(mode, aiter_real, WithSwitch, sinks=True).impl
        assert sunk.use_aiter_sparse_mla is False and sunk.sinks.dtype == torch.float32
