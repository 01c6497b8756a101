"""The change's performance contract: what a build step may launch, copy and wait for.

Each function checks one clause of docs/performance.md against a step's
:class:`fixtures.models.ledger.Ledger` and returns the problem in words, or
``None`` when the clause holds.  The clauses:

host path (a pure-decode step that takes it)
    * no kernel launch, except the shrink-tail zeroing that the host and the
      device path share (a ``fill_`` of the tail of ``req_id_per_token`` or
      ``paged_kv_indices``, only on a step with fewer tokens than the one
      before);
    * exactly one host-to-device copy: into ``paged_kv_indptr``, from pinned
      memory, non-blocking;
    * one device-to-device copy into ``req_id_per_token`` on a step where the
      decode batch grows past what the buffer already holds
      (:class:`oracles.step.ReqIdExtent`), none otherwise, and no other
      device-to-device copy;
    * no sync: no device-to-host read, no stream synchronisation and no
      blocking host-to-device copy (``non_blocking=False``, or a source in
      pageable memory, which the runtime makes blocking);
    * at most one event wait, issued before the upload (the pinned buffer is
      rewritten between the two);
    * its device work does not grow with the batch: two host-path steps that
      differ only in ``n`` issue the same operations.

device path (every other step)
    * every non-blocking host-to-device copy reads pinned memory;
    * no sync (a device-to-host read, a stream synchronisation, a blocking
      host-to-device copy) outside vLLM's ``gpu_sync_allowed`` regions.

AITER's persistent work metadata (vLLM's ROCm builder, a layer without sinks on
AITER's ASM decode: the release's block, run by both paths, not the change's)
    * its operations (:func:`persistent_block`: the read back of the step's
      ``seq_lens`` inside ``gpu_sync_allowed``, AITER's ``get_mla_metadata_v1``,
      the stream synchronisation after it) are judged by their own clauses,
      and the clauses above by the rest of the step (:func:`shared_work`);
    * a rebuild is finished before anything can read it: a stream
      synchronisation follows it in the step (vLLM PR 47404);
    * a step on the very batch of the step before rebuilds nothing and waits
      for nothing (the cache key exists to skip it).

Each problem names the operations that break the clause, each with the
subject's source line that issued it.

The change's claim, checked as a floor on the saving per pure-decode step
against the release's device path on the same batch: :data:`CLAIMED_SAVING`.

A ledger here is anything with ``ops`` (entries with ``kind``, ``what``,
``buffer``, ``pinned``, ``blocking``, ``sync_allowed``, ``is_sync``) and
``of(kind)``: the type lives in ``fixtures/models/ledger.py``, a layer above
the oracles.
"""

from __future__ import annotations

import copy

SHRINK_TAIL_BUFFERS = ("req_id_per_token", "paged_kv_indices")
INDPTR = "paged_kv_indptr"
REQ_ID = "req_id_per_token"

# "each pure-decode step saves about 3 kernel launches (the seqlen kernel, the
# device cumsum, the tail fill) and 1 host-to-device copy (the per-step upload
# of req_id_per_token)"; a tail fill that is a device-to-device copy counts as
# the launch it is.  The copy is checked item by item, not as a net count: the
# host path's clauses above forbid any upload into req_id_per_token, and its
# one upload (paged_kv_indptr) replaces it, so the net count of host-to-device
# copies saved is 0 (docs/performance.md).
CLAIMED_SAVING = {"launches": 3}


def launches(ledger) -> list:
    """Kernels: launches and device-to-device copies (a copy kernel)."""
    return [op for op in ledger.ops if op.kind in ("launch", "d2d")]


def host_launches(ledger, shrank: bool) -> str | None:
    extra = [
        op for op in ledger.of("launch") if not (shrank and op.what == "fill_" and op.buffer in SHRINK_TAIL_BUFFERS)
    ]
    if extra:
        return f"the host path launched {len(extra)} kernel(s): {', '.join(map(str, extra))}"
    zeroing = [op for op in ledger.of("launch") if op not in extra]
    if len(zeroing) > len(SHRINK_TAIL_BUFFERS) or len({op.buffer for op in zeroing}) < len(zeroing):
        return f"the shrink-tail zeroing launched more than one fill per buffer: {', '.join(map(str, zeroing))}"
    return None


def host_upload(ledger) -> str | None:
    uploads = ledger.of("h2d")
    if len(uploads) != 1:
        return f"the host path made {len(uploads)} host-to-device copies; exactly one (of {INDPTR}) is allowed"
    (up,) = uploads
    if up.buffer != INDPTR:
        return f"the host path's upload went into {up.target}, not {INDPTR}"
    if not up.pinned:
        return f"the upload of {INDPTR} reads pageable memory (a non-blocking copy from it blocks the host)"
    if up.blocking:
        return f"the upload of {INDPTR} is blocking"
    return None


def host_req_id_copy(ledger, may_copy: bool) -> str | None:
    copies = ledger.of("d2d")
    into_req_id = [op for op in copies if op.buffer == REQ_ID]
    others = [op for op in copies if op.buffer != REQ_ID]
    if others:
        return f"the host path made device-to-device copies into other buffers: {', '.join(map(str, others))}"
    if len(into_req_id) > (1 if may_copy else 0):
        why = "the step grows the decode batch: one copy" if may_copy else "the batch did not grow past its extent"
        return f"{len(into_req_id)} copies into {REQ_ID} ({why} is allowed)"
    if may_copy and not into_req_id:
        return f"the decode batch grew past its extent but {REQ_ID} was not copied"
    return None


def syncs(ledger) -> list:
    """The operations the host waits for: reads back, stream synchronisations, blocking copies to the device."""
    return [op for op in ledger.ops if op.is_sync]


def host_no_sync(ledger) -> str | None:
    found = syncs(ledger)
    if found:
        return f"the host path waited for the device: {', '.join(map(str, found))}"
    return None


def host_wait(ledger) -> str | None:
    waits = ledger.of("event_wait")
    if len(waits) > 1:
        return f"the host path waited on {len(waits)} events; at most one wait is allowed"
    uploads = [i for i, op in enumerate(ledger.ops) if op.kind == "h2d"]
    if waits and uploads:
        at = ledger.ops.index(waits[0])
        if at > uploads[0]:
            return "the host path waited on its event after the upload, not before rewriting the pinned buffer"
    return None


def host_step_problems(ledger, shrank: bool, may_copy: bool, persistent: bool = False) -> dict[str, str]:
    """Every per-step clause of the host path that ``ledger`` breaks: clause -> problem (judged on
    :func:`shared_work`; ``persistent``: the step keeps AITER's persistent work metadata)."""
    ledger = shared_work(ledger, persistent)
    found = {
        "launches": host_launches(ledger, shrank),
        "upload": host_upload(ledger),
        "req_id_per_token": host_req_id_copy(ledger, may_copy),
        "sync": host_no_sync(ledger),
        "wait": host_wait(ledger),
    }
    return {clause: problem for clause, problem in found.items() if problem}


def same_work(small, large) -> str | None:
    """Two host-path steps that differ only in ``n``: the same operations, kind by kind and in order."""
    shape = [(op.kind, op.what, op.buffer, op.pinned, op.blocking) for op in small.ops]
    other = [(op.kind, op.what, op.buffer, op.pinned, op.blocking) for op in large.ops]
    if shape != other:
        return "the host path's device work depends on n"
    return None


def device_uploads_pinned(ledger) -> str | None:
    bad = [op for op in ledger.of("h2d") if not op.blocking and not op.pinned]
    if bad:
        return f"non-blocking copies from pageable memory (the driver makes them blocking): {', '.join(map(str, bad))}"
    return None


def device_no_unallowed_sync(ledger) -> str | None:
    bad = [op for op in syncs(ledger) if not op.sync_allowed]
    if bad:
        return f"syncs outside gpu_sync_allowed (a blocking copy is one): {', '.join(map(str, bad))}"
    return None


def saving(host, general) -> dict[str, int]:
    """What the host-path step saves against ``general`` (a device path on the same batch)."""
    counted = {
        "launches": len(launches(general)) - len(launches(host)),
        "h2d": len(general.of("h2d")) - len(host.of("h2d")),
        "d2h": len(general.of("d2h")) - len(host.of("d2h")),
    }
    return counted


def short_of_claim(saved: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Each claimed saving the step does not reach: kind -> (saved, claimed)."""
    return {k: (saved[k], v) for k, v in CLAIMED_SAVING.items() if saved[k] < v}


# ----- AITER's persistent work metadata -----------------------------------------------------------------------
REBUILD = "AITER get_mla_metadata_v1"  # the launch, as a ledger names it
SEQ_LENS = "common_attn_metadata.seq_lens"  # the step's device input the block reads back


def persistent_block(ledger, persistent: bool) -> list[int]:
    """The positions in ``ledger`` of the persistent work-metadata block's operations on a step that keeps
    that metadata (``persistent``; none otherwise): the first read back of ``seq_lens`` inside
    ``gpu_sync_allowed``, the first launch of AITER's ``get_mla_metadata_v1``, and the first stream
    synchronisation after it.  A second of any of them is not the block's."""
    if not persistent:
        return []
    ops = ledger.ops
    read = next((i for i, op in enumerate(ops) if op.kind == "d2h" and op.buffer == SEQ_LENS and op.sync_allowed), None)
    rebuild = next((i for i, op in enumerate(ops) if op.kind == "launch" and op.what == REBUILD), None)
    sync = (
        None
        if rebuild is None
        else next((i for i in range(rebuild + 1, len(ops)) if ops[i].kind == "stream_sync"), None)
    )
    return [i for i in (read, rebuild, sync) if i is not None]


def shared_work(ledger, persistent: bool):
    """``ledger`` without the persistent block's operations (:func:`persistent_block`): what the host and the
    device path clauses judge."""
    block = set(persistent_block(ledger, persistent))
    if not block:
        return ledger
    rest = copy.copy(ledger)
    rest.ops = [op for i, op in enumerate(ledger.ops) if i not in block]
    return rest


def rebuild_synced(ledger) -> str | None:
    """Every launch of ``get_mla_metadata_v1`` is followed, before the step returns, by a stream
    synchronisation: work metadata still being written when a (CUDA-graph) decode reads it is read
    half-built (vLLM issue 47196, PR 47404)."""
    ops = ledger.ops
    for i, op in enumerate(ops):
        if op.kind == "launch" and op.what == REBUILD and not any(o.kind == "stream_sync" for o in ops[i + 1 :]):
            return f"{op} is not followed by a stream synchronisation before the step returns"
    return None


def no_rebuild_on_repeat(ledger, step: str = "the batch of the step before") -> str | None:
    """A step on the very batch of the step before (or on one whose work metadata is the same, ``step``
    says which): no rebuild, no stream synchronisation."""
    found = [op for op in ledger.ops if (op.kind == "launch" and op.what == REBUILD) or op.kind == "stream_sync"]
    if found:
        return f"{step} rebuilt or waited again: {', '.join(map(str, found))}"
    return None
