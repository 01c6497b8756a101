"""Benchmark: NoPE zero-copy query versus the copy path, over tokens T and heads H.

Opt-in (``--benchmark-enable``; ``tox -e bench``).  With ``qk_rope_head_dim ==
0`` the general path copies ``ql_nope`` (and the empty ``q_pe``) into the
persistent ``q_concat_buffer[:T]``; the zero-copy path hands ``ql_nope`` on
as it is.  ``test_nope_query_assembly_standin`` times a local stand-in of just
these two query-assembly variants (not a subject's ``forward_mqa``), so it
runs against any subject.  Hook point for timing a subject's own forward: a
subject declaring capability ``nope_forward`` has ``make_forward``; a test
here that checks both and drives ``forward_mqa`` on the same inputs belongs
next to the stand-in, with ``kind="nope_forward"`` in its ``extra_info``.
"""

import pytest
import torch

from fixtures.bench.timing import warmed_step
from fixtures.plugin.gating import NOT_APPLICABLE

T_SWEEP = (1, 64, 512, 4096)
H_SWEEP = (16, 128)
KV_LORA_RANK = 512
DTYPE = torch.bfloat16
# On CPU, skip inputs above this size (a 512 MiB copy per round is not informative there).
CPU_MAX_BYTES = 128 * 2**20


def assemble_query_copy(buffer, ql_nope, q_pe):
    """Stand-in of the general path: copy both halves into the persistent buffer."""
    t, rank = ql_nope.shape[0], ql_nope.shape[-1]
    q = buffer[:t]
    q[..., :rank].copy_(ql_nope)
    q[..., rank:].copy_(q_pe)
    return q


def assemble_query_zero_copy(buffer, ql_nope, q_pe):
    """Stand-in of the change: use ``ql_nope`` itself when the three conditions hold."""
    if q_pe.shape[-1] == 0 and ql_nope.is_contiguous() and ql_nope.dtype == buffer.dtype:
        return ql_nope
    return assemble_query_copy(buffer, ql_nope, q_pe)


VARIANTS = {"copy": assemble_query_copy, "zero_copy": assemble_query_zero_copy}


@pytest.mark.parametrize("heads", H_SWEEP)
@pytest.mark.parametrize("tokens", T_SWEEP)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_nope_query_assembly_standin(benchmark, device, variant, tokens, heads):
    size = tokens * heads * KV_LORA_RANK * DTYPE.itemsize
    if device.type == "cpu" and size > CPU_MAX_BYTES:
        pytest.skip(f"{NOT_APPLICABLE}ql_nope of {size >> 20} MiB; CPU runs stop at {CPU_MAX_BYTES >> 20} MiB")
    gen = torch.Generator().manual_seed(tokens * 1000 + heads)
    ql_nope = torch.randn(tokens, heads, KV_LORA_RANK, generator=gen).to(DTYPE).to(device)
    q_pe = torch.empty(tokens, heads, 0, dtype=DTYPE, device=device)
    buffer = torch.zeros(tokens, heads, KV_LORA_RANK, dtype=DTYPE, device=device)
    assemble = VARIANTS[variant]
    step = warmed_step(lambda: assemble(buffer, ql_nope, q_pe), device)
    q = step()
    # Time what the name says: the copy path fills the buffer, the zero-copy path shares ql_nope.
    assert torch.equal(q, ql_nope)
    assert (q.data_ptr() == ql_nope.data_ptr()) == (variant == "zero_copy")
    benchmark.group = f"NoPE query assembly (stand-in), H={heads}"
    benchmark.extra_info.update(
        kind="nope_query_standin",
        variant=variant,
        tokens=tokens,
        heads=heads,
        kv_lora_rank=KV_LORA_RANK,
        dtype=str(DTYPE),
        device=device.type,
        bytes=size,
    )
    benchmark(step)
