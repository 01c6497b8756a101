"""What vLLM's own code hands ``forward_mqa``, asked of vLLM itself (:mod:`fixtures.subjects.vllm.producers`): the
facts the findings registry's reachability rests on (docs/findings.md).  A release whose producers hand something
else fails here, naming the finding whose record must be revisited.  Needs vLLM (skips without it)."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import textwrap

import pytest
import torch

pytestmark = pytest.mark.selftest


@pytest.fixture(scope="module")
def rocm():
    """The ROCm subject of the installed vLLM (its backend is the one ``MLAAttention`` is made with)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed here (tox -e vllm installs it)")
    from fixtures.subjects.vllm_rocm_aiter_sparse.subject import VllmSubject

    return VllmSubject()


def produced(rocm, producer, model, rope):
    from fixtures.subjects.vllm.producers import NotProducedHere

    try:
        return rocm.produced_query(producer, model_dtype=model, qk_rope_head_dim=rope)
    except NotProducedHere as exc:
        pytest.skip(f"not applicable: vLLM {rocm.version}: {exc}")


@pytest.mark.parametrize("rope", [0, 64], ids=["nope", "rope64"])
def test_vllms_producers_hand_forward_mqa_these_queries(rocm, rope):
    """Each configuration of vLLM's MQA bmm, on each model dtype, as vLLM 0.34.0's ``MLAAttention`` runs it:

    * in a bf16 model every producer hands a bf16 ``ql_nope`` (so ``concat-mla-q-mixed-dtype``, a bf16 layer handed
      another dtype, is outside what vLLM produces);
    * in an fp16 model the default bmm hands an fp16 ``ql_nope`` (``aiter-decode-fp16-query``: with a rope part it
      reaches AITER's decode as an fp16 query), and AITER's fp8 bmm (``VLLM_ROCM_USE_AITER_FP8BMM=1``) a bf16 one
      (``nope-zero-copy-ignores-dtype``: on a NoPE layer the zero-copy branch hands it on as the query);
    * every ``ql_nope`` is contiguous and token-major ``[T, H, kv_lora_rank]`` (the zero-copy branch's premise)."""
    from fixtures.subjects.vllm.producers import PRODUCERS

    default, fp8_bmm = PRODUCERS
    seen = {}
    for model in (torch.bfloat16, torch.float16):
        for producer in (default, fp8_bmm):
            q = produced(rocm, producer, model, rope)
            seen[(model, producer.name)] = q
            assert q.ql_shape == (5, 16, 512) and q.ql_contiguous, q
    for producer in (default, fp8_bmm):
        assert seen[(torch.bfloat16, producer.name)].ql_dtype == torch.bfloat16, (
            f"{producer.name} hands a bf16 layer a {seen[(torch.bfloat16, producer.name)].ql_dtype} ql_nope: "
            "concat-mla-q-mixed-dtype is reachable; revisit its record"
        )
    assert seen[(torch.float16, default.name)].ql_dtype == torch.float16, "revisit aiter-decode-fp16-query"
    assert seen[(torch.float16, fp8_bmm.name)].ql_dtype == torch.bfloat16, "revisit nope-zero-copy-ignores-dtype"


def test_mla_attention_calls_forward_mqa_only_with_tokens():
    """``vllm-0.33-fp8-empty-batch`` is outside what vLLM produces: every call of ``forward_mqa`` in vLLM's
    ``MLAAttention.forward_impl`` sits under a test that the step has MQA tokens (``num_mqa_tokens > 0``)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed here (tox -e vllm installs it)")
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    tree = ast.parse(textwrap.dedent(inspect.getsource(MLAAttention.forward_impl)))
    calls, guarded = 0, 0

    def visit(node, under):
        nonlocal calls, guarded
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "forward_mqa":
            calls += 1
            guarded += under
        if isinstance(node, ast.If):
            test = ast.unparse(node.test).replace(" ", "")
            for child in node.body:
                visit(child, under or "num_mqa_tokens>0" in test)
            for child in node.orelse:
                visit(child, under)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, under)

    visit(tree, False)
    assert calls, "MLAAttention.forward_impl calls no forward_mqa: revisit vllm-0.33-fp8-empty-batch"
    assert guarded == calls, f"{calls - guarded} of {calls} forward_mqa calls are not under num_mqa_tokens > 0"
