"""The change's performance contract, clause by clause: what each build step launches, copies and waits for.

Every test drives one fresh builder of the session's subject through a short
program of steps on the stream model (a stand-in for a GPU stream on CPU,
``fixtures/models/stream_model.py``) and checks one clause of
``oracles.device_work`` (docs/performance.md) against each step's ledger: the
device operations the subject issued in that step, in order.  A failure
prints the clause, what it expects and the step's whole ledger.

Programs: pure-decode steps that grow, keep and shrink the batch, with mixed
and prefill-only steps between them (they take the device path and reset
what ``req_id_per_token`` holds); the path of every step comes from the
legality oracle.  On a GPU the same clauses are checked from
``torch.profiler`` and ``torch.cuda.set_sync_debug_mode`` by
``tools/gpu_check.sh``; these tests are the CPU model of them.
"""

import contextlib
import functools

import pytest
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

from fixtures.findings import announce, match_ledger_finding
from fixtures.harness.baseline import WithBaseline, unpaired
from fixtures.harness.device_work import broken_host_clauses, host_steps, run_program, run_program_on_real_stream
from fixtures.inputs import sizes
from fixtures.inputs.batches import make_batch
from fixtures.inputs.steps import (
    LAYER_SINKS,
    LAYERS,
    NO_SINKS,
    PINNED_LAYERS,
    ROPE_FREE,
    STEP_TOPKS,
    WORK_METADATA_LAYERS,
    bulk_decode,
    grow_keep_grow_shrink,
    long_prefills,
    mixed,
    prefill_only,
    pure_decode,
    vllm_sized_program,
)
from fixtures.inputs.strategies import MANY, bulk_seq_lens
from fixtures.models.ledger import mismatch
from fixtures.plugin.profiles import sized
from fixtures.plugin.reporting import NOTE_PROPERTY
from fixtures.protocol import DEVICE_PATH, HOST_PATH, PERSISTENT_BUFFERS, NotApplicableHere
from oracles import device_work as contract
from oracles.step import expected_path

M = 6
LARGE_M = sizes.MAX_STEP_TOKENS  # a builder at vLLM's sizes (fixtures.inputs.sizes)
LEDGER = sized("ledger")


def steps_of(m: int = M):
    """One step: mostly pure decodes (growing, keeping or shrinking), sometimes a device-path step."""
    return st.one_of(pure_decode(m), pure_decode(m), pure_decode(m), mixed(m), prefill_only(m))


@st.composite
def programs(draw, host_only: bool = False):
    """1 to 5 steps; often (``sizes.HOST_ONLY``) at vLLM's sizes: decodes of hundreds of requests (the
    host path, nothing per request) and, unless ``host_only``, in as many of those again one long prefill
    (the device path's kernels, once in the program).  The builder is as large as the largest step (:func:`builder_m`)."""
    if not draw(sizes.at_scale(sizes.HOST_ONLY)):
        return draw(st.lists(pure_decode(M) if host_only else steps_of(), min_size=1, max_size=5))
    batches = draw(st.lists(st.one_of(bulk_decode(LARGE_M), pure_decode(M)), min_size=1, max_size=4))
    if not host_only and draw(sizes.at_scale(sizes.HOST_ONLY)):
        batches.insert(draw(st.integers(0, len(batches))), draw(long_prefills(LARGE_M)))
    return batches


def builder_m(batches) -> int:
    """The builder of a program: ``M``, or the program's largest step where that is larger."""
    return max([M] + [b.num_actual_tokens for b in batches])


topks = st.sampled_from(STEP_TOPKS)


def run(subject, device, batches, topk, m=None, **kwargs):
    steps = run_program(unpaired(subject), device, batches, m=m or builder_m(batches), topk=topk, **kwargs)
    for s in steps:
        # a subject without the host path (the release) takes the device path as if it had no pinned memory
        host_capable = kwargs.get("pin_memory", True) and HOST_PATH in unpaired(subject).capabilities
        want = expected_path(s.batch, speculative=False, pin_memory=host_capable)
        assert s.result.path == want, f"step {s.index} took the {s.result.path} path; the legality oracle says {want}"
        note(s.ledger.render())
    return steps


def check(problem, ledger, clause, expected, subject=None):
    """``clause`` holds (``problem`` is None), or its breach is a known finding of ``subject``'s (announced and passed
    over: :func:`fixtures.findings.match_ledger_finding`)."""
    if problem is not None and subject is not None:
        finding = match_ledger_finding(unpaired(subject), clause=clause, problem=problem)
        if finding is not None:
            announce(finding, unpaired(subject))
            return
    assert problem is None, mismatch(ledger, f"{clause}: {problem}", expected)


HOST = (HOST_PATH, DEVICE_PATH, PERSISTENT_BUFFERS)
host_clause = pytest.mark.needs(*HOST)


def on_programs(*capabilities, pinned=(), layers=LAYER_SINKS, pinned_layers=PINNED_LAYERS):
    """A clause checked on every step of generated programs (``batches``, ``topk``, the model's ``layer``
    drawn from ``layers``), and first on each ``pinned`` program (a list of batches) at top-k 2 with
    each of ``pinned_layers``."""

    def wrap(fn):
        test = given(batches=programs(), topk=topks, layer=st.sampled_from(layers))(fn)
        for batches in pinned:
            for layer in pinned_layers:
                test = example(batches=batches, topk=2, layer=layer)(test)
        return pytest.mark.needs(*capabilities)(LEDGER(test))

    return wrap


# Every host-path step kind, whatever the generated programs happen to draw (a rewrite of
# req_id_per_token on a step that does not grow shows on the second step); the same at vLLM's sizes.
GROW_KEEP_GROW_SHRINK = grow_keep_grow_shrink()
VLLM_SIZED = vllm_sized_program()
VLLM_SIZED_HOST = vllm_sized_program(host_only=True)


@on_programs(*HOST, pinned=[GROW_KEEP_GROW_SHRINK, VLLM_SIZED])
def test_host_path_launches_no_kernel_but_the_shared_shrink_tail_zeroing(subject, device, batches, topk, layer):
    for s, shrank, _ in host_steps(run(subject, device, batches, topk, layer=layer)):
        expected = "no launch" + (" but one fill_ per shrink-tail buffer" if shrank else "")
        check(contract.host_launches(s.shared, shrank), s.ledger, "host path launches", expected, subject=subject)


@on_programs(*HOST, pinned=[GROW_KEEP_GROW_SHRINK, VLLM_SIZED])
def test_host_path_uploads_paged_kv_indptr_once_pinned_and_non_blocking(subject, device, batches, topk, layer):
    for s, _, _ in host_steps(run(subject, device, batches, topk, layer=layer)):
        check(
            contract.host_upload(s.shared), s.ledger, "host path upload", "one pinned non-blocking h2d", subject=subject
        )


@on_programs(*HOST, pinned=[GROW_KEEP_GROW_SHRINK, VLLM_SIZED])
def test_host_path_copies_req_id_per_token_only_when_the_decode_batch_grows(subject, device, batches, topk, layer):
    for s, _, may_copy in host_steps(run(subject, device, batches, topk, layer=layer)):
        expected = "one d2d into req_id_per_token" if may_copy else "no d2d"
        check(
            contract.host_req_id_copy(s.shared, may_copy),
            s.ledger,
            "host path req_id_per_token",
            expected,
            subject=subject,
        )


@on_programs(*HOST, pinned=[GROW_KEEP_GROW_SHRINK, VLLM_SIZED])
def test_host_path_never_reads_the_device_back(subject, device, batches, topk, layer):
    for s, _, _ in host_steps(run(subject, device, batches, topk, layer=layer)):
        check(contract.host_no_sync(s.shared), s.ledger, "host path sync", "no d2h, no stream sync", subject=subject)


@on_programs(*HOST, pinned=[GROW_KEEP_GROW_SHRINK, VLLM_SIZED])
def test_host_path_waits_at_most_once_before_rewriting_the_pinned_buffer(subject, device, batches, topk, layer):
    for s, _, _ in host_steps(run(subject, device, batches, topk, layer=layer)):
        check(
            contract.host_wait(s.shared),
            s.ledger,
            "host path wait",
            "at most one event wait, before the upload",
            subject=subject,
        )


@st.composite
def growth_cases(draw):
    """``(a, b, topk, values)``: two step sizes (b up to max_num_seqs) and the contexts of the larger."""
    a = draw(st.integers(1, M))
    b = draw(st.one_of(st.integers(1, M), sizes.count(MANY, sizes.MAX_NUM_SEQS)))
    topk = draw(topks)
    return a, b, topk, draw(bulk_seq_lens([1] * max(a, b), topk))


@host_clause
@LEDGER
@given(case=growth_cases(), layer=LAYERS)
@example(case=(1, sizes.MAX_NUM_SEQS, 2048, [1 + i % 4096 for i in range(sizes.MAX_NUM_SEQS)]), layer=NO_SINKS)
def test_host_path_device_work_does_not_grow_with_n(subject, device, case, layer):
    """Two fresh builders, two steps each of the same size (growth, then a steady step): the ledgers
    of the n = a and the n = b program (b up to max_num_seqs; the builder as large as the larger step)
    are the same operations."""
    a, b, topk, values = case

    def program(k):
        batch = pure_decode_of(values[:k])
        return run(subject, device, [batch, batch], topk, m=builder_m([pure_decode_of(values)]), layer=layer)

    small, large = program(a), program(b)
    for one, other in zip(small, large, strict=True):
        check(
            contract.same_work(one.ledger, other.ledger),
            other.ledger,
            "host path O(1) in n",
            one.ledger.render(),
            subject=subject,
        )


def all_host(batches) -> bool:
    return all(expected_path(b, speculative=False, pin_memory=True) == "host" for b in batches)


def on_host_programs(fn):
    """Checked on generated pure-decode programs that take the host path on every step (``meta``,
    the dispatch-level recorder's stand-in for the device, runs no kernel), the pinned one first."""
    drawn = programs(host_only=True).filter(all_host)
    test = given(batches=drawn, topk=topks)(fn)
    for pinned in (GROW_KEEP_GROW_SHRINK, VLLM_SIZED_HOST):
        test = example(batches=pinned, topk=2)(test)
    return host_clause(LEDGER(test))


@on_host_programs
def test_host_path_keeps_every_clause_on_a_dispatch_level_ledger_meta_stands_in_for_the_device(
    subject, device, batches, topk
):
    """The host-path clauses again, on a ledger recorded independently of the stream model: below
    torch, from the ATen operators that reach device memory (``fixtures/models/real_stream.py``, the
    recorder of the GPU test below).  ``meta`` tensors stand in for the device: they hold no data,
    so no kernel runs and only pure-decode programs on the host path are drawn; the host buffers
    the runtime hands out as pinned count as pinned (CPU torch cannot pin)."""
    steps = run_program_on_real_stream(unpaired(subject), "meta", batches, m=builder_m(batches), topk=topk)
    for s in steps:
        assert s.result.path == "host", f"step {s.index} took the {s.result.path} path"
        note(s.ledger.render())
    for s, problems in broken_host_clauses(steps):
        raise AssertionError(mismatch(s.ledger, f"host path, dispatch-level ledger: {problems}", "every clause kept"))


@on_host_programs
def test_the_stream_model_sees_every_operation_the_dispatch_level_recorder_sees(subject, device, batches, topk):
    """The clauses above are only as good as the stream model's ledger: on host-path programs it
    must record the same operations, in the same order, as the recorder below torch (``meta``
    standing in for the device, as above), each with its kind, target, pinnedness and blocking."""
    modelled = run(subject, device, batches, topk)
    dispatched = run_program_on_real_stream(unpaired(subject), "meta", batches, m=builder_m(batches), topk=topk)
    for a, b in zip(modelled, dispatched, strict=True):
        assert a.ledger.shape() == b.ledger.shape(), (
            f"step {a.index}: the two recorders disagree\nstream model: {a.ledger.render()}\n"
            f"below torch: {b.ledger.render()}"
        )


@st.composite
def saving_seq_lens(draw):
    """Context lengths of up to ``M`` one-token decodes; rarely (``sizes.KERNEL_HEAVY``: the general path
    runs the seqlen kernel over every request) of hundreds, at the clamp edges of 2048."""
    if draw(sizes.at_scale(sizes.KERNEL_HEAVY)):
        return draw(bulk_seq_lens([1] * draw(sizes.count(MANY, sizes.MAX_NUM_SEQS)), 2048))
    return draw(st.lists(st.integers(1, 4096), min_size=1, max_size=M))


def pure_decode_of(seq_lens):
    return make_batch([1] * len(seq_lens), seq_lens)


@on_programs(DEVICE_PATH, PERSISTENT_BUFFERS, pinned=[VLLM_SIZED])
def test_device_path_non_blocking_uploads_read_pinned_memory(subject, device, batches, topk, layer):
    """Where pinned memory exists (a machine without it can pin nothing, and a non-blocking copy
    from pageable memory there is the only copy there is)."""
    for s in run(subject, device, batches, topk, layer=layer):
        if s.result.path == "device":
            check(
                contract.device_uploads_pinned(s.shared),
                s.ledger,
                "device path uploads",
                "pinned sources",
                subject=subject,
            )


@on_programs(DEVICE_PATH, PERSISTENT_BUFFERS, pinned=[VLLM_SIZED])
def test_device_path_syncs_only_inside_gpu_sync_allowed(subject, device, batches, topk, layer):
    require_expectation(subject, "gpu_sync_allowed")
    for s in run(subject, device, batches, topk, layer=layer):
        if s.result.path == "device":
            check(
                contract.device_no_unallowed_sync(s.shared),
                s.ledger,
                "device path sync",
                "no sync (d2h, stream sync, blocking h2d) outside",
                subject=subject,
            )


# The persistent work metadata's clauses: programs on the layers for which vLLM's ROCm builder keeps it, the
# pinned ones on the subject's model and on DeepSeek V3's 128 heads at TP 1 on an fp8 cache.
on_work_metadata_programs = on_programs(
    DEVICE_PATH,
    PERSISTENT_BUFFERS,
    pinned=[GROW_KEEP_GROW_SHRINK, VLLM_SIZED],
    layers=WORK_METADATA_LAYERS,
    pinned_layers=WORK_METADATA_LAYERS[:2],
)


@functools.cache
def keeps_persistent_work_metadata(subject, device) -> bool:
    """Whether ``subject`` keeps persistent work metadata for a layer without sinks (AITER's, in vLLM's ROCm
    builder): asked once of one decode step."""
    (probe,) = run_program(subject, device, [pure_decode_of([5])], m=M, topk=2, layer=NO_SINKS)
    return probe.persistent


def require_expectation(subject, name: str) -> None:
    """A property resting on ``name`` is not applicable to a subject whose code lacks it (its ``lacks``)."""
    why = getattr(unpaired(subject), "lacks", {}).get(name)
    if why is not None:
        raise NotApplicableHere(why)


def require_persistent_work_metadata(subject, device) -> None:
    """A subject without persistent work metadata has no such block: the property is not applicable to it."""
    if not keeps_persistent_work_metadata(unpaired(subject), device):
        raise NotApplicableHere(
            "the subject keeps no persistent work metadata for a layer without sinks (AITER's, in vLLM's ROCm builder)"
        )


@on_work_metadata_programs
def test_a_persistent_work_metadata_rebuild_is_synchronised_before_the_step_returns(
    subject, device, batches, topk, layer
):
    """A layer without sinks: every step that rebuilds AITER's persistent work metadata waits for the
    rebuild before it returns (vLLM issue 47196, PR 47404: CUDA-graph replays read it half-written), on
    both paths; its read back of ``seq_lens`` is inside ``gpu_sync_allowed`` (else the path clauses fail)."""
    require_persistent_work_metadata(subject, device)
    for s in (s for s in run(subject, device, batches, topk, layer=layer) if s.persistent):
        check(
            contract.rebuild_synced(s.ledger),
            s.ledger,
            "persistent rebuild",
            "a stream sync after the rebuild",
            subject=subject,
        )


@on_work_metadata_programs
def test_the_same_batch_again_rebuilds_no_persistent_work_metadata_and_waits_for_nothing(
    subject, device, batches, topk, layer
):
    """A layer without sinks: each step of the program run twice in a row; the second, on the very batch
    of the first, rebuilds nothing and synchronises nothing (its cache key is for that); the fresh
    metadata of every step is checked by the step itself (AITER's door stamps it)."""
    require_persistent_work_metadata(subject, device)
    require_expectation(subject, "work_metadata_cache")
    doubled = [b for batch in batches for b in (batch, batch)]
    steps = run(subject, device, doubled, topk, layer=layer)
    for s in (s for s in steps[1::2] if s.persistent):
        check(
            contract.no_rebuild_on_repeat(s.ledger), s.ledger, "persistent rebuild on a repeat", "none", subject=subject
        )


def test_a_context_growing_to_the_top_k_rebuilds_the_persistent_work_metadata(subject, device):
    """A layer without sinks, top-k 64: two requests of two query tokens whose contexts grow by one token up
    to the top-k (62, then 63): their sequence lengths clamped at the top-k stay 64, but ``paged_kv_indptr``
    moves ([0, 63, 127, ...], then [0, 64, 128, ...]), so the second step rebuilds AITER's work metadata, and each
    step's metadata is the one built from its own indptrs (the step checks AITER's door's stamp).  A cache
    key that clamps the context from below sees nothing change (the function-scoped mutation run's
    survivor: build's ``np.minimum`` of the context lengths as ``np.maximum``).  Not applicable to a file that hands
    no work metadata to such steps (they are chunked-prefill continuations)."""
    require_persistent_work_metadata(subject, device)
    require_expectation(subject, "work_metadata_every_step")
    batches = [make_batch([2, 2], [64, 64]), make_batch([2, 2], [65, 65])]
    steps = run_program(unpaired(subject), device, batches, m=builder_m(batches), topk=64, layer=NO_SINKS)
    assert all(s.persistent for s in steps), "a step of a layer without sinks carried no persistent work metadata"
    rebuilt = [op for op in steps[1].ledger.ops if op.kind == "launch" and op.what == contract.REBUILD]
    assert rebuilt, mismatch(steps[1].ledger, "no rebuild of the work metadata", "one get_mla_metadata_v1 launch")


def test_decode_steps_past_the_top_k_rebuild_no_persistent_work_metadata(subject, device):
    """A layer without sinks, top-k 64: two requests past the top-k decode one more token each.  Every
    index range stays the top-k long (``paged_kv_indptr`` [0, 64, 128] both steps), so the work metadata of
    the step before still holds and the second step rebuilds nothing and waits for nothing, as the release's
    cache key, whose lengths saturate at the top-k, keeps it (the steady state of a long decode: a rebuild
    here is a stream sync every step; the function-scoped mutation run's survivor: build's ``np.minimum`` of
    the sequence lengths as ``np.maximum``)."""
    require_persistent_work_metadata(subject, device)
    require_expectation(subject, "work_metadata_cache")
    batches = [pure_decode_of([69, 73]), pure_decode_of([70, 74])]
    steps = run_program(unpaired(subject), device, batches, m=builder_m(batches), topk=64, layer=NO_SINKS)
    assert all(s.persistent for s in steps), "a step of a layer without sinks carried no persistent work metadata"
    step = "a decode step past the top-k whose index ranges did not change"
    check(
        contract.no_rebuild_on_repeat(steps[1].ledger, step),
        steps[1].ledger,
        "persistent rebuild",
        "none",
        subject=subject,
    )


def test_a_rope_free_layer_builds_no_persistent_work_metadata_and_waits_for_nothing(subject, device):
    """A rope-free layer without sinks on a bf16 cache (``ROPE_FREE``), decode steps that grow, keep, grow and
    shrink: vLLM's ROCm backend sends them down its Triton sparse MLA route, which never reads AITER's work
    metadata, so the release's builder builds none (its ``_use_rocm_sparse_triton``) and no step launches a
    rebuild or waits for one (the function-scoped mutation run's survivor: build's ``not use_triton_sparse``
    dropped, a metadata launch and a stream sync on every such step)."""
    require_persistent_work_metadata(subject, device)
    require_expectation(subject, "rope_free_triton_route")
    batches = grow_keep_grow_shrink()
    steps = run_program(unpaired(subject), device, batches, m=builder_m(batches), topk=2, layer=ROPE_FREE)
    assert not any(s.persistent for s in steps), "a step of a rope-free layer carried persistent work metadata"
    for s in steps:
        step = "a decode step of a rope-free layer (vLLM's Triton route)"
        check(contract.no_rebuild_on_repeat(s.ledger, step), s.ledger, "persistent rebuild", "none", subject=subject)


@host_clause
@settings(LEDGER, suppress_health_check=[HealthCheck.function_scoped_fixture])  # record_property: one item
@given(seq_lens=saving_seq_lens(), topk=topks, layer=LAYERS)
@example(seq_lens=[1 + i % 4096 for i in range(512)], topk=2048, layer=NO_SINKS)
def test_host_path_saves_the_claimed_launches_against_the_general_path(
    subject, device, record_property, seq_lens, topk, layer
):
    """The same pure-decode step twice (growth, then a steady step): the host path's ledger against
    the general path's on the same batch: the release's device path where the run has the release
    beside it (``--baseline release``), else the subject's own device path (no pinned memory).
    Each distinct saving goes to the run summary under the test."""
    batch = pure_decode_of(seq_lens)
    host = run(subject, device, [batch, batch], topk, layer=layer)
    if isinstance(subject, WithBaseline):
        against = "the release's device path"
        general = run_program(subject.baseline, device, [batch, batch], m=builder_m([batch]), topk=topk, layer=layer)
    else:
        against = "its own device path (no pinned memory)"
        general = run(subject, device, [batch, batch], topk, pin_memory=False, layer=layer)
    for h, g in zip(host, general, strict=True):
        saved = contract.saving(h.shared, g.shared)
        label = "growing" if h.index == 0 else "steady"
        record_property(
            NOTE_PROPERTY,
            f"saved per pure-decode step ({label}) against {against}: {saved['launches']} launches, "
            f"{saved['h2d']} host-to-device copies, {saved['d2h']} syncs",
        )
        short = contract.short_of_claim(saved)
        assert not short, mismatch(
            h.ledger, f"{label} step saves less than claimed against {against}: {short}", g.ledger.render()
        )


@pytest.mark.gpu
@pytest.mark.needs(HOST_PATH, PERSISTENT_BUFFERS)
def test_host_path_on_the_gpu_keeps_every_clause_on_the_real_stream(subject, device):
    """Clauses 1 to 5 on the real stream (CUDA or ROCm), not the stream model: the pinned program
    (grow, keep, grow, shrink) through one builder, each step recorded from below torch
    (``fixtures/models/real_stream.py``: ATen operators with the source's real ``is_pinned()``,
    Triton launches, events) under ``torch.cuda.set_sync_debug_mode("error")``, so that any
    synchronising call raises.  The steady step (the second) runs under ``torch.profiler`` too: no
    kernel, one host-to-device copy and no device-to-host copy reach the device."""
    from torch.profiler import ProfilerActivity, profile

    profiled = []

    def profile_the_steady_step(index):
        if index != 1:
            return contextlib.nullcontext()
        profiled.append(profile(activities=[ProfilerActivity.CUDA]))
        return profiled[0]

    steps = run_program_on_real_stream(
        unpaired(subject), device, GROW_KEEP_GROW_SHRINK, m=M, topk=2, around=profile_the_steady_step
    )
    for s in steps:
        assert s.result.path == "host", f"step {s.index} took the {s.result.path} path"
    for s, problems in broken_host_clauses(steps):
        raise AssertionError(mismatch(s.ledger, f"host path on the real stream: {problems}", "every clause kept"))
    on_device = [e.name for e in profiled[0].events() if str(e.device_type).endswith("CUDA")]
    kernels = [name for name in on_device if not name.startswith(("Memcpy", "Memset"))]
    uploads = [name for name in on_device if name.startswith("Memcpy HtoD")]
    reads = [name for name in on_device if name.startswith("Memcpy DtoH")]
    assert not kernels and len(uploads) == 1 and not reads, mismatch(
        steps[1].ledger, f"the profiler saw on the device in the steady step: {on_device}", "one HtoD memcpy"
    )


@pytest.mark.gpu
@pytest.mark.needs(DEVICE_PATH, PERSISTENT_BUFFERS)
def test_device_path_on_the_gpu_uploads_pinned_and_syncs_only_where_allowed(subject, device):
    """Clauses 7 and 8 on the real stream (CUDA or ROCm): mixed and prefill-only steps (the device
    path) recorded from below torch under ``torch.cuda.set_sync_debug_mode("error")``, relaxed
    only inside vLLM's ``gpu_sync_allowed`` (whose syncs the ledger marks allowed): every
    non-blocking upload reads pinned memory, and no device-to-host read happens outside those
    regions."""
    program = [make_batch([1, 3], [5, 9]), make_batch([4], [6]), make_batch([1, 1, 2], [3, 7, 2])]
    steps = run_program_on_real_stream(unpaired(subject), device, program, m=M, topk=2)
    for s in steps:
        assert s.result.path == "device", f"step {s.index} took the {s.result.path} path"
        check(
            contract.device_uploads_pinned(s.shared), s.ledger, "device path uploads", "pinned sources", subject=subject
        )
        check(
            contract.device_no_unallowed_sync(s.shared),
            s.ledger,
            "device path sync",
            "no sync (d2h, stream sync, blocking h2d) outside",
            subject=subject,
        )
