"""The builder state machine: one builder driven through a program of build steps.

A plain-Python model holds what every persistent buffer must contain after
each step (the whole buffers: ``req_id_per_token`` past the batch is zero
again, all ``M + 1`` entries of ``paged_kv_indptr``), and the path each step
must take comes from the legality oracle.  The model is
:func:`oracles.step.expected_state` of the step's batch and path;
only the entries the contract fixes are compared (on a device-path step of a
CUDA-graph padded batch, the pad tokens' ``req_id_per_token`` is not).  Every step runs through
:func:`fixtures.harness.step.run_step` (input validation, Triton launch count,
guard bands).

Two runtimes drive the same machine:

* :class:`EagerBuilderMachine`: the device's own runtime (:func:`runtime_for`:
  eager on CPU; on a GPU the real stream, where reading the buffers
  synchronises).  The invariant compares the live persistent buffers.
* :class:`StreamModelBuilderMachine`: the stream model of
  :mod:`fixtures.models.stream_model` stands in for a GPU stream on CPU.  After each
  step a consumer (a stand-in for the attention kernel that reads the
  metadata) is queued on the model stream; it snapshots the buffers when the
  model device gets to it, and every snapshot is compared with the model of
  its step: as they execute (invariant) and at the end, after the stream is
  synchronised (teardown).  The pending-read guard of the model raises as
  soon as a queued copy finds its source rewritten by the host.
"""

from __future__ import annotations

from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fixtures.harness.compare import compare_state, host_int32
from fixtures.harness.step import check_seqlen_launches, new_config, run_step
from fixtures.inputs.batches import INT32_MAX, make_batch
from fixtures.inputs.steps import (
    STEP_TOPKS,
    clause_toggled_decode,
    mixed,
    multi_token_decode,
    overstated_bound_decode,
    padded_decode,
    prefill_only,
    pure_decode,
)
from fixtures.models.runtime import runtime_for
from fixtures.models.stream_model import OnModelDevice, StreamModelRuntime
from fixtures.models.writes import BufferWrites
from fixtures.plugin.profiles import STATEFUL_STEPS, sized
from fixtures.protocol import HOST_PATH, decode_threshold_for
from oracles.step import ReqIdExtent, expected_path, expected_state

M = 6  # max_num_batched_tokens of a machine: small grids, n == M reachable
SPEC = decode_threshold_for(True)  # the decode threshold of a speculative config
# max_num_batched_tokens under a speculative config: a uniform speculative decode
# (SPEC tokens a request) padded for a FULL CUDA graph needs graph sizes 2 * SPEC
# and 3 * SPEC to have pad requests (1 or 2 real requests, 1 or 2 pads).
M_SPEC = 3 * SPEC
# Builder configs: mostly one that may take the host path (the stateful part);
# a speculative config or no pinned memory takes the device path on every step.
CONFIG_KINDS = ("host_capable",) * 6 + ("speculative", "no_pinned_memory")


# Every batch is split at the decode threshold of the builder's config, as vLLM
# splits it: the rules that draw a batch come in pairs, one per threshold.
def at_threshold_one(self) -> bool:
    return self.builder is not None and not self.speculative


def at_speculative_threshold(self) -> bool:
    return self.builder is not None and self.speculative


def machine_for(kind: type, subject, device) -> type:
    """``kind`` (a :class:`BuilderMachine`) bound to the run's subject and device: a subclass of the
    same name, so a failing program still prints as ``state = <kind>()``."""
    return type(kind.__name__, (kind,), {"subject": subject, "device": device, "__module__": kind.__module__})


def machine_settings() -> settings:
    """The loaded profile with the machines' own size (``fixtures.plugin.profiles.SIZES["stateful"]``)."""
    return sized("stateful", stateful_step_count=STATEFUL_STEPS, report_multiple_bugs=False)


class BuilderMachine(RuleBasedStateMachine):
    """Rules are build steps; the model is ``self.expected`` (see module doc).  Run a subclass made
    by :func:`machine_for`, which sets the subject and device."""

    subject = device = None

    def __init__(self):
        super().__init__()
        self.builder = None
        self.steps = 0
        self.failed = False
        self.last_decode = None  # seq_lens of the last pure-decode step

    # ----- setup ---------------------------------------------------------
    def make_runtime(self, device, pin_memory: bool):
        return runtime_for(device, pin_memory=pin_memory)  # the device's own runtime

    @initialize(topk=st.sampled_from(STEP_TOPKS), config=st.sampled_from(CONFIG_KINDS))
    def configure(self, topk, config):
        """A builder config's speculative flag and pinned memory are fixed per builder."""
        subject, device = self.subject, self.device
        if subject is None:
            raise RuntimeError(f"{type(self).__name__} runs as machine_for({type(self).__name__}, subject, device)")
        self.pin_memory = config != "no_pinned_memory" and HOST_PATH in subject.capabilities
        self.speculative = config == "speculative"
        self.topk = topk
        self.m = M_SPEC if self.speculative else M
        self.runtime = self.make_runtime(device, self.pin_memory)
        self.config = new_config(
            device, self.m, topk, speculative=self.speculative, pin_memory=self.pin_memory, runtime=self.runtime
        )
        self.subject = subject
        self.builder = subject.make_builder(self.config)

    # ----- one step -------------------------------------------------------
    def step(self, batch) -> None:
        try:
            self._step(batch)
        except BaseException:
            self.failed = True  # teardown adds no second failure to this one
            raise

    def _step(self, batch) -> None:
        self.steps += 1
        self.before_step()
        expected_route = expected_path(batch, speculative=self.speculative, pin_memory=self.pin_memory)
        observed = self.run(batch)
        path = observed.result.path
        note(f"step {self.steps}: {batch!r} took the {path} path; Triton launches {dict(observed.launches)}")
        assert path == expected_route, (
            f"step {self.steps}: took the {path} path; the legality oracle says {expected_route} "
            f"(speculative={self.speculative}, pin_memory={self.pin_memory})"
        )
        check_seqlen_launches(self.subject, observed, batch, f"step {self.steps}")
        self.expected = expected_state(batch, expected_route, self.topk, self.m)
        self.after_step(batch)

    def run(self, batch):
        return run_step(self.builder, batch, self.config, self.subject)

    def before_step(self) -> None:
        pass

    def after_step(self, batch) -> None:
        pass

    # ----- rules: the kinds of step -----------------------------------------
    # A rule and its speculative_ twin differ only in the threshold their
    # batches are split at (1, or 1 + NUM_SPECULATIVE_TOKENS): see at_threshold_one.
    def decode_step(self, batch) -> None:
        self.step(batch)
        self.last_decode = batch.seq_lens.tolist()

    @precondition(at_threshold_one)
    @rule(batch=pure_decode(M))
    def decode(self, batch):
        self.decode_step(batch)

    @precondition(at_speculative_threshold)
    @rule(batch=pure_decode(M_SPEC, decode_threshold=SPEC))
    def speculative_decode(self, batch):
        self.decode_step(batch)

    def continue_decode(self, n: int, how: str) -> None:
        """The next decode step of the running requests: each context grows by
        one token; requests past the first ``n`` finish, new ones join."""
        prev = self.last_decode
        seqs = [min(s + 1, INT32_MAX) for s in prev[:n]] + list(range(1, n - len(prev) + 1))
        batch = make_batch([1] * n, seqs, decode_threshold=self.config.decode_threshold)
        note(f"{how}: {batch!r}")
        self.step(batch)
        self.last_decode = seqs

    @precondition(lambda self: self.last_decode is not None and len(self.last_decode) < self.m)
    @rule(joining=st.integers(1, M))
    def decode_grow(self, joining):
        self.continue_decode(min(len(self.last_decode) + joining, self.m), f"decode_grow(joining={joining})")

    @precondition(lambda self: self.last_decode)
    @rule(finishing=st.integers(1, M))
    def decode_shrink(self, finishing):
        self.continue_decode(max(len(self.last_decode) - finishing, 0), f"decode_shrink(finishing={finishing})")

    @precondition(lambda self: self.last_decode is not None)
    @rule()
    def decode_keep(self):
        self.continue_decode(len(self.last_decode), "decode_keep()")

    @precondition(at_threshold_one)
    @rule(batch=padded_decode(M))
    def padded(self, batch):
        """A pure-decode batch padded for a FULL CUDA graph (pad requests of
        query_len 0 and seq_len 0, pad tokens past query_start_loc[-1]): the
        host path, whose req_id_per_token[:n] is 0..n-1."""
        self.step(batch)

    @precondition(at_speculative_threshold)
    @rule(batch=padded_decode(M_SPEC, decode_threshold=SPEC))
    def speculative_padded(self, batch):
        """A uniform speculative decode (SPEC tokens a request) padded for a FULL
        CUDA graph: the device path."""
        self.step(batch)

    @precondition(at_threshold_one)
    @rule(batch=st.one_of(mixed(M), prefill_only(M), clause_toggled_decode(M)))
    def non_decode(self, batch):
        """A mixed or prefill-only step, or a pure-decode batch with host-path
        clauses switched off the way a scheduler can (a prefill, the empty
        batch, no upper bound): never the host path.  One rule for all of them
        keeps device-path steps (a Triton launch each, slow in the
        interpreter) to about a quarter of the steps."""
        self.step(batch)

    @precondition(at_speculative_threshold)
    @rule(
        batch=st.one_of(
            mixed(M_SPEC, decode_threshold=SPEC),
            prefill_only(M_SPEC, decode_threshold=SPEC),
            multi_token_decode(M_SPEC),
        )
    )
    def speculative_non_decode(self, batch):
        """Under a speculative config: a mixed or prefill-only step (prefills
        longer than the threshold) or multi-token decodes (query lengths up to
        1 + NUM_SPECULATIVE_TOKENS)."""
        self.step(batch)

    @precondition(at_speculative_threshold)
    @rule(batch=overstated_bound_decode(M_SPEC))
    def async_speculative_decode(self, batch):
        """Only a speculative config sees an overstated seq_lens_cpu_upper_bound."""
        self.step(batch)


class EagerBuilderMachine(BuilderMachine):
    """Also checks the work a step does, not only what it leaves: the writes into
    ``req_id_per_token`` (:mod:`fixtures.models.writes`) follow :class:`oracles.step.ReqIdExtent`,
    so a pure-decode step that does not grow the batch uploads nothing there."""

    @initialize(topk=st.sampled_from(STEP_TOPKS), config=st.sampled_from(CONFIG_KINDS))
    def configure(self, topk, config):
        super().configure(topk, config)
        self.extent = ReqIdExtent()

    def run(self, batch):
        watched = {"req_id_per_token": self.builder.buffers()["req_id_per_token"]}
        with BufferWrites(watched) as writes:
            observed = super().run(batch)
        n = batch.num_actual_tokens
        if not self.extent.step(n, observed.result.path):
            found = writes.into("req_id_per_token", 0, n)
            assert not found, (
                f"step {self.steps}: req_id_per_token[:{n}] was written ({found}) on a host-path step whose "
                f"{n} tokens do not exceed the extent already holding 0..{self.extent.extent - 1}: the change "
                "rewrites it only when the decode batch grows past that extent"
            )
        return observed

    @precondition(lambda self: self.steps > 0)
    @invariant()
    def persistent_buffers_match_model(self):
        compare_state(self.builder.buffers(), self.expected, f"after step {self.steps}")


class StreamModelBuilderMachine(BuilderMachine):
    """The machine on the stream model (a stand-in for a GPU stream, on CPU)."""

    def make_runtime(self, device, pin_memory):
        return StreamModelRuntime(device, pin_memory=pin_memory)

    @initialize(topk=st.sampled_from(STEP_TOPKS), config=st.sampled_from(CONFIG_KINDS))
    def configure(self, topk, config):
        super().configure(topk, config)
        self.builder = OnModelDevice(self.builder, self.runtime)
        self.consumed = []  # (step, snapshot, expected), appended by the consumers
        self.checked = 0

    def before_step(self):
        self.runtime.step = self.steps

    def after_step(self, batch):
        step, expected, buffers, alloc = self.steps, self.expected, self.builder.buffers(), self.config.allocator

        def attention_consumer():
            """Stand-in for the attention kernel: reads the metadata in stream order."""
            self.consumed.append((step, {k: v.clone() for k, v in buffers.items()}, expected))
            alloc.check()

        self.runtime.enqueue(f"consumer of step {step}", attention_consumer)

    def check_consumed(self):
        for step, snapshot, expected in self.consumed[self.checked :]:
            compare_state(snapshot, expected, f"as the consumer of step {step} read them")
            self.checked += 1

    @precondition(lambda self: self.steps > 0)
    @invariant()
    def consumers_read_model_buffers(self):
        try:
            self.check_consumed()
        except BaseException:
            self.failed = True
            raise

    def teardown(self):
        if self.builder is None or self.failed:
            return
        self.runtime.synchronize()
        self.check_consumed()
        assert self.checked == self.steps, f"{self.checked} consumers ran for {self.steps} steps"
        if self.steps:
            final = {k: host_int32(v) for k, v in self.builder.buffers().items()}
            compare_state(final, self.expected, "after the stream was synchronised")
