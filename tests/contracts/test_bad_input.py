"""Bad input to the suite gets a clear error that names the problem."""

import dataclasses

import numpy as np
import pytest

from fixtures.harness.step import new_config, run_step
from fixtures.inputs.batches import Batch, InvalidBatch, make_batch, validate_batch
from fixtures.inputs.strategies import Case, cases
from fixtures.protocol import NUM_SPECULATIVE_TOKENS, SubjectError
from fixtures.subjects import load_subject
from tools.fresh_run import repo


def raw_batch(**fields):
    """Two one-token decodes; ``num_actual_tokens`` defaults to ``query_start_loc[-1]``."""
    base = dict(
        query_start_loc=np.array([0, 1, 2], np.int32),
        seq_lens=np.array([5, 6], np.int32),
        seq_lens_cpu_upper_bound=np.array([5, 6], np.int32),
        num_decodes=2,
        num_decode_tokens=2,
        num_prefills=0,
        max_query_len=1,
    )
    base.update(fields)
    base.setdefault("num_actual_tokens", int(base["query_start_loc"][-1]))
    return Batch(**base)


def padded_batch(**fields):
    """One real one-token decode padded to a graph of 3 (two pad requests), as
    the GPU model runner pads it; ``fields`` override."""
    base = dict(
        query_start_loc=np.array([0, 1, 1, 1], np.int32),
        seq_lens=np.array([5, 0, 0], np.int32),
        seq_lens_cpu_upper_bound=np.array([5, 0, 0], np.int32),
        num_decodes=3,
        num_decode_tokens=3,
        num_prefills=0,
        max_query_len=1,
        num_actual_tokens=3,
    )
    base.update(fields)
    return Batch(**base)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"seq_lens": np.array([5, 0], np.int64)}, "seq_lens must be a 1-D numpy int32"),
        ({"query_start_loc": np.array([0, 1, 2], np.int64)}, "query_start_loc must be a 1-D numpy int32"),
        ({"query_start_loc": np.array([1, 1, 2], np.int32)}, "query_start_loc must start at 0"),
        ({"query_start_loc": np.array([0, 2, 1], np.int32)}, "query_start_loc is not monotonic"),
        ({"query_start_loc": np.array([0, 1], np.int32)}, "query_start_loc has 2 entries"),
        (
            {"query_start_loc": np.array([0, 1, 9], np.int32), "max_query_len": 8},
            "num_actual_tokens = 9 exceeds max_num_batched_tokens 8",
        ),
        ({"num_actual_tokens": 9}, "num_actual_tokens = 9 exceeds max_num_batched_tokens 8"),
        ({"num_actual_tokens": 1}, "num_actual_tokens = 1 is below query_start_loc[-1] = 2"),
        ({"num_actual_tokens": 2.0}, "num_actual_tokens must be an int"),
        ({"query_start_loc": np.array([0, 1, 8], np.int32), "max_query_len": 7}, "seq_lens < query_len"),
        # Only a CUDA-graph pad request (query_len 0, after the real ones) has seq_len 0.
        (
            {"seq_lens": np.array([5, 0], np.int32), "seq_lens_cpu_upper_bound": np.array([5, 0], np.int32)},
            "seq_lens is 0 for request(s) 1 with tokens: only a CUDA-graph pad request "
            "(query_len 0, after the real ones) has no context",
        ),
        # Padding only as the runner pads a uniform decode batch for a FULL CUDA graph.
        (
            {
                "query_start_loc": np.array([0, 1, 3], np.int32),
                "num_decodes": 1,
                "num_prefills": 1,
                "num_decode_tokens": 1,
                "max_query_len": 2,
                "num_actual_tokens": 4,
            },
            "num_actual_tokens = 4 (query_start_loc[-1] = 3, 0 pad request(s)): only a uniform decode batch "
            "(every query_len == decode_threshold 1, at least one request) is padded",
        ),
        (
            {"num_actual_tokens": 3, "num_decode_tokens": 3},
            "num_reqs = 2 of a CUDA-graph padded batch must be num_actual_tokens // decode_threshold = 3 // 1 = 3",
        ),
        ({"seq_lens_cpu_upper_bound": np.array([5, 5], np.int32)}, "below seq_lens"),
        ({"seq_lens_cpu_upper_bound": np.array([5, 6], np.int64)}, "seq_lens_cpu_upper_bound must be int32"),
        # The split must be the one vLLM derives from the query lengths at the threshold.
        (
            {"num_prefills": 1},
            "num_prefills=1 disagrees with the split derived from query_lens [1, 1] at decode_threshold 1 (0)",
        ),
        ({"num_decode_tokens": 3}, "num_decode_tokens=3 disagrees with the split derived from query_lens [1, 1]"),
        (
            {"num_decodes": 1},
            "num_decodes=1 disagrees with the split derived from query_lens [1, 1] at decode_threshold 1 (2)",
        ),
        (
            {
                "query_start_loc": np.array([0, 1, 3], np.int32),
                "num_decodes": 1,
                "num_prefills": 1,
                "num_decode_tokens": 1,
            },
            "max_query_len=1 disagrees with the split derived from query_lens [1, 2] at decode_threshold 1 (2)",
        ),
        ({"query_start_loc": np.array([0, 1, 3], np.int32)}, "num_decodes=2 disagrees"),
        (
            {"query_start_loc": np.array([0, 2, 3], np.int32)},
            "query_lens (from query_start_loc) [2, 1] is not reordered",
        ),
        ({"decode_threshold": 0}, "decode_threshold must be an int >= 1"),
        # At a speculative threshold two-token queries are decodes: 4 decode tokens, not 2.
        (
            {"query_start_loc": np.array([0, 2, 4], np.int32), "max_query_len": 2, "decode_threshold": 4},
            "num_decode_tokens=2 disagrees with the split derived from query_lens [2, 2] at decode_threshold 4 (4)",
        ),
    ],
)
def test_validator_names_the_field(fields, message):
    with pytest.raises(InvalidBatch) as info:
        validate_batch(raw_batch(**fields), 8)
    assert message in str(info.value)


def test_valid_batch_passes_and_padding_may_be_shorter_than_query():
    validate_batch(raw_batch(), 2)
    validate_batch(padded_batch(), 3)
    assert padded_batch().num_scheduled_tokens == 1 and padded_batch().is_cudagraph_padded


@pytest.mark.parametrize(
    "fields, message",
    [
        # Pad requests come after every real one.
        (
            {
                "query_start_loc": np.array([0, 0, 1, 1], np.int32),
                "seq_lens": np.array([0, 5, 0], np.int32),
                "seq_lens_cpu_upper_bound": np.array([0, 5, 0], np.int32),
            },
            "query_start_loc: request 1 (query_len 1) comes after the CUDA-graph pad request 0 (query_len 0)",
        ),
        (
            {"seq_lens": np.array([5, 4, 0], np.int32), "seq_lens_cpu_upper_bound": np.array([5, 4, 0], np.int32)},
            "seq_lens of CUDA-graph pad request(s) 1 (query_len 0) must be 0",
        ),
        (
            {"seq_lens_cpu_upper_bound": np.array([5, 0, 2], np.int32)},
            "seq_lens_cpu_upper_bound of CUDA-graph pad request(s) 2 (query_len 0) must be 0",
        ),
        # Padded only to a multiple of the threshold, with num_reqs == n // threshold.
        (
            {"num_actual_tokens": 4, "num_decode_tokens": 4},
            "num_reqs = 3 of a CUDA-graph padded batch must be num_actual_tokens // decode_threshold = 4 // 1 = 4",
        ),
        (
            {
                "query_start_loc": np.array([0, 1, 1], np.int32),
                "seq_lens": np.array([5, 0], np.int32),
                "seq_lens_cpu_upper_bound": np.array([5, 0], np.int32),
                "num_decodes": 2,
                "num_decode_tokens": 1,
                "num_actual_tokens": 1,
            },
            "num_reqs = 2 of a CUDA-graph padded batch must be num_actual_tokens // decode_threshold = 1 // 1 = 1",
        ),
        # A speculative uniform decode: queries of 1 + NUM_SPECULATIVE_TOKENS = 4 tokens.
        (
            {
                "query_start_loc": np.array([0, 4, 4], np.int32),
                "seq_lens": np.array([5, 0], np.int32),
                "seq_lens_cpu_upper_bound": np.array([5, 0], np.int32),
                "num_decodes": 2,
                "num_decode_tokens": 6,
                "num_actual_tokens": 6,
                "max_query_len": 4,
                "decode_threshold": 4,
            },
            "num_actual_tokens = 6 of a CUDA-graph padded batch is not a multiple of decode_threshold 4",
        ),
        (
            {
                "query_start_loc": np.array([0, 2, 2], np.int32),
                "seq_lens": np.array([5, 0], np.int32),
                "seq_lens_cpu_upper_bound": np.array([5, 0], np.int32),
                "num_decodes": 2,
                "num_decode_tokens": 8,
                "num_actual_tokens": 8,
                "max_query_len": 2,
                "decode_threshold": 4,
            },
            "only a uniform decode batch (every query_len == decode_threshold 4, at least one request) is padded",
        ),
        # A mixed batch runs a PIECEWISE graph: its attention metadata is not padded.
        (
            {
                "query_start_loc": np.array([0, 2, 2], np.int32),
                "seq_lens": np.array([5, 0], np.int32),
                "seq_lens_cpu_upper_bound": np.array([5, 0], np.int32),
                "num_decodes": 0,
                "num_decode_tokens": 0,
                "num_prefills": 2,
                "num_actual_tokens": 2,
                "max_query_len": 2,
            },
            "only a uniform decode batch (every query_len == decode_threshold 1, at least one request)",
        ),
        (
            {
                "query_start_loc": np.array([0, 0, 0], np.int32),
                "seq_lens": np.array([0, 0], np.int32),
                "seq_lens_cpu_upper_bound": np.array([0, 0], np.int32),
                "num_decodes": 2,
                "num_decode_tokens": 2,
                "num_actual_tokens": 2,
                "max_query_len": 0,
            },
            "only a uniform decode batch (every query_len == decode_threshold 1, at least one request)",
        ),
        # The split of a padded batch counts the pad tokens as decode tokens (split_decodes_and_prefills).
        ({"num_decode_tokens": 1}, "num_decode_tokens=1 disagrees with the split derived from query_lens [1, 0, 0]"),
        ({"num_decodes": 1}, "num_decodes=1 disagrees with the split derived from query_lens [1, 0, 0]"),
    ],
)
def test_validator_refuses_padding_the_runner_does_not_make(fields, message):
    with pytest.raises(InvalidBatch) as info:
        validate_batch(padded_batch(**fields), 8)
    assert message in str(info.value)


def test_cudagraph_pad_builds_the_runners_padded_batch():
    """make_batch(cudagraph_pad=N) appends N // threshold - n pad requests (query_len 0,
    seq_len 0, bound 0); num_actual_tokens is N and the split counts N decode tokens."""
    batch = make_batch([1, 1], [7, 9], cudagraph_pad=5)
    assert batch.query_start_loc.tolist() == [0, 1, 2, 2, 2, 2]
    assert batch.seq_lens.tolist() == [7, 9, 0, 0, 0]
    assert batch.seq_lens_cpu_upper_bound.tolist() == [7, 9, 0, 0, 0]
    assert (batch.num_actual_tokens, batch.num_scheduled_tokens, batch.num_reqs) == (5, 2, 5)
    assert (batch.num_decodes, batch.num_decode_tokens, batch.num_prefills, batch.max_query_len) == (5, 5, 0, 1)
    assert batch.is_pure_decode and batch.is_cudagraph_padded and batch.num_pad_requests == 3
    spec = make_batch([4, 4], [4, 9], decode_threshold=4, upper_bound=[6, 9], cudagraph_pad=16)
    assert spec.query_start_loc.tolist() == [0, 4, 8, 8, 8]
    assert spec.seq_lens_cpu_upper_bound.tolist() == [6, 9, 0, 0]
    assert (spec.num_actual_tokens, spec.num_decodes, spec.num_decode_tokens, spec.max_query_len) == (16, 4, 16, 4)
    assert not spec.is_pure_decode
    assert repr(spec) == (
        "make_batch(query_lens=[4, 4], seq_lens=[4, 9], decode_threshold=4, upper_bound=[6, 9], cudagraph_pad=16)"
    )
    assert eval(repr(spec), {"make_batch": make_batch}) == spec
    unpadded = make_batch([1], [3], cudagraph_pad=1)  # the graph size equals the batch
    assert unpadded.num_actual_tokens == 1 and not unpadded.is_cudagraph_padded


@pytest.mark.parametrize(
    "query_lens, seq_lens, kwargs, message",
    [
        ([1, 2], [5, 5], {"cudagraph_pad": 4}, "only a uniform decode batch (every query_len == decode_threshold 1"),
        ([], [], {"cudagraph_pad": 2}, "at least one request) runs a FULL CUDA graph"),
        ([4, 1], [5, 5], {"decode_threshold": 4, "cudagraph_pad": 8}, "query_lens [4, 1]"),
        ([1, 1], [5, 5], {"cudagraph_pad": 1}, "cudagraph_pad=1 must be a graph size >= the 2 scheduled tokens"),
        ([4], [5], {"decode_threshold": 4, "cudagraph_pad": 6}, "and a multiple of decode_threshold 4"),
        ([1], [5], {"cudagraph_pad": True}, "cudagraph_pad must be an int"),
        ([3], [0], {"decode_threshold": 3}, "only a CUDA-graph pad request (query_len 0, after the real ones)"),
        ([0, 1], [0, 5], {}, "request 1 (query_len 1) comes after the CUDA-graph pad request 0"),
        ([1, 1], [5, 5], {"upper_bound": [5]}, "upper_bound has 1 entries but there are 2 requests"),
    ],
)
def test_make_batch_refuses_padding_the_runner_does_not_make(query_lens, seq_lens, kwargs, message):
    with pytest.raises(InvalidBatch) as info:
        make_batch(query_lens, seq_lens, **kwargs)
    assert message in str(info.value)


def test_split_is_derived_not_given():
    """The split cannot be set by hand: make_batch has no override, and an
    override of a Batch's field that disagrees with the derived split is named."""
    batch = make_batch([1, 1, 1, 1], [5, 64, 65, 3000])
    with pytest.raises(TypeError, match="num_decode_tokens"):
        make_batch([1, 1, 1, 1], [5, 64, 65, 3000], num_decode_tokens=3)
    for name, value, derived in (
        ("num_decodes", 3, 4),
        ("num_decode_tokens", 3, 4),
        ("num_prefills", 1, 0),
        ("max_query_len", 2, 1),
    ):
        with pytest.raises(InvalidBatch) as info:
            validate_batch(dataclasses.replace(batch, **{name: value}), 8)
        assert str(info.value) == (
            f"{name}={value} disagrees with the split derived from query_lens [1, 1, 1, 1] "
            f"at decode_threshold 1 ({derived})"
        )


@pytest.mark.parametrize(
    "query_lens, threshold, message",
    [
        (
            [5, 1],
            1,
            "query_lens [5, 1] is not reordered (decodes first, as vLLM's batch reordering puts them): "
            "request 1 (query_len 1 <= decode_threshold 1) is a decode after the prefill request 0 (query_len 5)",
        ),
        ([1, 2, 1], 1, "request 2 (query_len 1 <= decode_threshold 1) is a decode after the prefill request 1"),
        ([4, 5, 3], 4, "request 2 (query_len 3 <= decode_threshold 4) is a decode after the prefill request 1"),
        ([3, 0], 2, "request 1 (query_len 0 <= decode_threshold 2) is a decode after the prefill request 0"),
    ],
)
def test_batch_not_reordered_is_rejected(query_lens, threshold, message):
    with pytest.raises(InvalidBatch) as info:
        make_batch(query_lens, [9] * len(query_lens), decode_threshold=threshold)
    assert message in str(info.value)
    assert str(info.value).startswith("query_lens ")


@pytest.mark.parametrize("speculative, threshold", [(False, 1 + NUM_SPECULATIVE_TOKENS), (True, 1), (True, 2)])
def test_threshold_must_be_the_configs(speculative, threshold):
    """vLLM splits every batch at the config's threshold: a batch split at another is refused."""
    config = new_config("cpu", 8, 4, speculative=speculative)
    batch = make_batch([1, 1], [5, 6], decode_threshold=threshold)
    builder = load_subject("reference").make_builder(config)
    with pytest.raises(InvalidBatch) as info:
        run_step(builder, batch, config)
    assert (
        f"decode_threshold {threshold} of the batch differs from the builder config's decode_threshold "
        f"{config.decode_threshold} (speculative={speculative})"
    ) in str(info.value)
    with pytest.raises(InvalidBatch, match=f"decode_threshold {threshold} of the batch differs"):
        Case("multi_token_decode", 4, 8, batch, speculative)


def test_speculative_config_threshold():
    assert NUM_SPECULATIVE_TOKENS == 3
    assert new_config("cpu", 8, 4).decode_threshold == 1
    assert new_config("cpu", 8, 4, speculative=True).decode_threshold == 1 + NUM_SPECULATIVE_TOKENS


def test_make_batch_rejects_bad_lists():
    with pytest.raises(InvalidBatch, match="query_lens has 2 requests but seq_lens has 1"):
        make_batch([1, 1], [4])
    with pytest.raises(InvalidBatch, match="seq_lens has a negative entry"):
        make_batch([1], [-1])
    with pytest.raises(InvalidBatch, match="above int32 max"):
        make_batch([1], [2**31])


def test_batch_repr_rebuilds_the_batch():
    batch = make_batch([1, 3], [4, 9], upper_bound=[5, 9], decode_threshold=4)
    rebuilt = eval(repr(batch), {"make_batch": make_batch})
    assert rebuilt == batch
    assert rebuilt.seq_lens_cpu_upper_bound.tolist() == [5, 9]
    assert (rebuilt.decode_threshold, rebuilt.num_decodes, rebuilt.num_decode_tokens) == (4, 2, 4)
    assert (rebuilt.num_prefills, rebuilt.max_query_len) == (0, 3)


def test_strategies_only_make_valid_batches():
    from hypothesis import given, settings

    @settings(max_examples=200, database=None)
    @given(case=cases())
    def check(case):
        validate_batch(case.batch, case.max_num_batched_tokens)
        assert case.batch.num_actual_tokens <= case.max_num_batched_tokens
        assert case.batch.decode_threshold == (1 + NUM_SPECULATIVE_TOKENS if case.speculative else 1)

    check()


def test_unknown_subject_lists_the_known_ones():
    with pytest.raises(SubjectError, match=r"unknown subject 'nope'; known subjects: .*reference"):
        load_subject("nope")


def test_external_subject_errors_name_the_problem():
    with pytest.raises(SubjectError, match="cannot import module 'no_such_module_x'"):
        load_subject("no_such_module_x:thing")
    with pytest.raises(SubjectError, match="has no attribute 'missing'"):
        load_subject("fixtures.subjects.mutants:missing")
    with pytest.raises(SubjectError, match="missing name, capabilities, make_builder"):
        load_subject("fixtures.inputs.batches:InvalidBatch")


def test_external_subject_with_unknown_capability():
    with pytest.raises(SubjectError, match="unknown capabilities"):
        from fixtures.subjects import check_subject

        class Odd:
            name = "odd"
            capabilities = frozenset({"teleport"})

            def make_builder(self, config): ...

            def sparse_seqlen(self, batch, topk, out): ...

        check_subject(Odd(), "odd")


def test_cli_rejects_unknown_subject(run_suite_in):
    run = run_suite_in("--subject=nope", repo("tests/oracles"))
    assert run.ret == 4, run.out
    assert "unknown subject 'nope'; known subjects: reference" in run.out


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the error raised where no GPU exists")
def test_cli_rejects_cuda_without_gpu(run_suite_in):
    run = run_suite_in("--device=cuda", repo("tests/oracles"))
    assert run.ret == 4, run.out
    assert "--device cuda was requested but torch sees no GPU" in run.out


def test_cli_rejects_missing_required_capability(run_suite_in):
    run = run_suite_in("--require=teleport", repo("tests/oracles"))
    assert run.ret == 4, run.out
    assert "unknown capabilities ['teleport']" in run.out


def _overlay_of_the_release(tmp_path, edit):
    """An overlay folder holding the installed release's backend file with ``edit`` applied.

    vLLM is never imported in this process (pytester drops the modules a test imported, and torch's
    operator libraries refuse to register twice): only its installed file is read."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        pytest.skip("needs vLLM installed (tox -e vllm)")
    from fixtures.subjects.vllm.loading.imports import write_overlay
    from fixtures.subjects.vllm_rocm_aiter_sparse.backend import BACKEND

    return write_overlay(tmp_path / "overlay", {BACKEND: edit}) / (BACKEND.replace(".", "/") + ".py")


def _broken_overlay_run(run_suite_in, tmp_path):
    overlay = tmp_path / "overlay"
    return run_suite_in("--co", "--subject=vllm", f"--vllm-overlay={overlay}", repo("tests/differential"))


def test_cli_rejects_an_overlay_with_a_syntax_error(run_suite_in, tmp_path):
    broken = []

    def edit(text):
        # the first top-level def or class from line 100 on, so the error is reported on that very line
        lines = text.splitlines()
        at = next(i for i in range(99, len(lines)) if lines[i].startswith(("def ", "class ")))
        broken.append(at + 1)
        lines[at] = "def ("
        return "\n".join(lines) + "\n"

    path = _overlay_of_the_release(tmp_path, edit)
    run = _broken_overlay_run(run_suite_in, tmp_path)
    assert run.ret == 4, run.out
    assert f"{path}:{broken[0]}: SyntaxError" in run.out, run.out[-3000:]
    assert "INTERNALERROR" not in run.out


def test_cli_rejects_an_overlay_whose_builder_class_was_renamed(run_suite_in, tmp_path):
    from fixtures.subjects.vllm_rocm_aiter_sparse.backend import BUILDER

    path = _overlay_of_the_release(tmp_path, lambda text: text.replace(f"class {BUILDER}(", f"class {BUILDER}V2("))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if f"class {BUILDER}V2(" in text)
    run = _broken_overlay_run(run_suite_in, tmp_path)
    assert run.ret == 4, run.out
    assert f"{path} defines no {BUILDER!r}" in run.out, run.out[-3000:]
    assert f"it defines '{BUILDER}V2' at {path}:{line}" in run.out
    assert "INTERNALERROR" not in run.out


def test_names_that_moved_to_the_protocol_still_import_with_a_deprecation_warning():
    import fixtures.protocol as protocol
    import fixtures.subjects as subjects

    for name in ("StepResult", "ForwardResult"):
        with pytest.warns(DeprecationWarning, match=f"fixtures.protocol.{name}"):
            assert getattr(subjects, name) is getattr(protocol, name)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        subjects.NoSuchName  # noqa: B018
