"""The vllm subject's own machinery: fixture completeness, version tolerance, gating.

The tests that use the installed vLLM skip at run time, with the reason, where
it is not installed (``tox -e vllm`` installs it).  The rest need no vLLM.
"""

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
import types

import pytest
import torch

from fixtures import ROOT
from fixtures.findings import match_forward_finding
from fixtures.harness.forward import assert_handed_metadata, new_forward, run_forward
from fixtures.harness.forward import reproduce_forward_finding as reproduce
from fixtures.harness.step import count_triton_launches, new_config, run_step
from fixtures.inputs.batches import make_batch
from fixtures.inputs.forward_cases import FP8_DTYPE, ForwardCase, build_inputs, spelled_as
from fixtures.models.runtime import EagerRuntime, Event
from fixtures.protocol import HOST_PATH, NOPE_FORWARD, NOPE_ZERO_COPY, ForwardNotApplicable, SuiteError
from fixtures.subjects.vllm.config import StandIn, StandInMissing, describe_provenance, generated_stand_in
from fixtures.subjects.vllm.forward.base import has_fp8_concat_quant_op
from fixtures.subjects.vllm.introspection import (
    IncompleteFixture,
    check_constructed,
    has_nope_zero_copy,
    init_attributes,
)
from fixtures.subjects.vllm.stand_ins import TorchWithRuntime
from fixtures.subjects.vllm_rocm_aiter_sparse.backend import BUILDER
from fixtures.subjects.vllm_rocm_aiter_sparse.findings import assert_seen_on
from fixtures.subjects.vllm_rocm_aiter_sparse.forward import IMPL, PaddingObserver, VllmForward
from fixtures.subjects.vllm_rocm_aiter_sparse.subject import BUILDER_BUFFERS, VllmSubject
from oracles.step import expected_seqlens
from tools.fresh_run import repo


@pytest.fixture(scope="module")
def backend():
    """The installed backend module, prepared as the vllm subject prepares it."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed here (tox -e vllm installs it)")
    from fixtures.subjects.vllm.loading.imports import detect_mode
    from fixtures.subjects.vllm_rocm_aiter_sparse.backend import import_rocm_backend

    module, _ = import_rocm_backend(detect_mode())
    return module


def test_a_segfault_after_importing_vllm_ends_the_process_at_once(backend, tmp_path):
    """vLLM's import installs tvm_ffi's SIGSEGV handler, which can deadlock in a crashed process
    (a mutant that makes the interpreter read out of bounds then hangs to its time limit).  After
    the backend's import a forked child that segfaults dies by SIGSEGV within seconds, with
    faulthandler's Python traceback and without the foreign handler's native backtrace."""
    log = tmp_path / "child.log"
    pid = os.fork()
    if pid == 0:  # the child: crash
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT)
            os.dup2(fd, 2)
            import ctypes
            import faulthandler

            faulthandler.enable(file=2)
            ctypes.string_at(0)
        finally:
            os._exit(0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"the crashed child still ran after 60 s: {log.read_text()[-2000:]}")
    text = log.read_text()
    assert os.waitstatus_to_exitcode(status) == -signal.SIGSEGV, text[-2000:]
    assert "Fatal Python error: Segmentation fault" in text
    assert "Segfault encountered" not in text, "a foreign SIGSEGV handler ran after faulthandler"


class RecordingRuntime(EagerRuntime):
    """The eager runtime, recording the pinned allocations and events asked of it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pinned, self.events = [], []

    def host_empty(self, length, dtype):
        self.pinned.append((length, dtype))
        return super().host_empty(length, dtype)

    def event(self):
        self.events.append(super().event())
        return self.events[-1]


def test_real_init_sets_every_derived_attribute_and_guards_the_persistent_buffers(backend, device):
    """The builder is made by vLLM's own __init__: every attribute its __init__ chain
    assigns is set, and the persistent buffers are guarded allocations holding what
    vLLM initialised them to."""
    subject = VllmSubject()
    config = new_config(device, 8, 4)
    builder = subject.make_builder(config)
    derived = init_attributes(subject.builder_cls)
    assert derived and all(hasattr(builder.inner, name) for name in derived)
    guarded = config.allocator.buffers()
    for attribute, name in BUILDER_BUFFERS.items():
        assert getattr(builder.inner, attribute) is guarded[name or attribute], attribute
    assert builder.inner.qo_indptr.tolist() == list(range(9))
    assert builder.inner.paged_kv_last_page_len.tolist() == [1] * 8
    assert builder.inner.paged_kv_indices.numel() == 8 * 4 and builder.inner.topk_tokens == 4


def test_construction_check_names_an_attribute_the_init_chain_assigns_but_left_unset(backend, device):
    base = getattr(backend, BUILDER)

    class Drifted(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._state_added_later = torch.zeros(1)  # on every path: never made here, so never set

    builder = VllmSubject().make_builder(new_config(device, 8, 4))
    drifted = object.__new__(Drifted)
    drifted.__dict__.update(vars(builder.inner))
    with pytest.raises(IncompleteFixture, match=r"_state_added_later  \(assigned in Drifted.__init__\)"):
        check_constructed(drifted, "Drifted")


def test_a_field_the_installed_config_lacks_is_a_suite_error_naming_it(backend, device):
    """A constructor that reads a field vLLM's own configuration class lacks (code for another
    release) is the suite's limit: a SuiteError naming the class, the field and the version."""
    base = getattr(backend, BUILDER)

    class ReadsMore(base):
        def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
            _ = vllm_config.scheduler_config.new_scheduler_knob
            super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    class Subject(VllmSubject):
        def __init__(self):
            super().__init__()
            self.builder_cls = ReadsMore

    with pytest.raises(SuiteError, match=r"reads SchedulerConfig\.new_scheduler_knob, which vLLM [\d.]+'s"):
        Subject().make_builder(new_config(device, 8, 4))


def test_a_field_a_stand_in_lacks_is_a_suite_error_and_getattr_defaults_still_work():
    """Stand-ins raise an AttributeError subclass, so vLLM's getattr(x, name, default) gets its default."""
    thing = StandIn("a thing", "here", known=1)
    assert getattr(thing, "unknown", "default") == "default" and thing.known == 1
    with pytest.raises(StandInMissing, match=r"read 'x' of the suite's stand-in for a thing.*adapt here"):
        thing.x  # noqa: B018


@pytest.mark.parametrize("pin_memory", [True, False], ids=["pinned", "no_pinned_memory"])
@pytest.mark.parametrize("speculative", [False, True], ids=["no_spec", "speculative"])
def test_constructor_stand_ins_follow_the_config(backend, device, pin_memory, speculative):
    """During construction, pinned allocations and events reach config.runtime exactly
    when pinned memory is available, and the host-path switch follows the config."""
    subject = VllmSubject()
    if HOST_PATH not in subject.capabilities:
        pytest.skip(f"not applicable: {subject.capability_notes[HOST_PATH]}")
    if device.type != "cpu":
        pytest.skip("the stand-ins are CPU mode's; ROCm mode uses pinned memory and torch.cuda itself")
    runtime = RecordingRuntime(device, pin_memory=pin_memory)
    config = new_config(device, 8, 4, pin_memory=pin_memory, speculative=speculative, runtime=runtime)
    inner = subject.make_builder(config).inner
    assert bool(inner._host_decode_indptr) == (pin_memory and not speculative)
    assert (9, torch.int32) in runtime.pinned if pin_memory else not runtime.pinned
    assert (inner._host_upload_done is not None) == pin_memory == bool(runtime.events)
    assert inner._host_indptr.tolist() == [0] * 9


def test_installed_kernel_really_runs(backend, device):
    """vLLM's Triton is real (not its placeholder) and its seqlen kernel launches."""
    batch = make_batch([1, 3], [5, 9])
    out = torch.zeros(4, dtype=torch.int32, device=device)
    subject = VllmSubject()
    with count_triton_launches() as launches:
        subject.sparse_seqlen(batch, 4, out)
    assert launches["generate_sparse_seqlen_kernel"] == 1, dict(launches)
    assert out.cpu().tolist() == expected_seqlens(batch, 4).tolist()


def test_build_runs_vllms_kernels_on_the_device_path(backend, device):
    """One real build(): vLLM's seqlen kernel and its token-to-request kernel launch,
    and what the subject stands in for on CPU is what strict gating refuses."""
    subject = VllmSubject()
    config = new_config(device, 8, 4)
    builder = subject.make_builder(config)
    batch = make_batch([1, 3], [5, 9])
    step = run_step(builder, batch, config)
    assert step.result.path == "device"
    assert step.launches["generate_sparse_seqlen_kernel"] == 1, dict(step.launches)
    # The release maps tokens to requests with a kernel of its base builder; the post-change file on the host.
    mapping = 1 if hasattr(builder.inner, "_build_req_id_per_token") else 0
    assert step.launches["_token_request_mapping_kernel"] == mapping, dict(step.launches)
    if subject.mode == "cpu":
        problems = "; ".join(subject.gating_problems())
        assert "no ROCm GPU" in problems and "AITER missing" in problems


def test_torch_cuda_is_routed_to_the_runtime_inside_the_backend_namespace():
    """CPU mode's stand-in for torch.cuda streams and events: events come from the
    suite's runtime, everything else is torch itself."""
    made = []

    class Runtime:
        def event(self):
            made.append(Event())
            return made[-1]

    shim = TorchWithRuntime(Runtime())
    event = shim.cuda.Event()
    event.record(shim.cuda.current_stream())
    event.synchronize()
    assert made and made[0].query()
    assert shim.cumsum is torch.cumsum and shim.int32 is torch.int32


HOST_STEP_SOURCE = """
def _suite_host_step(indptr_host):
    event = torch.cuda.Event()
    stream = torch.cuda.current_stream()
    staged = np_to_pinned_tensor(np.arange(indptr_host.numel(), dtype=np.int32))
    indptr_host.copy_(staged)
    event.record(stream)
    stream.wait_event(event)
    event.synchronize()
    return event
"""


def test_host_path_calls_in_the_backend_namespace_reach_the_runtime(backend, device):
    """Code compiled in the backend module's namespace, calling what a host-path build
    calls (torch.cuda.Event / current_stream, np_to_pinned_tensor), reaches the
    suite's runtime during a step in CPU mode, and vLLM's own names are back after it."""
    if device.type != "cpu":
        pytest.skip("the routing is CPU mode's stand-in; ROCm mode uses torch.cuda itself")
    if not hasattr(backend, "np_to_pinned_tensor"):
        pytest.skip("not applicable: this release's backend module does not import np_to_pinned_tensor")
    subject = VllmSubject()
    config = new_config(device, 8, 4)
    events = []
    builder = subject.make_builder(config)
    config.runtime.event = lambda: events.append(Event()) or events[-1]
    step = types.FunctionType(compile(HOST_STEP_SOURCE, "<host step>", "exec").co_consts[0], vars(backend))
    target = config.runtime.host_empty(9, torch.int32)
    before = (backend.torch, backend.np_to_pinned_tensor)
    with builder.step_context():
        step(target)
    assert len(events) == 1
    assert target.tolist() == list(range(9))
    assert (backend.torch, backend.np_to_pinned_tensor) == before


# ----- a broken vLLM-driven subject is caught ------------------------------------
class VllmWithTopkOffByOne(VllmSubject):
    """The real builder given topk_tokens = topk + 1: the properties must notice."""

    def make_builder(self, config):
        builder = super().make_builder(config)
        builder.inner.topk_tokens = config.topk + 1
        return builder


@pytest.fixture
def release_run(run_suite_in, pytestconfig):
    """A fresh run of the suite against the installed release: the overlay a session installs does
    not reach it, so a session with ``--vllm-overlay`` would repeat the release session's run."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed here (tox -e vllm installs it)")
    if pytestconfig.getoption("--vllm-overlay"):
        pytest.skip("a fresh run against the installed release: the session without --vllm-overlay runs it")
    return run_suite_in


def test_differential_properties_catch_a_wrong_vllm_fixture_value(release_run):
    spec = f"{__name__}:VllmWithTopkOffByOne"
    test = repo("tests/differential/test_single_step.py") + "::test_step_metadata_matches_oracle"
    run = release_run(f"--subject={spec}", test)
    out = run.out
    stood_in = re.search(r"not applicable: (vLLM [\d.]+ calls AMD AITER's \S+)", out)
    if run.ret == 0 and stood_in:
        pytest.skip(f"not applicable: the property cannot run here: {stood_in[1]}, stood in on CPU")
    assert run.ret == 1, out[-3000:]
    assert "paged_kv_indptr" in out and f"--subject={spec}" in out, out[-3000:]


def test_expecting_aiter_with_the_stand_in_in_place_is_a_clear_usage_error(release_run):
    """On CPU the subject puts its AITER stand-in into sys.modules; --expect aiter then
    stops the run with the probe's answer (exit 4), never an internal error."""
    run = release_run("--subject=vllm", repo("tests/differential"), "--co", "--device=cpu", "--expect=aiter")
    assert run.ret == 4, run.out[-3000:]
    assert "aiter: sys.modules['aiter'] is this suite's CPU stand-in, not AMD AITER" in run.out
    assert "INTERNALERROR" not in run.out


def test_vllm_subject_is_registered():
    from fixtures.subjects import KNOWN_SUBJECTS

    assert KNOWN_SUBJECTS["vllm"] == "fixtures.subjects.vllm_rocm_aiter_sparse.subject:VllmSubject"


def test_every_release_of_the_matrix_has_its_import_chain_and_the_newest_is_the_default():
    """tox.ini's ``vllm-<release>`` envs, their VLLM_RELEASE settings and requirements/ name the same
    releases; the default install (the ``vllm`` env, CI's) is the newest of them."""
    tox = (ROOT / "tox.ini").read_text()
    envs = re.search(r"^\[testenv:vllm-\{([^}]*)\}\]", tox, re.M).group(1).split(",")
    settings = re.findall(r"^    ([\d.]+): VLLM_RELEASE = ([\d.]+)$", tox, re.M)
    chains = sorted(p.name.split("-")[1] for p in (ROOT / "requirements").glob("vllm-*-cpu-import-deps.txt"))
    key = lambda v: tuple(map(int, v.split(".")))  # noqa: E731
    assert sorted(envs, key=key) == sorted(chains, key=key) == [a for a, b in settings if a == b], (envs, chains)
    assert re.search(r"install_vllm\.py \{env:VLLM_RELEASE:" + re.escape(max(envs, key=key)) + r"\}", tox)


def test_subject_module_imports_no_vllm_until_the_subject_is_made():
    """Loading the module (as --subject resolution does) must not import vLLM:
    CPU mode has to empty CUDA_VISIBLE_DEVICES first."""
    code = "import sys, fixtures.subjects.vllm_rocm_aiter_sparse.subject; assert 'vllm' not in sys.modules, 'vllm imported'"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# ----- the NoPE forward: ROCMAiterMLASparseImpl.forward_mqa ----------------------
@pytest.fixture(scope="module")
def vllm_subject(backend):
    """The installed subject, for the forward's tests: not applicable where the release's forward
    is not one the suite drives (its capability note says why)."""
    subject = VllmSubject()
    if NOPE_FORWARD not in subject.capabilities:
        pytest.skip(f"not applicable: {subject.capability_notes[NOPE_FORWARD]}")
    return subject


def forward_case(m=4, t=3, heads=16, lora=8, rope=0, model=torch.bfloat16, **kw):
    kw.setdefault("num_actual_tokens", t)
    return ForwardCase(m, t, num_heads=heads, kv_lora_rank=lora, qk_rope_head_dim=rope, model_dtype=model,
                       ql_dtype=kw.pop("ql_dtype", model), **kw)  # fmt: skip


def test_impl_real_init_sets_every_derived_attribute(vllm_subject, device):
    """The impl is made by vLLM's own __init__; the per-call downstream stand-ins are
    gone again after forward_mqa."""
    cls = getattr(vllm_subject.backend, IMPL)
    derived = init_attributes(cls)
    assert "q_concat_buffer" in derived, "the buffer the suite re-seats is one the __init__ chain assigns"
    c = forward_case()
    config, forward = new_forward(vllm_subject, c, device)
    before = set(vars(forward.impl))
    assert all(hasattr(forward.impl, name) for name in derived)
    assert forward.impl.q_concat_buffer is config.allocator.buffers()["q_concat_buffer"]
    run_forward(config, forward, build_inputs(c, device).ql_nope, build_inputs(c, device))
    assert set(vars(forward.impl)) == before


def test_the_layer_has_the_fp8_concat_op_whatever_its_cache_dtype(vllm_subject, device):
    """MLAAttention makes ``_decode_concat_quant_fp8_op`` for every layer, so a forward_mqa that
    reaches the fp8 branch on a bf16 cache (a mutant forcing ``if fp8_attention``) meets the op as
    on a real layer and is judged by the properties, never reported as the suite's limit."""
    if not has_fp8_concat_quant_op():
        pytest.skip(f"vLLM {vllm_subject.version} has no _DecodeConcatQuantFP8: its layers lack the op too")
    _, forward = new_forward(vllm_subject, forward_case(), device)
    assert type(forward.layer._decode_concat_quant_fp8_op).__name__ == "_DecodeConcatQuantFP8"


def test_forward_runs_vllms_remap_kernel_and_hands_on_the_protocols_indices(vllm_subject, device):
    """vLLM's own top-k remap kernel rebuilds paged_kv_indices, and what reaches the
    downstream attention is the step's metadata (the adapter asserts it bit for bit).  The query of the step's
    tokens, as MLAAttention slices it (``q[:num_actual_toks]``) before forward_mqa."""
    c = forward_case(m=5, t=4, num_actual_tokens=4, seed=3)
    config, forward = new_forward(vllm_subject, c, device)
    inputs = build_inputs(c, device)
    with count_triton_launches() as launches:
        run = run_forward(config, forward, inputs.ql_nope, inputs)
    assert launches["_convert_req_index_to_global_index_kernel"] == 1, dict(launches)
    zero_copy = NOPE_ZERO_COPY in vllm_subject.capabilities
    assert run.result.path == ("zero_copy" if zero_copy else "copy")
    assert (run.call.q is inputs.ql_nope) == zero_copy


@pytest.mark.parametrize("switched", [False, True], ids=["switch-unset", "switch-set"])
def test_the_kernel_a_layer_reaches_follows_the_cases_drawn_switch_alone(vllm_subject, device, switched):
    """AITER's Triton sparse MLA switch is a field of the forward case (``ForwardCase.switches``: drawn, printed,
    shrunk to unset), declared by the subject's forward domain where the file has that route: the same layer
    reaches ``_forward_mla_aiter`` with it set and the default kernel without, whatever its sizes (the same
    sizes once made the choice by their parity)."""
    from fixtures.protocol import forward_domain
    from fixtures.subjects.vllm_rocm_aiter_sparse.forward import AITER_KERNEL, TRITON_SPARSE_MLA_SWITCH

    declared = [s.name for s in forward_domain(vllm_subject).switches]
    if not hasattr(getattr(vllm_subject.backend, IMPL), AITER_KERNEL):
        assert declared == [], "a file without AITER's Triton sparse MLA route declares no switch for it"
        pytest.skip(f"not applicable: vLLM {vllm_subject.version}'s impl has no {AITER_KERNEL}")
    assert declared == [TRITON_SPARSE_MLA_SWITCH]
    routes = set()
    for m, heads in ((4, 16), (5, 16), (4, 32), (5, 32)):  # each parity of the sizes
        c = forward_case(m=m, t=2, heads=heads, lora=16, switches=(TRITON_SPARSE_MLA_SWITCH,) if switched else ())
        config, forward = new_forward(vllm_subject, c, device)
        inputs = build_inputs(c, device)
        run_forward(config, forward, inputs.ql_nope, inputs)
        routes.add(AITER_KERNEL in forward.route)
        assert f"switches={c.switches!r}" in repr(c), "the switch must print with the case"
    assert routes == {switched}, f"{AITER_KERNEL} reached: {routes} (switch {'set' if switched else 'unset'})"


class MisMappedForward(VllmForward):
    """Hands vLLM a block table with each request's first two blocks swapped: still in range, but not the
    layout its top-k indices were written for, so the remapped indices must be caught."""

    def attn_metadata(self, metadata, num_tokens, num_slots):
        md = super().attn_metadata(metadata, num_tokens, num_slots)
        table = md.block_table.clone()
        table[:, [0, 1]] = table[:, [1, 0]]
        md.block_table = table
        return md


class MisMappedSubject(VllmSubject):
    def make_forward(self, config):
        return MisMappedForward(self, config)


def test_a_wrong_metadata_mapping_reaches_the_attention_and_is_caught(vllm_subject, device):
    c = forward_case(num_slots=6, topk=3, seed=5)
    config, forward = new_forward(MisMappedSubject(), c, device)
    inputs = build_inputs(c, device)
    assert int(inputs.metadata.paged_kv_indptr[-1]) > 0, "the case must attend some keys"
    run = run_forward(config, forward, inputs.ql_nope, inputs)
    with pytest.raises(AssertionError, match="paged_kv_indices handed downstream"):
        assert_handed_metadata(run.call.metadata, inputs.metadata)


@pytest.mark.parametrize("heads", [1, 3, 16, 17])
def test_head_padding_is_undone_to_the_very_query_vllm_assembled(vllm_subject, device, heads):
    """get_mla_padded_q pads 1, 3 and 17 heads to a multiple of 16 (a new tensor); the
    attention still gets q_concat_buffer[:T] itself, as vLLM assembled it."""
    c = forward_case(heads=heads)
    config, forward = new_forward(vllm_subject, c, device)
    inputs = build_inputs(c, device)
    run = run_forward(config, forward, inputs.ql_nope, inputs)
    handed = inputs.ql_nope if NOPE_ZERO_COPY in vllm_subject.capabilities else forward.q_concat_buffer
    assert run.call.q.data_ptr() == handed.data_ptr() and tuple(run.call.q.shape) == (3, heads, 8)


def test_bf16_copy_with_rope_goes_through_concat_mla_q_and_its_checks(vllm_subject, device):
    """vLLM assembles a bf16 query with a rope part with its concat_mla_q kernel: a layer shape the op refuses
    (a latent of 8) is not applicable, as on ROCm; DeepSeek V3.2's (512 + 64) is assembled (on CPU by the stand-in, with
    the op's checks) into q_concat_buffer and handed downstream."""
    c = forward_case(rope=4)
    config, forward = new_forward(vllm_subject, c, device)
    inputs = build_inputs(c, device)
    with pytest.raises(
        ForwardNotApplicable,
        match="concat_mla_q refuses this layer shape or query layout: nope_dim must be a multiple of 512",
    ):
        forward.forward_mqa((inputs.ql_nope, inputs.q_pe), inputs.kv_cache, inputs.metadata)
    deepseek = forward_case(lora=512, rope=64)
    config, forward = new_forward(vllm_subject, deepseek, device)
    inputs = build_inputs(deepseek, device)
    run = run_forward(config, forward, inputs.ql_nope, inputs)
    assert forward.path_of(forward.handed[-1], inputs.ql_nope) == "copy"
    q = run.call.q
    assert torch.equal(q[..., :512], inputs.ql_nope) and torch.equal(q[..., 512:], inputs.q_pe)
    fp16 = forward_case(rope=4, model=torch.float16)  # torch.cat: runs for real
    config, forward = new_forward(vllm_subject, fp16, device)
    inputs = build_inputs(fp16, device)
    # as written, the copy reaches AITER's decode, which has no fp16 kernel (finding aiter-decode-fp16-query)
    with pytest.raises(AssertionError, match="q is bf16 or the arch's fp8"):
        run_forward(config, forward, inputs.ql_nope, inputs)
    assert forward.path_of(forward.handed[-1], inputs.ql_nope) == "copy"


def test_vllm_0_33_fp8_branch_raises_on_an_empty_batch(vllm_subject, device):
    """Finding, pinned: forward_mqa with an fp8 cache and T = 0 raises in vLLM's
    _DecodeConcatQuantFP8 (reshape(0, -1) of an empty query), on every device (the
    reshape precedes the per-device quantiser).  vLLM's MLAAttention calls forward_mqa
    only with num_mqa_tokens > 0, so its own flow does not reach it.  When this test
    fails, vLLM has fixed it: drop the test and its entry in docs/findings.md."""
    if FP8_DTYPE is None:
        pytest.skip("this torch has no fp8 dtype")
    c = forward_case(m=1, t=0, lora=512, kv_cache_dtype="fp8")
    config, forward = new_forward(vllm_subject, c, device)
    inputs = build_inputs(c, device)
    with pytest.raises(RuntimeError, match=r"cannot reshape tensor of 0 elements into shape \[0, -1\]") as info:
        forward.forward_mqa((inputs.ql_nope, inputs.q_pe), inputs.kv_cache, inputs.metadata)
    assert any(entry.name == "forward" and "mla_attention.py" in str(entry.path) for entry in info.traceback)
    # The known-finding entry that lets the property pass over exactly this case matches it.
    finding = match_forward_finding(vllm_subject, info.value, kv_cache_dtype="fp8", num_tokens=0)
    assert finding.key == "vllm-0.33-fp8-empty-batch"
    assert_seen_on(finding, vllm_subject.version)


def test_each_configuration_is_made_from_a_model_config_no_other_has_read(vllm_subject, device):
    """Every ``VllmConfig`` the suite makes gets a ``ModelConfig`` of its own, as each engine does: vLLM's
    ``__post_init__`` marks the one it reads (``config_updated``) and never runs the model's hook on it again, so a
    shared one made the second configuration of a layer differ from the first (DeepSeek-V3.2's hook, rewriting a
    "bfloat16" cache under an fp16 model to "auto", ran for the first only)."""
    from fixtures.subjects.vllm.config import vllm_config

    def make(cache_dtype="auto"):
        return vllm_config(device=device, max_num_batched_tokens=8, topk=64, dtype=torch.float16,
                           block_size=1, cache_dtype=cache_dtype)  # fmt: skip

    first, second = make(), make()
    assert first.model_config is not second.model_config
    assert first.model_config.config_updated and second.model_config.config_updated, "each one read by its config"
    outcomes = []
    for _ in range(2):  # the same layer asked twice is answered the same
        try:
            outcomes.append(make("bfloat16").cache_config.cache_dtype)
        except SuiteError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1], outcomes


@pytest.mark.parametrize("model, cache", [(torch.float16, "bfloat16"), (torch.bfloat16, "float16")])
def test_a_float_cache_of_another_dtype_follows_what_the_release_builds(vllm_subject, device, model, cache):
    """A float cache of another dtype than the model's is a layer of the release's deployments exactly where the
    release's configuration builds it (``VllmConfig``: each release makes a "bfloat16" one under an fp16 model store
    the model's; 0.33.0 and later refuse a "float16" one under a bf16 model, earlier releases build it): there the forward is made with it and the strategies draw it
    (``ForwardDomain.mixed_float_caches``); elsewhere it is not applicable, in vLLM's words.  The same float cache
    spelled as the model's dtype is served everywhere and handed on as stored."""
    from fixtures.protocol import forward_domain
    from fixtures.subjects.vllm.forward.base import builds_float_cache

    builds = builds_float_cache(model, cache)
    assert ((model, cache) in forward_domain(vllm_subject).mixed_float_caches) == builds
    if builds:
        config, _ = new_forward(vllm_subject, forward_case(model=model, kv_cache_dtype=cache), device)
        assert config.kv_dtype == getattr(torch, cache) != model
    else:
        with pytest.raises(ForwardNotApplicable, match=rf"does not build a '{cache}' cache under a {model}"):
            new_forward(vllm_subject, forward_case(model=model, kv_cache_dtype=cache), device)
    c = forward_case(model=model, kv_cache_dtype=spelled_as(model))
    config, forward = new_forward(vllm_subject, c, device)
    inputs = build_inputs(c, device)
    assert inputs.kv_cache.dtype == config.kv_dtype == model
    forward.forward_mqa((inputs.ql_nope, inputs.q_pe), inputs.kv_cache, inputs.metadata)
    assert forward.handed, "the forward handed its query downstream"


def reproduce_forward_finding(vllm_subject, device, c, raised, key: str, on_gpu: str, error=AssertionError):
    """``fixtures.harness.forward.reproduce_forward_finding`` from vLLM's ROCm backend file."""
    return reproduce(vllm_subject, device, c, raised, key, on_gpu, source="rocm_aiter_mla_sparse.py", error=error)


# What vLLM 0.34.0's producers hand forward_mqa (tests/selfvalidation/test_producers.py): the input a release whose
# producers cannot be asked alone is given instead, as vLLM 0.34.0 makes it.  producer index -> model -> ql dtype
PRODUCED_ON_0_34 = {0: {torch.bfloat16: torch.bfloat16, torch.float16: torch.float16},
                    1: {torch.bfloat16: torch.bfloat16, torch.float16: torch.bfloat16}}  # fmt: skip


def produced_case(vllm_subject, producer_index: int, model, rope: int, **kw) -> ForwardCase:
    """A forward case whose ``ql_nope`` is what vLLM's own producer (``PRODUCERS[producer_index]``) hands
    ``forward_mqa`` for a layer of ``model`` and ``rope`` (:mod:`fixtures.subjects.vllm.producers`): its dtype,
    and a contiguous token-major layout, checked; where the installed release's producers cannot be asked alone
    (no ``MLAAttention._prepare_mqa_query`` before 0.34.0), what vLLM 0.34.0's make (:data:`PRODUCED_ON_0_34`)."""
    from fixtures.subjects.vllm.producers import PRODUCERS, NotProducedHere

    try:
        q = vllm_subject.produced_query(PRODUCERS[producer_index], model_dtype=model, qk_rope_head_dim=rope)
    except NotProducedHere:
        return forward_case(lora=512, rope=rope, model=model, ql_dtype=PRODUCED_ON_0_34[producer_index][model], **kw)
    assert q.ql_contiguous and q.ql_shape[1:] == (16, 512), q
    assert q.ql_dtype == PRODUCED_ON_0_34[producer_index][model], f"revisit PRODUCED_ON_0_34: {q}"
    return forward_case(lora=512, rope=rope, model=model, ql_dtype=q.ql_dtype, **kw)


def test_an_fp16_rope_layer_reaches_aiters_decode_with_an_fp16_query(vllm_subject, device):
    """Finding, pinned: an fp16 DeepSeek-style layer (a rope part, no attention sinks), its query made by vLLM's own
    default MQA bmm (an fp16 ``ql_nope``), reaches AITER's ASM decode with an fp16 query through vLLM's own
    _forward_mla and torch op; AITER has no fp16 kernel (the door's precondition, cited from AITER's asm_mla.cu).
    Where vLLM routes fp16 elsewhere, or serves no fp16 model, this test fails: drop it and the finding."""
    c = produced_case(vllm_subject, 0, torch.float16, 64, m=4, t=2)
    raised = r"mla_decode_fwd arguments it rejects: q is bf16 or the arch's fp8"
    reproduce_forward_finding(vllm_subject, device, c, raised, "aiter-decode-fp16-query", "AITER's own decode runs")


def test_a_bf16_rope_layer_hands_concat_mla_q_a_query_of_another_dtype(vllm_subject, device):
    """Hazard, pinned (``concat-mla-q-mixed-dtype``, outside what vLLM produces: ``test_producers.py``): a bf16 layer
    with a rope part handed an fp16 ``ql_nope`` calls concat_mla_q with ``ql_nope`` fp16 and ``q_concat_buffer``
    bf16; the op the installed release builds raises on it (its stable-ABI typed pointers), or its legacy kernel
    would write raw bits (the stand-in's failure naming that).  Where vLLM converts first, this test fails."""
    from fixtures.subjects.vllm.concat_mla_q import installed_source

    installed = installed_source()
    if installed is None:
        pytest.skip(f"not applicable: vLLM {vllm_subject.version} builds no concat_mla_q")
    c = forward_case(m=4, t=2, lora=512, rope=64, ql_dtype=torch.float16)
    typed = installed.source.typed_pointers  # its typed pointers raise; else its kernel would write raw bits
    raised = r"expected scalar type \S*Half but found BFloat16" if typed else r"concat_mla_q at \S+ breaking"
    on_gpu = "the op's own kernel runs"
    error = RuntimeError if typed else AssertionError
    reproduce_forward_finding(vllm_subject, device, c, raised, "concat-mla-q-mixed-dtype", on_gpu, error)


def launch_vllms_ragged_sparse_kernel(kernel, q, kv) -> None:
    """vLLM's ``_sparse_attn_prefill_ragged_kernel`` launched as its launcher launches it, over every key of ``kv``
    for each query token (the arguments by the names of the installed release's signature)."""
    import inspect

    t, h, d = q.shape
    n = kv.shape[0]
    indices = torch.arange(n, dtype=torch.int32, device=q.device).repeat(t)
    indptr = n * torch.arange(t + 1, dtype=torch.int32, device=q.device)
    out = torch.empty_like(q)
    strides = dict(zip(("q_stride_t", "q_stride_h", "q_stride_d"), q.stride(), strict=True))
    strides.update(zip(("kv_stride_n", "kv_stride_d"), kv.stride(), strict=True))
    strides.update(zip(("out_stride_t", "out_stride_h", "out_stride_d"), out.stride(), strict=True))
    given = dict(q_ptr=q, kv_ptr=kv, kv_indices_ptr=indices, kv_indptr_ptr=indptr, out_ptr=out,
                 attn_sink_ptr=torch.empty(1, device=q.device), num_heads=h, head_dim=d, num_kv=n, scale=d**-0.5,
                 HAS_ATTN_SINK=False, OUT_DV=d, BLOCK_H=16, BLOCK_D=d, BLOCK_K=32, **strides)  # fmt: skip
    names = list(inspect.signature(kernel.fn).parameters)
    missing = [name for name in names if name not in given]
    assert not missing, f"vLLM's {kernel.fn.__name__} takes {missing}, which this selftest does not know: revisit it"
    kernel[(t, 1)](**{name: given[name] for name in names})


def test_the_sparse_kernel_stand_in_refuses_what_vllms_kernel_refuses(backend, device):
    """The launcher's stand-in (:class:`SparseKernelOnCpu`) refuses a query and a cache of two float dtypes because
    vLLM's own kernel does: its ``_sparse_attn_prefill_ragged_kernel`` (the Triton sparse MLA kernel the ROCm backend
    sends a layer without a rope part to), launched here (Triton's interpreter on CPU, compiled on a GPU), fails on
    a bf16 query and an fp16 cache with Triton's 'Both operands must be same dtype', and runs on one dtype."""
    from fixtures.subjects.vllm_rocm_aiter_sparse.forward import SparseKernelOnCpu

    ops = sys.modules.get("vllm.v1.attention.ops.rocm_aiter_mla_sparse")
    kernel = getattr(ops, "_sparse_attn_prefill_ragged_kernel", None)
    if kernel is None:
        pytest.skip("not applicable: the installed vLLM has no _sparse_attn_prefill_ragged_kernel")
    q = torch.randn(2, 2, 16, device=device)
    kv = torch.randn(4, 16, device=device)
    for dtype in (torch.bfloat16, torch.float16):
        launch_vllms_ragged_sparse_kernel(kernel, q.to(dtype), kv.to(dtype))
    with pytest.raises(Exception, match="Both operands must be same dtype"):
        launch_vllms_ragged_sparse_kernel(kernel, q.to(torch.bfloat16), kv.to(torch.float16))
    indptr = torch.tensor([0, 4, 8], dtype=torch.int32, device=device)
    indices = torch.arange(4, dtype=torch.int32, device=device).repeat(2)
    out = torch.empty(2, 2, 16, dtype=torch.bfloat16, device=device)
    with pytest.raises(AssertionError, match="a torch.bfloat16 query and a torch.float16 cache"):
        SparseKernelOnCpu()(q.to(torch.bfloat16), kv.to(torch.float16).view(4, 1, 16), 0.25, 16, 16, 0, None, out,
                            ragged_indices=indices, ragged_indptr=indptr)  # fmt: skip


def test_nope_capabilities_follow_the_installed_forward(vllm_subject):
    zero_copy = has_nope_zero_copy(getattr(vllm_subject.backend, IMPL))
    assert (NOPE_ZERO_COPY in vllm_subject.capabilities) == zero_copy
    assert zero_copy or "no NoPE zero-copy branch" in vllm_subject.capability_notes[NOPE_ZERO_COPY]


class _TilingHelper:
    """AiterMLAHelper's interface, padding 3 heads to 6 by tiling (optionally corrupting)."""

    corrupt = False

    @classmethod
    def get_mla_padded_q(cls, num_heads, q, target_heads=None):
        padded = q.repeat(1, 2, 1)
        return padded * 2 if cls.corrupt else padded

    @staticmethod
    def get_mla_unpadded_o(num_heads, o):
        return o[:, :num_heads]


def test_head_padding_check_hands_on_the_source_and_refuses_a_changed_or_foreign_query():
    q = torch.arange(24, dtype=torch.float32).view(2, 3, 4)
    padding = PaddingObserver(_TilingHelper)
    assert padding.source_of(padding.get_mla_padded_q(3, q), 3) is q
    with pytest.raises(AssertionError, match="get_mla_padded_q did not return"):
        padding.source_of(q.repeat(1, 2, 1), 3)

    class Corrupting(_TilingHelper):
        corrupt = True

    padding = PaddingObserver(Corrupting)
    with pytest.raises(AssertionError, match="changed the query's real heads"):
        padding.source_of(padding.get_mla_padded_q(3, q), 3)


def test_overlay_zero_copy_ignores_the_dtype_clause(vllm_subject, device):
    """Finding nope-zero-copy-ignores-dtype, pinned: an fp16 NoPE layer whose query vLLM's own producer makes with
    AITER's fp8 bmm (``VLLM_ROCM_USE_AITER_FP8BMM=1``: a contiguous bf16 ``ql_nope``) gets that bf16 tensor itself as
    its query from the post-change forward_mqa (the copy path would have converted it into the fp16 buffer), and
    vLLM's Triton sparse MLA kernel, which serves rope-free decodes, cannot take a bf16 query on an fp16 cache (its
    ``tl.dot``: Triton refuses to compile it), where the change's base runs the layer.  When this fails, vLLM has
    fixed it: drop the finding (fixtures/subjects/vllm_rocm_aiter_sparse/findings.py) and this test."""
    if NOPE_ZERO_COPY not in vllm_subject.capabilities:
        pytest.skip(f"not applicable: {vllm_subject.capability_notes[NOPE_ZERO_COPY]}")
    finding = next(f for f in vllm_subject.known_findings().path if f.key == "nope-zero-copy-ignores-dtype")
    c = produced_case(vllm_subject, 1, torch.float16, 0, m=4, t=3)
    assert c.ql_dtype == torch.bfloat16
    config, forward = new_forward(vllm_subject, c, device)
    inputs = build_inputs(c, device)
    assert inputs.ql_nope.is_contiguous() and inputs.ql_nope.dtype == torch.bfloat16
    with pytest.raises(AssertionError, match="a torch.bfloat16 query and a torch.float16 cache: its kernels take one"):
        forward.forward_mqa((inputs.ql_nope, inputs.q_pe), inputs.kv_cache, inputs.metadata)
    took = forward.path_of(forward.handed[-1], inputs.ql_nope)
    assert took == "zero_copy", f"fixed? the bf16 ql_nope of an fp16 layer now takes {took!r}"
    assert forward.handed[-1] is inputs.ql_nope and forward.handed[-1].dtype == torch.bfloat16
    assert finding.present_in(vllm_subject)
    assert finding.matches(
        vllm_subject, took="zero_copy", oracle="copy", rope=0, contiguous=True,
        ql_dtype=torch.bfloat16, buffer_dtype=torch.float16,
    )  # fmt: skip
    assert_seen_on(finding, vllm_subject.version)


def test_overlay_device_path_crashes_on_a_padded_batch(device):
    """Finding padded-device-path-req-id-size-mismatch, pinned: the post-change build()
    on the device path of a CUDA-graph padded batch (speculative config: uniform
    4-token decodes, graph size 8) crashes copying 4 request ids into 8 slots; the
    release maps the pad tokens to request 0.  When this fails, vLLM has fixed it:
    drop the finding (fixtures/subjects/vllm_rocm_aiter_sparse/findings.py), this test and its entry in docs/findings.md."""
    from fixtures.findings import match_builder_finding

    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed here (tox -e vllm installs it)")
    subject = VllmSubject()
    if HOST_PATH not in subject.capabilities:
        pytest.skip(f"not applicable: {subject.capability_notes[HOST_PATH]}")
    batch = make_batch([4], [4], decode_threshold=4, cudagraph_pad=8)
    config = new_config(device, 12, 5, speculative=True)
    with pytest.raises(RuntimeError, match=r"The size of tensor a \(8\) must match the size of tensor b \(4\)") as info:
        subject.make_builder(config).build(batch)
    finding = match_builder_finding(subject, info.value, batch=batch)
    assert finding.key == "padded-device-path-req-id-size-mismatch"
    assert_seen_on(finding, subject.version)
    release = VllmSubject(release=True)
    released = release.make_builder(new_config(device, 12, 5, speculative=True))
    released.build(batch)
    assert released.buffers()["req_id_per_token"].tolist()[:8] == [0] * 8


def test_a_generated_stand_in_has_the_class_fields_defaults_and_methods_and_nothing_else(monkeypatch):
    """Where a configuration class cannot be made here, its stand-in comes from the class itself:
    every field at its default (or default_factory), the suite's values over them, its methods
    and properties run on those fields; anything else is a suite error naming the class."""
    import dataclasses

    import fixtures.subjects.vllm.config as config_module

    monkeypatch.setattr(config_module, "_PROVENANCE", {})  # this process's record stays as it was

    @dataclasses.dataclass
    class LaterConfig:
        required: int
        knob: int = 7
        table: dict = dataclasses.field(default_factory=lambda: {"a": 1})

        @property
        def doubled(self) -> int:
            return 2 * self.knob

        def scaled(self, by: int) -> int:
            return by * self.required

    stand_in = generated_stand_in(LaterConfig, {"required": 3}, "cannot be made here")
    assert (stand_in.required, stand_in.knob, stand_in.table) == (3, 7, {"a": 1})
    assert stand_in.doubled == 14 and stand_in.scaled(2) == 6
    with pytest.raises(StandInMissing, match=r"LaterConfig \(generated: cannot be made here\)"):
        stand_in.unknown  # noqa: B018
    assert "LaterConfig (stood in: cannot be made here)" in describe_provenance()


def test_a_key_pooled_buffer_as_the_suite_lays_it_out_is_read_back_by_the_releases_fit(backend):
    """``write_topk_rows`` lays a key pool out as vLLM's indexer leaves it (the history from column 0, the live
    tail past the top-k width, a saturated row's history full to the width); the installed backend's own
    ``fit_kpool_indices_to_aiter`` (AITER's fixed top-k width, the live tail kept) gives back each row's keys,
    history then tail: what the NoPE properties then compare with the step's.  Its width from the installed
    rule: GLM-5.3's top-k of 2048 and key pool of 128 make the 2176 columns vLLM's sparse_utils names."""
    from fixtures.subjects.vllm.forward.base import kpool_rule, write_topk_rows

    if not hasattr(backend, "fit_kpool_indices_to_aiter") or kpool_rule() is None:
        pytest.skip("not applicable: this vLLM release has no key pool")
    assert kpool_rule()(2048, 128) == 2176
    tokens, kpool = 256, 64
    width = kpool_rule()(tokens, kpool)
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randperm(4000, generator=gen)[:n].tolist() for n in (0, 1, 63, 200, tokens, tokens, tokens)]
    for saturate in (False, True):
        buffer = torch.full((len(rows) + 2, width), 7, dtype=torch.int32)
        write_topk_rows(buffer, rows, tokens, kpool, seed=3, saturate=saturate)
        assert (buffer[len(rows) :] == -1).all(), "rows past the step are -1"
        assert any((buffer[t, tokens:] >= 0).any() for t in range(len(rows))), "no row has a pool tail"
        fitted = backend.fit_kpool_indices_to_aiter(buffer[: len(rows)], tokens)
        for t, row in enumerate(rows):
            live = fitted[t][fitted[t] >= 0].tolist()
            assert live == row and (fitted[t][len(row) :] == -1).all(), (saturate, t)


# The post-change file with AITER's Triton sparse MLA route taken out, as the files of forks on an older base are:
# no _forward_mla_aiter, a forward that never takes it, a builder that reads no use_aiter_sparse_mla.
WITHOUT_AITER_TRITON_ROUTE = (
    ('\n            and not getattr(attention_context[name].impl, "use_aiter_sparse_mla", False)', ""),
    ("    def _forward_mla_aiter(", "    def _forward_mla_aiter_taken_out("),
    ("        if self.use_aiter_sparse_mla:\n            output = self._forward_mla_aiter(",
     "        if False:\n            output = self._forward_mla_aiter_taken_out("),
)  # fmt: skip


def test_a_file_without_aiters_triton_route_keeps_work_metadata_for_a_layer_made_with_its_switch(
    run_suite_in, tmp_path
):
    """A file without AITER's Triton sparse MLA route sends a layer made with ``VLLM_ROCM_USE_AITER_TRITON_SPARSE_MLA``
    set to AITER's persistent decode, which reads the work metadata its builder keeps: it is never failed for
    keeping it (the expectation that such a layer carries none rests on the route: ``file_routes``).  Built here
    from the post-change file, the route taken out; the builder's default layer on CPU is the switch's."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed here (tox -e vllm installs it)")
    source = ROOT.parent / "shared" / "vllm-pr" / "vllm/v1/attention/backends/mla/rocm_aiter_mla_sparse.py"
    if not source.is_file():
        pytest.skip(f"not applicable: the post-change file {source} is not beside this checkout")
    node = "tests/gating/test_gating_contract.py::test_overstated_upper_bound_would_diverge_from_device_path"

    def run_on(edits, name):
        text = source.read_text()
        for old, new in edits:
            assert text.count(old) == 1, f"the post-change file changed: {old!r} is not there once"
            text = text.replace(old, new)
        target = tmp_path / name / "vllm/v1/attention/backends/mla/rocm_aiter_mla_sparse.py"
        target.parent.mkdir(parents=True)
        target.write_text(text)
        return run_suite_in("--subject=vllm", f"--vllm-overlay={tmp_path / name}", "--baseline=none", repo(node))

    run = run_on(WITHOUT_AITER_TRITON_ROUTE, "without-route")
    if run.ret == 4 and "targets another vLLM release" in run.out:
        pytest.skip(f"not applicable: the post-change file does not load here: {run.out.strip()[-300:]}")
    assert run.ret == 0 and "carries persistent work metadata" not in run.out, run.out[-3000:]
    # the control: the route kept, its builder no longer reading the switch, is failed for the metadata it keeps
    run = run_on(WITHOUT_AITER_TRITON_ROUTE[:1], "builder-ignores-the-route")
    assert run.ret == 1 and "a layer on AITER's Triton sparse MLA (use_aiter_sparse_mla" in run.out, run.out[-3000:]


def test_a_builder_that_decides_per_step_whether_to_hand_work_metadata_lacks_it_on_every_step():
    """The expectation that a layer without sinks carries AITER's work metadata on every step is read off the
    builder's ``build``: one that decides it per step (``use_persistent``, as vLLM 0.25.1's does for chunked-prefill
    continuations) lacks it, with the reason in vLLM's terms; one that always hands it on does not."""
    from fixtures.subjects.vllm_rocm_aiter_sparse.subject import WORK_METADATA_EVERY_STEP, lacked_expectations

    class Deciding:
        def build(self, query_lens, seq_lens):
            use_persistent = not any(q > 1 and s > q for q, s in zip(query_lens, seq_lens, strict=True))
            return use_persistent

    class Always:
        def build(self, query_lens, seq_lens):
            return True

    module = types.SimpleNamespace(gpu_sync_allowed=None, _use_rocm_sparse_triton=None)
    deciding = lacked_expectations(module, Deciding, {"_prev_metadata_key"}, "0.25.1")
    assert (
        list(deciding) == [WORK_METADATA_EVERY_STEP]
        and "Deciding.build decides per step" in deciding[WORK_METADATA_EVERY_STEP]
    )
    assert lacked_expectations(module, Always, {"_prev_metadata_key"}, "0.26.0") == {}
