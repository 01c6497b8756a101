"""The NoPE machinery itself: shaped guarded buffers, config validation, layouts, the attention hook."""

import pytest
import torch

from fixtures.harness.forward import run_forward
from fixtures.inputs.forward_cases import LAYOUTS, ForwardCase, build_inputs, lay_out
from fixtures.models.attention import DownstreamAttention
from fixtures.models.runtime import GuardedAllocator, GuardViolation
from fixtures.protocol import NOPE_FORWARD, ForwardConfig, ForwardMetadata, ForwardResult, SubjectError
from fixtures.subjects import check_subject


def test_shaped_buffer_is_a_dense_view_with_a_guard_after_its_last_element():
    alloc = GuardedAllocator("cpu")
    buf = alloc.zeros("q_concat_buffer", (3, 2, 4), torch.bfloat16)
    assert buf.shape == (3, 2, 4) and buf.is_contiguous() and buf.dtype == torch.bfloat16
    buf.fill_(1.0)  # every element of the buffer itself may be written
    alloc.check()
    past_end = torch.as_strided(buf, (1,), (1,), buf.storage_offset() + buf.numel())
    past_end.fill_(0.0)
    with pytest.raises(GuardViolation, match=r"q_concat_buffer: wrote past its end \(length 24\); guard element 0"):
        alloc.check()


def layer(**kw):
    base = dict(max_num_batched_tokens=4, num_heads=2, kv_lora_rank=8, qk_rope_head_dim=0)
    return ForwardConfig(**{**base, **kw}, model_dtype=torch.bfloat16, device="cpu", allocator=GuardedAllocator("cpu"))


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(max_num_batched_tokens=0), "max_num_batched_tokens"),
        (dict(num_heads=0), "num_heads=0"),
        (dict(qk_rope_head_dim=-1), "qk_rope_head_dim=-1"),
        (dict(kv_cache_dtype="int4"), "kv_cache_dtype"),
    ],
)
def test_forward_config_names_the_bad_field(fields, message):
    with pytest.raises(ValueError, match=message):
        layer(**fields)


def test_nope_forward_capability_needs_make_forward():
    class NoForward:
        name = "no_forward"
        capabilities = frozenset({NOPE_FORWARD})

        def make_builder(self, config):
            raise NotImplementedError

    with pytest.raises(SubjectError, match="missing make_forward"):
        check_subject(NoForward(), "no_forward")


def test_downstream_attention_rejects_a_query_of_another_head_size():
    cfg = layer(qk_rope_head_dim=4)
    attention = DownstreamAttention(cfg)
    md = ForwardMetadata(torch.zeros(2, dtype=torch.int32), torch.zeros(0, dtype=torch.int32), 1)
    with pytest.raises(AssertionError, match=r"is \(1, 2, 8\); the layer's is \[T, 2, 12\]"):
        attention(torch.zeros(1, 2, 8, dtype=torch.bfloat16), torch.zeros(3, 1, 12, dtype=torch.bfloat16), md)


# Whether each layout of a [3, 2, 4] query is contiguous, worked out from its construction.
LAYOUT_CONTIGUOUS = {
    "contiguous": True,
    "bmm_transposed": False,
    "bmm": False,
    "bmm_into_buffer": True,
    "row_slice": True,
    "head_slice": False,
    "lora_slice": False,
    "last_stride_2": False,
    "expand_tokens": False,
    "expand_heads": False,
}


@pytest.mark.parametrize("offset", [0, 1, 7])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts_hold_the_values_at_the_offset_with_the_claimed_contiguity(layout, offset):
    values = torch.arange(24, dtype=torch.float32).view(3, 2, 4)
    t = lay_out(values, layout, offset)
    assert t.shape == (3, 2, 4) and t.is_contiguous() is LAYOUT_CONTIGUOUS[layout]
    if layout == "expand_tokens":
        expected = values[:1].expand(3, 2, 4)
    elif layout == "expand_heads":
        expected = values[:, :1].expand(3, 2, 4)
    else:
        expected = values
    assert torch.equal(t, expected)
    assert t.storage_offset() >= (0 if layout == "bmm" else offset)
    if layout in ("contiguous", "bmm_transposed", "bmm_into_buffer", "expand_tokens", "expand_heads"):
        assert t.storage_offset() == offset


class _Bufferless:
    """A forward without ``q_concat_buffer`` (protocol 7) that hands ``handed`` queries downstream per
    call and reports ``path``."""

    q_concat_buffer = None

    def __init__(self, config, handed: int, path):
        self.config, self.handed, self.path = config, handed, path

    def forward_mqa(self, q, kv_cache, metadata):
        ql_nope, q_pe = q
        out = torch.zeros(ql_nope.shape[0], self.config.num_heads, self.config.kv_lora_rank)
        for _ in range(self.handed):
            out = self.config.attention(torch.cat(q, dim=-1), kv_cache, metadata)
        return ForwardResult(out, self.path)


@pytest.mark.parametrize(
    "t, handed, path, error",
    [
        (0, 0, None, None),  # nothing to attend: a forward may hand nothing
        (0, 1, "copy", None),
        (2, 0, None, "exactly once; it did 0 times"),  # tokens, but no call
        (0, 0, "copy", "handed nothing downstream but reports the 'copy' path"),
        (2, 2, "copy", "exactly once; it did 2 times"),
    ],
)
def test_a_forward_hands_its_query_downstream_once_or_not_at_all_without_tokens(t, handed, path, error):
    c = ForwardCase(4, t, t, num_heads=2, kv_lora_rank=4, qk_rope_head_dim=0, model_dtype=torch.float32,
                    ql_dtype=torch.float32)  # fmt: skip
    config = ForwardConfig(4, 2, 4, 0, torch.float32, "cpu", allocator=GuardedAllocator(torch.device("cpu")))
    config.attention = DownstreamAttention(config)
    inputs = build_inputs(c, torch.device("cpu"))
    forward = _Bufferless(config, handed, path)
    if error is None:
        run = run_forward(config, forward, inputs.ql_nope, inputs)
        assert (run.call is None) == (handed == 0)
    else:
        with pytest.raises(AssertionError, match=error):
            run_forward(config, forward, inputs.ql_nope, inputs)
