"""NoPE zero-copy query: ``forward_mqa`` against the legality oracle and its copy path, one test per property.

Every drawn case (``fixtures.inputs.forward_cases``: T from 0 to M, padded batches,
1..128 heads, kv_lora_rank 512 and small ranks, bf16/fp16/fp32 ``ql_nope``
against bf16/fp16 model dtypes, fp8 caches, every layout a bmm produces) runs
``forward_mqa`` on its ``ql_nope`` and, where the layer has both branches
(rope dim 0, no fp8 cache), on a twin laid out to take the other branch.  Each
test checks one property on every call, named for what must hold (its
docstring says what it proves), so a failure (and a kill in the kill matrix)
names the property.

A property is checked against the branch the forward took, so a wrong branch
fails the first test only.  A call without tokens that hands nothing
downstream (nothing to attend) has nothing to check beyond its empty output
(``fixtures.harness.forward.run_forward``); a subject whose ``forward_mqa``
takes ``ql_nope`` in the model dtype only (``query_in_model_dtype_only``, with
its reason) counts a case with another ``ql_nope`` dtype as not applicable, and
one whose ``make_forward`` refuses the layer (``ForwardNotApplicable``: a
backend that does not serve it by its own declaration) likewise.
On CPU the downstream attention is the reference
sparse MLA forward (``oracles.nope.sparse_mla_forward``), standing in for the
GPU kernel that cannot run here; on a GPU a subject's own kernel runs
(``fixtures.models.attention.DownstreamAttention``).
"""

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import pytest
import torch
from hypothesis import event, given, note, reject, settings
from hypothesis import strategies as st
from hypothesis.errors import UnsatisfiedAssumption

from fixtures.findings import announce, match_output_finding
from fixtures.harness.compare import assert_bits_equal
from fixtures.harness.forward import (
    ForwardRun,
    assert_handed_metadata,
    copy_dtype,
    expected_path,
    new_forward,
    pass_over_path_finding,
    run_forward,
    saw_forward_call,
    with_keys,
)
from fixtures.inputs import sizes
from fixtures.inputs.forward_cases import FP8_DTYPE, ForwardCase, build_inputs, case_sinks, forward_cases, lay_out
from fixtures.inputs.pinned_forwards import PINNED, SINK_LAYERS
from fixtures.inputs.strategies import pinned
from fixtures.models.runtime import is_sentinel
from fixtures.models.tensors import same_place, same_storage, storage_bytes
from fixtures.protocol import NOPE_FORWARD, NOPE_ZERO_COPY, ForwardNotApplicable, forward_domain
from oracles import nope as oracle

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def oracle_query(c: ForwardCase, values: torch.Tensor, q_pe: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if c.kv_cache_dtype == "fp8":
        return oracle.quantize_fp8_query(values, q_pe, c.q_scale, FP8_DTYPE)
    return oracle.assemble_query(values, q_pe, dtype)


@dataclass
class Seen:
    """One ``forward_mqa`` call of a case, with what its ``q_concat_buffer`` held right after it (the next call
    refills the buffer)."""

    case: ForwardCase
    forward: object
    inputs: object
    ql: torch.Tensor  # the ql_nope handed in
    path: str  # the oracle's branch
    run: ForwardRun
    query: torch.Tensor  # the oracle's query for these values
    copy_dtype: torch.dtype  # the copy path's query's dtype (oracles.nope.copy_query_dtype)
    buffer_after: torch.Tensor | None  # a copy of q_concat_buffer right after the call (None: no buffer)

    @property
    def taken(self) -> str:
        return self.run.result.path


def other_path_twin(path: str, values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The same query values laid out to take the other branch (rope dim 0, non-fp8 only).

    After a zero-copy: a strided copy (non-contiguous).  After a copy: a fresh
    contiguous tensor of the copy path's dtype holding what the copy path built.
    """
    if path == "zero_copy":
        return lay_out(values, "last_stride_2", 0)
    return values.to(dtype).contiguous().clone()


def has_both_branches(c: ForwardCase) -> bool:
    return c.kv_cache_dtype != "fp8" and not c.qk_rope_head_dim


class Planned(NamedTuple):
    """One call a case plans: the ``ql_nope`` handed in, its values, its copy path's dtype, the oracle's branch."""

    tensor: torch.Tensor
    values: torch.Tensor
    dtype: torch.dtype
    path: str


# A case of at least this many tokens is run once per process and its calls shared by every property that
# runs it (the pinned long forward: seconds under the interpreter, the same calls for each property).
SHARED_FROM = sizes.LONG_FORWARD // 4
SHARED_MOST = 4  # the subject's (watched and not) and the release's
_SHARED: dict = {}


def forward_calls(c: ForwardCase, subject, device, *, watch: bool = False, twin: bool = True) -> list[Seen]:
    """The calls of :func:`run_calls` (``twin=False``: the case's own call alone); a case of
    :data:`SHARED_FROM` tokens or more is run once per process for every property that checks it (its known
    findings' warnings issued again for each)."""
    if c.num_tokens < SHARED_FROM:
        return list(run_calls(c, subject, device, watch=watch, twin=twin))
    key = (id(subject), c, watch, twin)
    if key not in _SHARED:
        while len(_SHARED) >= SHARED_MOST:  # the oldest goes: a long forward's tensors are large
            del _SHARED[next(iter(_SHARED))]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _SHARED[key] = (list(run_calls(c, subject, device, watch=watch, twin=twin)), list(caught))
    else:  # what the calls reached counts for this property too (fixtures.harness.scale)
        for seen in _SHARED[key][0]:
            saw_forward_call(seen.run.config, c.num_tokens, seen.inputs.metadata)
    calls, caught = _SHARED[key]
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return calls


def run_calls(c: ForwardCase, subject, device, *, watch: bool = False, twin: bool = True) -> Iterator[Seen]:
    """``forward_mqa`` on the case's ``ql_nope``, then (both branches only) on its other-branch twin.

    Stops, after the finding's warning, when the branch taken is a known
    finding's on these inputs (``fixtures.findings``).  Yields nothing
    for a call without tokens that handed nothing downstream."""
    only = getattr(subject, "query_in_model_dtype_only", None)
    if only and c.ql_dtype != c.model_dtype:
        event(f"not applicable: ql_nope in another dtype than the model's: {only}")
        reject()
    if c.index_kpool and not forward_domain(subject).kpool:
        event("not applicable: the subject serves no model with a key pool (its forward_domain)")
        reject()
    if c.sink_base is not None and not forward_domain(subject).sinks:
        event("not applicable: the subject serves no layer with attention sinks (its forward_domain)")
        reject()
    if c.num_actual_tokens < c.num_tokens and not forward_domain(subject).padded_rows:
        event("not applicable: the subject's caller hands it no padded rows (its forward_domain)")
        reject()
    try:
        config, forward = new_forward(subject, c, device)
    except ForwardNotApplicable as exc:  # a layer the subject's backend does not serve (its own declaration)
        event(f"not applicable: {exc}")
        reject()
    inputs = build_inputs(c, device)
    ql = inputs.ql_nope
    values = ql.contiguous().clone()

    def planned(tensor: torch.Tensor, vals: torch.Tensor) -> Planned:
        dtype = copy_dtype(forward, tensor, inputs.q_pe)
        return Planned(tensor, vals, dtype, expected_path(c, tensor, dtype, subject))

    calls = [planned(ql, values)]
    path, dtype = calls[0].path, calls[0].dtype
    note(f"ql_nope strides {ql.stride()} offset {ql.storage_offset()} contiguous {ql.is_contiguous()}; expect {path}")
    event(f"path: {path}")
    if twin and has_both_branches(c):
        other = other_path_twin(path, values, dtype)
        calls.append(planned(other, other.contiguous()))
        note(f"twin strides {other.stride()} dtype {other.dtype}; expect {calls[1].path}")
    for tensor, vals, dtype, want in calls:
        run = run_forward(config, forward, tensor, inputs, watch=watch, subject=subject, expect=want)
        if run.call is None:
            continue
        if run.result.path != want and pass_over_path_finding(subject, c, tensor, run.result.path, want):
            return
        buf = forward.q_concat_buffer
        after = None if buf is None else buf.clone()
        yield Seen(c, forward, inputs, tensor, want, run, oracle_query(c, vals, inputs.q_pe, dtype), dtype, after)


def nope_property(cases=tuple(PINNED)):
    """A NoPE property: needs the forward; runs ``cases`` (default: every PINNED one) as ``@example``s first.
    The properties of one process share the pinned forwards' calls (:func:`forward_calls`); under xdist they
    spread over the workers (in CI the properties' own examples take about 290 s of worker time, the pinned
    long forward a few seconds a process: one worker for all of them would idle the other)."""

    def wrap(fn):
        return pytest.mark.checks(NOPE_ZERO_COPY)(pytest.mark.needs(NOPE_FORWARD)(pinned(cases, "c")(fn)))

    return wrap


@nope_property()
@given(c=forward_cases(long_share=sizes.FORWARD_LONG_PATH))
def test_path_follows_the_legality_oracle(c, subject, device):
    """The branch taken is ``oracles.nope.expected_forward_path``'s."""
    for seen in forward_calls(c, subject, device):
        assert seen.taken == seen.path, f"took the {seen.taken!r} path; the legality oracle says {seen.path!r}"


@nope_property()
@given(c=forward_cases())
def test_zero_copy_hands_ql_nope_itself_downstream(c, subject, device):
    """On the zero-copy branch the query is ``ql_nope``'s own memory; zero-copy and fp8 leave
    ``q_concat_buffer`` on its sentinel."""
    for seen in forward_calls(c, subject, device):
        q, buf = seen.run.call.q, seen.buffer_after
        if seen.taken == "zero_copy":
            assert same_place(q, seen.ql), "zero-copy path: the query handed downstream is not ql_nope's memory"
            assert tuple(q.shape) == tuple(seen.ql.shape), f"zero-copy: query shape {tuple(q.shape)} != ql_nope's"
        if seen.taken in ("zero_copy", "fp8") and buf is not None:
            written = (~is_sentinel(buf)).nonzero()
            assert not len(written), f"{seen.taken} path wrote q_concat_buffer, first at {tuple(written[0].tolist())}"


@nope_property()
@given(c=forward_cases())
def test_zero_copy_writes_no_buffer_and_copies_no_query(c, subject, device):
    """The performance contract's NoPE clause (docs/performance.md): on the zero-copy branch no
    torch call writes ``q_concat_buffer`` (not even its own values back) and none copies
    ``ql_nope`` into other memory; the stand-in attention's own reads are not the forward's."""
    for seen in forward_calls(c, subject, device, watch=True):
        if seen.taken == "zero_copy":
            writes, copies = seen.run.buffer_writes.writes, seen.run.query_copies.copies
            assert not writes, f"the zero-copy branch wrote q_concat_buffer: {writes}"
            assert not copies, f"the zero-copy branch copied ql_nope: {copies}"


@nope_property()
@given(c=forward_cases())
def test_copy_path_writes_only_the_first_T_rows(c, subject, device):
    """On the copy branch the query is ``q_concat_buffer[:T]`` and no row past ``T`` is written (a
    forward without the buffer: a fresh ``[T, H, D]`` tensor, not ``ql_nope``'s memory)."""
    for seen in forward_calls(c, subject, device):
        if seen.taken != "copy":
            continue
        q, buf, t = seen.run.call.q, seen.forward.q_concat_buffer, c.num_tokens
        if buf is None:  # a fresh concatenation
            shape = (t, c.num_heads, c.kv_lora_rank + c.qk_rope_head_dim)
            assert tuple(q.shape) == shape, f"copy path: the query handed downstream is {tuple(q.shape)}, not {shape}"
            shared = same_storage(q, seen.ql)
            assert not shared or not q.numel(), "copy path: the query handed downstream lies in ql_nope's storage"
            continue
        assert same_place(q, buf) and tuple(q.shape) == (t, *buf.shape[1:]), (
            f"copy path: the query handed downstream ({tuple(q.shape)}) is not q_concat_buffer[:T={t}]"
        )
        past = (~is_sentinel(seen.buffer_after[t:])).nonzero()
        assert not len(past), f"copy path wrote q_concat_buffer past row T={t}: at {tuple(past[0].tolist())}"


@nope_property()
@given(c=forward_cases())
def test_query_has_the_buffer_dtype_and_the_oracle_values(c, subject, device):
    """The query handed downstream has the copy path's dtype (``oracles.nope.copy_query_dtype``: the
    buffer's; fp8: the fp8 dtype) and, bit for bit, the oracle's values."""
    for seen in forward_calls(c, subject, device):
        q = seen.run.call.q
        want = FP8_DTYPE if seen.taken == "fp8" else seen.copy_dtype
        assert q.dtype == want, f"{seen.taken} path handed a {q.dtype} query downstream; expected {want}"
        assert_bits_equal(seen.run.call.q_values, seen.query, f"{seen.taken} path: query values handed downstream")


@nope_property()
@given(c=forward_cases())
def test_forward_leaves_ql_nope_and_q_pe_unchanged(c, subject, device):
    """Their storages are byte-for-byte unchanged."""
    for seen in forward_calls(c, subject, device):
        changed = (storage_bytes(seen.ql) != seen.run.ql_before).nonzero()
        assert not len(changed), f"forward wrote into ql_nope's storage (first byte {int(changed[0])})"
        assert torch.equal(storage_bytes(seen.inputs.q_pe), seen.run.q_pe_before), "forward wrote into q_pe's storage"


@nope_property([c for c in PINNED if has_both_branches(c)])
@given(c=forward_cases(both_branches=True))
def test_zero_copy_and_copy_outputs_are_bit_equal(c, subject, device):
    """The same values give the same output bits on both branches (same forward, same downstream
    attention)."""
    outputs = [(s.taken, s.run.result.output[: c.num_actual_tokens].clone()) for s in forward_calls(c, subject, device)]
    if len(outputs) == 2:  # else a known finding was passed over
        (first, a), (second, b) = outputs
        assert_bits_equal(b, a, f"{first} vs {second} output")


@nope_property()
@given(c=forward_cases())
def test_attention_reads_the_steps_kv_indices(c, subject, device):
    """The attention gets the step's ``paged_kv_indptr`` and live ``paged_kv_indices``, bit for bit
    (vLLM rebuilds the indices through its top-k remap)."""
    for seen in forward_calls(c, subject, device):
        assert_handed_metadata(seen.run.call.metadata, seen.inputs.metadata)


def check_output_close(c: ForwardCase, inputs, output: torch.Tensor, query: torch.Tensor, subject) -> None:
    """The output is ``[T, H, kv_lora_rank]`` in the model dtype (a wrong dtype that is a known finding's
    is passed over, with its warning) and close to the reference's."""
    n = c.num_actual_tokens
    shape = (c.num_tokens, c.num_heads, c.kv_lora_rank)
    if output.dtype != c.model_dtype:
        finding = match_output_finding(subject, output_dtype=output.dtype, model_dtype=c.model_dtype)
        if finding is not None:
            announce(finding, subject)
            return
    assert tuple(output.shape) == shape and output.dtype == c.model_dtype, (
        f"output is {output.dtype} {tuple(output.shape)}, expected {c.model_dtype} {shape}"
    )
    md = inputs.metadata
    ref = oracle.sparse_mla_forward(
        query, inputs.kv_cache, md.paged_kv_indptr, md.paged_kv_indices, num_actual_tokens=n,
        scale=(c.kv_lora_rank + c.qk_rope_head_dim) ** -0.5, kv_lora_rank=c.kv_lora_rank, out_dtype=c.model_dtype,
        q_scale=c.q_scale, kv_scale=c.kv_scale, sinks=case_sinks(c, query.device),
    )  # fmt: skip
    atol, rtol = oracle.forward_tolerance(c.model_dtype, c.kv_dtype)
    keyed = with_keys(md)  # a token without keys: unspecified downstream (AITER's split reduction leaves NaN)
    torch.testing.assert_close(
        output[:n][keyed], ref[:n][keyed], atol=atol, rtol=rtol, msg=lambda m: f"output vs reference: {m}"
    )


@nope_property()
@given(c=forward_cases())
def test_output_matches_the_reference_forward(c, subject, device):
    """The output is close to the reference sparse MLA forward within
    ``oracles.nope.FORWARD_TOLERANCES``."""
    for seen in forward_calls(c, subject, device):
        check_output_close(c, seen.inputs, seen.run.result.output, seen.query, subject)


@pytest.mark.checks(NOPE_ZERO_COPY)
@pytest.mark.needs(NOPE_FORWARD)
@settings(max_examples=4 * len(SINK_LAYERS))
@given(c=st.sampled_from(SINK_LAYERS))
def test_sink_layers_match_the_reference_forward(c, subject, device):
    """Each pinned layer with attention sinks (bf16 with a 64 rope part on 24, 48 and 192 heads a rank; on an fp8
    cache 4, 32, 48 and 128 heads), generated: the output is close to the reference forward with the layer's
    sinks (``oracles.nope.FORWARD_TOLERANCES``).  A layer the subject does not serve here is not applicable (an
    event, never a check): with these draws, every one refused would leave hypothesis nothing to run, which is
    the other properties' to judge."""
    if not forward_domain(subject).sinks:
        pytest.skip("not applicable: the subject serves no layer with attention sinks (its forward_domain)")
    try:
        seen_calls = list(forward_calls(c, subject, device))
    except UnsatisfiedAssumption:  # run_calls' reject(): the layer is not applicable, as it says in its event
        return
    for seen in seen_calls:
        check_output_close(c, seen.inputs, seen.run.result.output, seen.query, subject)


@pytest.fixture(scope="session")
def release(subject):
    """The release subject beside ``subject`` (``--baseline release``); else the test is not applicable."""
    baseline = getattr(subject, "baseline", None)
    if baseline is None:
        pytest.skip("not applicable: no release baseline in this run (--baseline release; default with --vllm-overlay)")
    if NOPE_FORWARD not in baseline.capabilities:
        pytest.skip(f"not applicable: the release baseline {baseline.name!r} lacks {NOPE_FORWARD}")
    return baseline


@nope_property()
@given(c=forward_cases())
def test_output_equals_the_release_forward(c, subject, release, device):
    """With ``--baseline release``, what the vLLM release's ``forward_mqa`` gives: the query values and the step
    it hands downstream, and its output for every token with keys, bit for bit (a token without keys: its row
    is unspecified downstream, AITER's split reduction leaves NaN)."""
    check_equals_the_release(c, subject, release, device)


# The pinned sink layers against the release, drawn under every profile (as for the reference above): vLLM's
# sink merge and head buckets on AITER's return-LSE decode, its Triton kernel past 128 heads.
@pytest.mark.checks(NOPE_ZERO_COPY)
@pytest.mark.needs(NOPE_FORWARD)
@settings(max_examples=4 * len(SINK_LAYERS))
@given(c=st.sampled_from(SINK_LAYERS))
def test_sink_layers_equal_the_release_forward(c, subject, release, device):
    """Each pinned layer with attention sinks, generated: :func:`test_output_equals_the_release_forward`'s
    checks (the query, the step, the output bit for bit)."""
    if not forward_domain(subject).sinks:
        pytest.skip("not applicable: the subject serves no layer with attention sinks (its forward_domain)")
    try:
        check_equals_the_release(c, subject, release, device)
    except UnsatisfiedAssumption:  # a layer not applicable here, as its event says
        return


def check_equals_the_release(c, subject, release, device) -> None:
    # the same values as the subject's (drawn from the case's seed); the release's own call is enough
    released = forward_calls(c, release, device, twin=False)
    if not released:
        return
    theirs = released[0]
    keyed = with_keys(theirs.inputs.metadata)
    n = c.num_actual_tokens
    for seen in forward_calls(c, subject, device):
        mine, other = seen.run.call, theirs.run.call
        if mine is None or other is None:
            continue
        assert_bits_equal(mine.q_values.to(other.q_values.dtype), other.q_values, "query values vs the release's")
        assert_handed_metadata(mine.metadata, other.metadata)
        a, b = seen.run.result.output[:n][keyed], theirs.run.result.output[:n][keyed]
        assert_bits_equal(a, b, "output vs the vLLM release's")


@pytest.mark.gpu
@pytest.mark.needs(NOPE_FORWARD)
@pytest.mark.parametrize("c", [PINNED[0], PINNED[1]], ids=["contiguous", "bmm_transposed"])
def test_forward_kernel_runs_on_gpu(c, subject, device):
    """On a GPU the subject's own attention kernel runs (not the reference stand-in) and matches the reference."""
    config, forward = new_forward(subject, c, device)
    inputs = build_inputs(c, device)
    run = run_forward(config, forward, inputs.ql_nope, inputs, subject=subject)
    if not run.call.used_kernel:
        pytest.skip(f"not applicable: subject {subject.name!r} passes no attention kernel of its own")
    query = oracle_query(c, inputs.ql_nope.contiguous(), inputs.q_pe, copy_dtype(forward, inputs.ql_nope, inputs.q_pe))
    check_output_close(c, inputs, run.result.output, query, subject)
