"""vLLM's sibling sparse MLA builders as subjects (``fixtures/subjects/vllm/siblings.py``).

What a sibling is made of (one folder, its registration, nothing else of the
suite touched), the protocol's buffers a builder without the paged-KV metadata
exposes, the finding one of them has, pinned, and why the common builder's
entries past a step are declared unwritten.  The tests that drive a builder
need vLLM installed (``tox -e vllm`` and ``tox -e vllm-family`` install it);
elsewhere they are not applicable.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest
import torch

from fixtures import ROOT
from fixtures.harness.contract import exposed_buffers
from fixtures.harness.device_work import run_program
from fixtures.harness.forward import new_forward, run_forward
from fixtures.harness.step import new_config, run_step
from fixtures.inputs.batches import make_batch
from fixtures.inputs.forward_cases import ForwardCase, build_inputs
from fixtures.models.tensors import same_storage
from fixtures.protocol import (
    HOST_PATH,
    NOPE_FORWARD,
    NOPE_ZERO_COPY,
    PAGED_KV_METADATA,
    PERSISTENT_BUFFERS,
    PROTOCOL_VERSION,
    ForwardNotApplicable,
    StepResult,
    SubjectError,
)
from fixtures.subjects import KNOWN_SUBJECTS, check_subject, load_subject
from fixtures.subjects.mutants.vllm_family import FAMILY_EDITS, write_family_overlay
from fixtures.subjects.vllm.config import StandIn
from fixtures.subjects.vllm.forward.sparse import KernelStandIn
from fixtures.subjects.vllm.loading.imports import installed_module_file, installed_vllm_version
from fixtures.subjects.vllm.siblings import NotASiblingHere, SiblingSubject
from fixtures.subjects.vllm_flashinfer_sparse.findings import BF16_OUTPUT
from fixtures.subjects.vllm_flashmla_sparse.findings import EMPTY_BATCH
from fixtures.subjects.vllm_rocm_aiter_sparse.backend import BACKEND
from fixtures.subjects.vllm_rocm_aiter_sparse.findings import assert_seen_on
from fixtures.subjects.vllm_xpu_sparse.findings import PAGEABLE_UPLOAD, PAGEABLE_UPLOAD_SEEN_ON
from oracles import device_work as contract
from tools.fresh_run import repo

SIBLINGS = sorted(name for name, target in KNOWN_SUBJECTS.items() if ".vllm_" in target and name != "vllm")


def sibling(name: str):
    """The sibling subject ``name`` on the installed vLLM; not applicable where it has no such backend."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("not applicable: vLLM is not installed here (tox -e vllm-family installs it)")
    try:
        return load_subject(name)
    except NotASiblingHere as exc:
        pytest.skip(f"not applicable: {exc}")


# ----- the architecture answers for itself -------------------------------------
def test_each_sibling_is_one_folder_of_its_own_plus_its_registration():
    """Each sibling lives in ``fixtures/subjects/<its folder>/`` and is named by no module of the
    suite outside ``fixtures/subjects`` (the plugin, harness, inputs, models, oracles and tools
    reach it through ``--subject`` alone)."""
    assert len(SIBLINGS) >= 3, SIBLINGS
    folders = {KNOWN_SUBJECTS[name].split(":")[0].split(".")[2] for name in SIBLINGS}
    assert len(folders) == len(SIBLINGS), "one folder per sibling"
    for folder in folders:
        assert (ROOT / "fixtures" / "subjects" / folder / "subject.py").is_file(), folder
    outside = [
        p
        for top in ("oracles", "tools", "fixtures")
        for p in (ROOT / top).rglob("*.py")
        if "subjects" not in p.relative_to(ROOT).parts
    ]
    named = {str(p.relative_to(ROOT)): [f for f in folders | set(SIBLINGS) if f in p.read_text()] for p in outside}
    assert not {p: f for p, f in named.items() if f}, "a module outside fixtures/subjects names a sibling"


def test_the_shared_vllm_driver_names_no_backend_module():
    """``fixtures/subjects/vllm/`` is every vLLM subject's driver: no module of it names a backend module that a
    subject drives (ROCm's, a sibling's); each subject's folder does."""
    classes = [getattr(importlib.import_module(t.split(":")[0]), t.split(":")[1]) for t in KNOWN_SUBJECTS.values()]
    modules = {BACKEND} | {cls.module for cls in classes if isinstance(getattr(cls, "module", None), str)}
    assert len(modules) >= 4, modules
    named = {
        str(path.relative_to(ROOT)): sorted(m for m in modules if m.rsplit(".", 1)[1] in path.read_text())
        for path in (ROOT / "fixtures" / "subjects" / "vllm").rglob("*.py")
    }
    assert not {p: m for p, m in named.items() if m}, "the shared vLLM driver names a backend module"


def test_a_sibling_subject_is_a_few_declarations():
    """What a sibling's folder adds to :class:`SiblingSubject` is declarations (names, its module,
    its class, its findings), no code: the driving is the family's."""
    for name in SIBLINGS:
        module = importlib.import_module(KNOWN_SUBJECTS[name].split(":")[0])
        cls = getattr(module, KNOWN_SUBJECTS[name].split(":")[1])
        assert issubclass(cls, SiblingSubject)
        own = {k for k, v in vars(cls).items() if callable(v) and not k.startswith("__")}
        assert not own, f"{name} defines methods {sorted(own)}: they belong in fixtures/subjects/vllm/siblings.py"


# ----- the protocol: builders without the paged-KV metadata ---------------------
class _Subject:
    name = "probe"
    make_builder = None

    def __init__(self, capabilities, **extra):
        self.capabilities = frozenset(capabilities)
        self.__dict__.update(extra)


def test_a_subject_without_paged_kv_metadata_exposes_req_id_per_token_alone():
    assert exposed_buffers(_Subject({PERSISTENT_BUFFERS})) == ("req_id_per_token",)
    assert set(exposed_buffers(_Subject({PAGED_KV_METADATA}))) == {
        "paged_kv_indptr",
        "req_id_per_token",
        "qo_indptr",
        "paged_kv_last_page_len",
    }


def test_the_host_path_needs_the_paged_kv_metadata_and_only_req_id_may_stay_unwritten():
    """Refused of a subject written for protocol 6 or later; one written before it (declaring an earlier
    version, or none) is loaded, its paged-KV metadata implied (fixtures/plugin/protocol_versions.py)."""
    with pytest.raises(SubjectError, match="declares host_path without paged_kv_metadata"):
        check_subject(_Subject({HOST_PATH}, protocol_version=PROTOCOL_VERSION), "probe")
    check_subject(_Subject({HOST_PATH}), "probe")
    check_subject(_Subject({HOST_PATH}, protocol_version=5), "probe")
    with pytest.raises(SubjectError, match="declares protocol_version 99; this suite speaks protocols 1 to"):
        check_subject(_Subject({PERSISTENT_BUFFERS}, protocol_version=99), "probe")
    with pytest.raises(SubjectError, match=r"unwritten_past_step \['paged_kv_indptr'\]"):
        check_subject(_Subject({PAGED_KV_METADATA}, unwritten_past_step={"paged_kv_indptr"}), "probe")
    check_subject(_Subject({PERSISTENT_BUFFERS}, unwritten_past_step={"req_id_per_token"}), "probe")


class _AllFour:
    """A builder of protocol 5 that exposes every buffer, of a subject that does not say so."""

    def __init__(self, config):
        m = config.max_num_batched_tokens
        self.b = {n: config.allocator.zeros(n, k, torch.int32) for n, k in (("req_id_per_token", m),)}
        self.b.update({n: config.allocator.zeros(n, m + 1, torch.int32) for n in ("paged_kv_indptr", "qo_indptr")})
        self.b["paged_kv_last_page_len"] = config.allocator.zeros("paged_kv_last_page_len", m, torch.int32)

    def build(self, batch):
        n = batch.num_actual_tokens
        return StepResult(
            self.b["paged_kv_indptr"][: n + 1],
            self.b["req_id_per_token"][:n],
            self.b["qo_indptr"][: n + 1],
            self.b["paged_kv_last_page_len"][:n],
            path="device",
        )

    def buffers(self):
        return self.b


def test_a_builder_exposing_buffers_its_subject_does_not_declare_is_refused_by_name():
    """A protocol-5 subject that exposes the paged-KV metadata without declaring it would have those
    buffers go unchecked: the step refuses it, naming the capability."""
    config = new_config("cpu", 4, 2)
    with pytest.raises(AssertionError, match="exposes \\['req_id_per_token'\\].*paged_kv_metadata"):
        run_step(_AllFour(config), make_batch([1], [3]), config, _Subject({PERSISTENT_BUFFERS}))


# ----- the siblings on the installed vLLM ---------------------------------------
def test_a_sibling_the_installed_vllm_lacks_is_a_usage_error_naming_it(monkeypatch):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("not applicable: vLLM is not installed here")
    cls = SiblingSubject
    monkeypatch.setattr(cls, "name", "probe", raising=False)
    monkeypatch.setattr(cls, "gpu", "xpu", raising=False)
    monkeypatch.setattr(cls, "module", "vllm.v1.attention.backends.mla.no_such_backend", raising=False)
    with pytest.raises(SubjectError, match=r"vLLM \S+ has no vllm\.v1\.attention\.backends\.mla\.no_such_backend"):
        cls()


@pytest.mark.parametrize("name", SIBLINGS)
def test_each_sibling_builds_req_id_per_token_through_its_real_build(name):
    """A step through the real builder: req_id_per_token of a mixed batch, the metadata vLLM built."""
    subject = sibling(name)
    config = new_config("cpu", 8, 4, pin_memory=False)
    builder = subject.make_builder(config)
    step = run_step(builder, make_batch([1, 3], [5, 9]), config, subject)
    assert step.result.req_id_per_token.tolist() == [0, 1, 1, 1]
    assert type(step.result.extra["metadata"]).__module__.startswith("vllm.")
    assert builder.buffers()["req_id_per_token"] is builder.inner.req_id_per_token_buffer


@pytest.mark.parametrize("name", SIBLINGS)
def test_unwritten_past_step_is_declared_where_the_builder_leaves_a_shrunk_batch_stale(name):
    """The common builder writes no entry past a step (its declaration is honest); XPU zero-fills
    its buffer, and declares nothing, so its tail stays checked."""
    subject = sibling(name)
    config = new_config("cpu", 8, 4, pin_memory=False)
    builder = subject.make_builder(config)
    run_step(builder, make_batch([1, 1, 1, 1], [5, 6, 7, 8]), config, subject)
    run_step(builder, make_batch([1], [5]), config, subject)
    tail = builder.buffers()["req_id_per_token"][1:4].tolist()
    if "req_id_per_token" in getattr(subject, "unwritten_past_step", ()):
        assert tail == [1, 2, 3], "the declaration must describe the builder: it left the last step's ids"
    else:
        assert tail == [0, 0, 0]


def test_flashmla_sparse_build_raises_on_an_empty_batch():
    """Finding, pinned: FlashMLASparseMetadataBuilder.build() on a batch without requests raises
    IndexError in split_decodes_and_prefills (docs/findings.md)."""
    subject = sibling("vllm-flashmla-sparse")
    config = new_config("cpu", 4, 2, pin_memory=False)
    builder = subject.make_builder(config)
    batch = make_batch([], [])
    with pytest.raises(IndexError) as info:
        builder.build(batch)
    assert EMPTY_BATCH.matches(info.value, batch=batch), info.value
    version = installed_vllm_version()
    assert_seen_on(EMPTY_BATCH, version, "fixtures/subjects/vllm_flashmla_sparse/findings.py")
    assert EMPTY_BATCH in subject.known_findings().builder


def test_xpu_sparse_uploads_req_id_non_blocking_from_pageable_memory_where_recorded():
    """Finding, pinned (``xpu-sparse-pageable-upload``, docs/findings.md): vLLM 0.21.0's
    XPUMLASparseMetadataBuilder.build() copies req_id_per_token non-blocking out of a pageable
    ``torch.from_numpy`` array (a copy the driver makes blocking); later releases upload it from
    pinned memory (``np_to_pinned_tensor``).  The device-path ledger tells the two apart."""
    subject = sibling("vllm-xpu-sparse")
    steps = run_program(subject, "cpu", [make_batch([1, 2], [3, 4])], m=8, topk=4)
    problem = contract.device_uploads_pinned(steps[0].ledger)
    version = installed_vllm_version()
    if version in PAGEABLE_UPLOAD_SEEN_ON:
        assert problem is not None and "PAGEABLE" in problem, steps[0].ledger.render()
    else:
        assert problem is None, (
            f"{PAGEABLE_UPLOAD} reproduced on vLLM {version}, which its record does not list: add it to "
            f"fixtures/subjects/vllm_xpu_sparse/findings.py and docs/findings.md\n{problem}"
        )


def test_baseline_release_with_a_sibling_is_a_usage_error(run_suite_in):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("not applicable: vLLM is not installed here")
    run = run_suite_in("--subject=vllm-xpu-sparse", "--baseline=release", repo("tests/differential"))
    assert run.ret == 4, run.out
    assert "subject 'vllm-xpu-sparse' has no release baseline" in run.out


@pytest.mark.parametrize("name", sorted(FAMILY_EDITS))
def test_each_family_edit_applies_to_the_installed_file(name, tmp_path):
    """The kill matrix's family edits (``python -m tools.killmatrix --vllm-family``) still apply to
    the installed release: each writes its module's file, changed in one place."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("not applicable: vLLM is not installed here")
    edit = FAMILY_EDITS[name]
    for subject in edit.subjects:
        sibling(subject)  # not applicable on a release without the backend
    default = re.search(r"\{env:VLLM_RELEASE:([\d.]+)\}", (ROOT / "tox.ini").read_text()).group(1)
    version = installed_vllm_version()
    try:
        text = installed_module_file(edit.module).read_text()
    except SubjectError:  # the release has no such module
        text = ""
    if version != default and edit.old not in text:
        pytest.skip(
            f"not applicable: the family's edits are written for the default release {default}; "
            f"vLLM {version}'s {edit.module} differs"
        )
    root = write_family_overlay(tmp_path, name)
    written = root / Path(*edit.module.split(".")).with_suffix(".py")
    assert edit.new in written.read_text() or not edit.new
    assert set(edit.subjects) <= set(SIBLINGS)


# ----- the siblings' forward_mqa (fixtures/subjects/vllm/forward/sparse.py) -------
def sibling_forward(name: str, model_dtype: torch.dtype, t: int = 2, heads: int = 4, lora: int = 512, **kw):
    """The real ``forward_mqa`` of sibling ``name`` on a NoPE layer, the step's keys drawn from its seed; by default
    at the latent rank DeepSeek's models have (512: the NoPE head size the backends declare, and the only one some
    releases' concat_mla_q takes); not applicable where the sibling's backend serves no NoPE layer."""
    subject = sibling(name)
    if NOPE_FORWARD not in subject.capabilities:
        pytest.skip(f"not applicable: {subject.capability_notes[NOPE_FORWARD]}")
    c = ForwardCase(4, t, t, num_heads=heads, kv_lora_rank=lora, qk_rope_head_dim=0, model_dtype=model_dtype,
                    ql_dtype=model_dtype, **kw)  # fmt: skip
    config, forward = new_forward(subject, c, torch.device("cpu"))
    inputs = build_inputs(c, torch.device("cpu"))
    return subject, c, config, forward, inputs


def flashinfer_forward(model_dtype: torch.dtype, **kw):
    """FlashInferMLASparseImpl.forward_mqa (:func:`sibling_forward`)."""
    return sibling_forward("vllm-flashinfer-sparse", model_dtype, **kw)


@pytest.mark.parametrize("name", ["vllm-flashmla-sparse", "vllm-flashinfer-sparse"])
def test_a_sibling_forward_failing_downstream_raises_its_own_failure(name, monkeypatch):
    """Regression (the random-seed gate, seed 212012287): a sibling's forward that failed below its query
    assembly raised AttributeError from the shared driver (a hook only ROCm's forward had), a suite error in
    every NoPE property; the failure is the downstream's own, and the shared driver's hooks serve every
    forward."""
    _, c, config, forward, inputs = sibling_forward(name, torch.bfloat16)

    def broken(*args, **kwargs):
        raise AssertionError("the downstream's own failure")

    monkeypatch.setattr(config, "attention", broken)
    with pytest.raises(AssertionError, match="the downstream's own failure"):
        forward.forward_mqa((inputs.ql_nope, inputs.q_pe), inputs.kv_cache, inputs.metadata)
    assert forward.prepared_step("step", 1) == "step", "the builder's step reaches a sibling's forward unchanged"


def test_flashmla_sparse_forward_hands_the_kernel_the_steps_rows_and_the_layers_heads():
    """FlashMLA's NoPE copy goes into its workspace's head-padded query; the kernel stand-in reads back, from
    what vLLM's conversion handed the kernel, exactly the step's keys, and the layer's heads of the query
    hold ql_nope's values."""
    subject, c, config, forward, inputs = sibling_forward("vllm-flashmla-sparse", torch.bfloat16, heads=3)
    assert NOPE_ZERO_COPY not in subject.capabilities
    run = run_forward(config, forward, inputs.ql_nope, inputs, subject=subject)
    assert run.result.path == "copy" and not same_storage(run.call.q, inputs.ql_nope)
    assert tuple(run.call.q.shape) == (c.num_tokens, 3, c.kv_lora_rank) and torch.equal(run.call.q, inputs.ql_nope)
    assert tuple(run.result.output.shape) == (c.num_tokens, 3, c.kv_lora_rank)
    handed, given = run.call.metadata, inputs.metadata
    assert torch.equal(handed.paged_kv_indptr, given.paged_kv_indptr[: c.num_tokens + 1])
    assert torch.equal(handed.paged_kv_indices, given.paged_kv_indices[: given.live])


@pytest.mark.parametrize(
    "model_dtype, cache, reason",
    [
        (torch.float16, "auto", r"vLLM's FlashMLASparseBackend\.supported_dtypes is \[torch\.bfloat16\]"),
        (torch.bfloat16, "fp8", r"FlashMLASparseBackend's fp8 cache is fp8_ds_mla"),
    ],
)
def test_a_layer_the_sibling_backend_does_not_serve_is_not_applicable_by_its_declaration(model_dtype, cache, reason):
    """vLLM never runs a float16 model on FlashMLA's sparse backend (its supported_dtypes), and its "fp8" is
    another cache format than the NoPE cases' per-tensor fp8: the forward is refused, naming why."""
    with pytest.raises(ForwardNotApplicable, match=reason):
        sibling_forward("vllm-flashmla-sparse", model_dtype, kv_cache_dtype=cache)


@pytest.mark.parametrize("name", ["vllm-flashinfer-sparse", "vllm-flashmla-sparse"])
def test_a_sibling_forward_is_not_handed_a_step_without_tokens(name):
    """``MLAAttention`` calls ``forward_mqa`` only with tokens: a step without any is not handed over."""
    subject, c, config, forward, inputs = sibling_forward(name, torch.bfloat16, t=0)
    run = run_forward(config, forward, inputs.ql_nope, inputs, subject=subject)
    assert run.call is None and run.result.path is None and not forward.handed
    assert tuple(run.result.output.shape) == (0, c.num_heads, c.kv_lora_rank)


def test_flashinfer_sparse_forward_hands_the_kernel_the_steps_rows_through_vllms_remap():
    """The kernel stand-in reads back, from what vLLM's remap handed the kernel, exactly the step's
    keys (so the NoPE properties compare real remapped rows), and the zero-copy query is ql_nope."""
    subject, c, config, forward, inputs = flashinfer_forward(torch.bfloat16)
    assert forward.q_concat_buffer is None
    run = run_forward(config, forward, inputs.ql_nope, inputs, subject=subject)
    if NOPE_ZERO_COPY in subject.capabilities:
        assert run.result.path == "zero_copy" and run.call.q.data_ptr() == inputs.ql_nope.data_ptr()
    else:  # a release before the branch: the torch.cat copy
        assert run.result.path == "copy" and torch.equal(run.call.q, inputs.ql_nope)
    handed, given = run.call.metadata, inputs.metadata
    assert torch.equal(handed.paged_kv_indptr, given.paged_kv_indptr[: c.num_tokens + 1])
    assert torch.equal(handed.paged_kv_indices, given.paged_kv_indices[: given.live])


def test_flashinfer_sparse_kernel_stand_in_refuses_rows_outside_the_cache():
    """A remap that hands the kernel a row past the cache fails naming the metadata, not an IndexError."""
    _, _, config, forward, inputs = flashinfer_forward(torch.bfloat16)
    stand_in = KernelStandIn(forward, inputs.kv_cache, StandIn("metadata", num_actual_tokens=1))
    with pytest.raises(AssertionError, match="paged_kv_indices handed downstream: .* row 9 at index 1"):
        stand_in.handed_metadata(torch.tensor([[0, 9, -1]], dtype=torch.int32), torch.tensor([2]), 8)


def test_flashinfer_sparse_forward_returns_bf16_for_fp16():
    """Finding, pinned (``flashinfer-sparse-bf16-output``, docs/findings.md): on the releases it lists, vLLM's
    FlashInferMLASparseImpl returns a float16 layer's output as bfloat16, which MLAAttention's own
    ``_v_up_proj`` then cannot multiply with the float16 ``W_UV``."""
    subject, c, config, forward, inputs = flashinfer_forward(torch.float16)  # not applicable without vLLM
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    output = run_forward(config, forward, inputs.ql_nope, inputs, subject=subject).result.output
    version = installed_vllm_version()
    if output.dtype == torch.float16:
        assert version not in BF16_OUTPUT.seen_on, f"{BF16_OUTPUT.key} no longer reproduces on vLLM {version}"
        return
    assert output.dtype == torch.bfloat16 and BF16_OUTPUT.matches(
        subject, output_dtype=output.dtype, model_dtype=torch.float16
    )
    assert_seen_on(BF16_OUTPUT, version, "fixtures/subjects/vllm_flashinfer_sparse/findings.py")
    v_head_dim = 16
    layer = StandIn("MLAAttention", num_heads=c.num_heads, kv_lora_rank=c.kv_lora_rank, v_head_dim=v_head_dim,
                    W_UV=torch.zeros(c.num_heads, c.kv_lora_rank, v_head_dim, dtype=torch.float16),
                    is_aiter_triton_fp4_bmm_enabled=False, is_aiter_triton_fp8_bmm_enabled=False,
                    is_amx_bmm_enabled=False)  # fmt: skip
    out = torch.empty(c.num_tokens, c.num_heads * v_head_dim, dtype=torch.float16)
    # torch's refusal of the mixed bmm, as each release's _v_up_proj calls it (into ``out``: 0.34.0; plain: 0.33.0)
    refused = r"expected scalar type BFloat16 but found Half|expected m1 and m2 to have the same dtype, but got: c10::BFloat16 != c10::Half"
    with pytest.raises(RuntimeError, match=refused):
        MLAAttention._v_up_proj(layer, output, out)


# The fix once proposed for flashinfer-sparse-bf16-output: the impl's out allocated in the query's dtype.
OLD_FLASHINFER_FIX = (
    "out = q.new_empty(\n            (num_tokens, num_heads, self.kv_lora_rank), dtype=torch.bfloat16\n        )",
    "out = q.new_empty((num_tokens, num_heads, self.kv_lora_rank), dtype=q.dtype)",
)


def test_the_fix_proposed_before_fails_flashinfers_check_of_out(run_suite_in, tmp_path):
    """The fix once proposed for ``flashinfer-sparse-bf16-output`` (allocate ``out`` in the model dtype) hands
    FlashInfer a float16 ``out``, which FlashInfer's own check refuses (``check_shape_dtype_device``: "Invalid dtype
    of out: expected torch.bfloat16, got torch.float16", as flashinfer-python 0.7.2.post1 and 0.7.4 raise it);
    the fix the registry carries (float16 dropped from the backend's supported_dtypes) is verified by
    ``tools/verify_fixes.py``."""
    sibling("vllm-flashinfer-sparse")  # not applicable without it
    module = "vllm.v1.attention.backends.mla.flashinfer_mla_sparse"
    text = installed_module_file(module).read_text()
    if OLD_FLASHINFER_FIX[0] not in text:
        pytest.skip(f"not applicable: vLLM {installed_vllm_version()}'s impl allocates no out of its own")
    target = tmp_path / "overlay" / (module.replace(".", "/") + ".py")
    target.parent.mkdir(parents=True)
    target.write_text(text.replace(*OLD_FLASHINFER_FIX))
    run = run_suite_in(
        "--subject=vllm-flashinfer-sparse", f"--vllm-overlay={target.parents[5]}", repo(BF16_OUTPUT.regression_test)
    )
    assert run.ret == 1, run.out[-3000:]
    assert "ValueError: Invalid dtype of out: expected torch.bfloat16, got torch.float16" in run.out, run.out[-3000:]


def test_flashinfer_sparse_forward_without_the_zero_copy_branch_before_0_30():
    """The forward is driven where vLLM would select FlashInfer's sparse backend for a NoPE layer: its declared head
    sizes take 512 (0.21.0 to 0.29.0 declare [576] only, later releases none); the zero-copy capability is read from
    the installed impl's source: FlashInfer's forward has the branch from vLLM 0.30.0 (in ``forward_mqa``; from
    0.33.0 in ``_forward_mqa_kernel``)."""
    subject = sibling("vllm-flashinfer-sparse")
    release = tuple(int(part) for part in installed_vllm_version().split("+")[0].split(".")[:2])
    declared = getattr(subject.backend, subject.forward_backend).get_supported_head_sizes()
    serves_nope = not declared or 512 in declared
    assert (NOPE_FORWARD in subject.capabilities) == serves_nope
    assert (NOPE_ZERO_COPY in subject.capabilities) == (serves_nope and release >= (0, 30))
    if not serves_nope:
        assert f"serves head sizes {sorted(declared)}" in subject.capability_notes[NOPE_FORWARD]


def test_flashinfer_sparse_kernel_lengths_accept_only_the_guard_of_an_empty_row():
    """vLLM 0.30.0-0.32.0 tell the no-rope kernel one dummy key for an empty row (and zero its output
    after): the stand-in hands that row on as empty; any other disagreement with the remap's counts fails."""
    valid = torch.tensor([2, 0, 3], dtype=torch.int32)
    assert torch.equal(KernelStandIn.active_lengths(valid, None), valid)
    assert torch.equal(KernelStandIn.active_lengths(valid, valid.clamp(min=1)), valid)
    for told in ([2, 0, 2], [2, 2, 3], [1, 0, 3]):
        with pytest.raises(AssertionError, match="the kernel was told top-k lengths"):
            KernelStandIn.active_lengths(valid, torch.tensor(told, dtype=torch.int32))


def test_an_empty_copy_is_told_from_an_empty_ql_nope_by_its_storage():
    """Empty tensors all have data pointer 0; the forward's branch on a call without tokens is read
    off the storage itself (a release's torch.cat of two empty parts is a copy, not ql_nope)."""
    ql = torch.empty(0, 2, 4)
    assert same_storage(ql.unsqueeze(1)[0:0][:, 0], ql)
    assert not same_storage(torch.cat((ql, torch.empty(0, 2, 0)), dim=-1), ql)
