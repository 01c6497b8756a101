"""Each clause of the performance contract catches the broken subject written for it, and only the
clauses that broken subject breaks fail.

The broken subjects (``fixtures/subjects/mutants/performance.py``) keep every
value right; each adds one launch, copy, sync or wait the change exists to
avoid.  Every property of ``tests/performance`` runs against each of them
(in this process, 10 generated examples each, the pinned ones left out: the
generated ones alone must catch each) and the set of properties that
fail must be exactly the set listed here: the clause the subject breaks, and
any clause that follows from it (one more launch also shrinks the saving).
The reference must fail none.  The clause tests are collected by node id
(``tests/performance/test_device_work.py::<clause>``), as pytest collects them.
"""

import contextlib
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from fixtures.models.ledger import DeviceOp, Ledger
from fixtures.subjects.mutants import MUTANTS
from fixtures.subjects.mutants.performance import MUTANTS as PERFORMANCE
from fixtures.subjects.reference import ReferenceSubject
from oracles import device_work as contract
from tools.fresh_run import repo

CLAUSE_TESTS = "tests/performance/test_device_work.py"

LAUNCHES = "test_host_path_launches_no_kernel_but_the_shared_shrink_tail_zeroing"
UPLOAD = "test_host_path_uploads_paged_kv_indptr_once_pinned_and_non_blocking"
REQ_ID = "test_host_path_copies_req_id_per_token_only_when_the_decode_batch_grows"
SYNC = "test_host_path_never_reads_the_device_back"
WAIT = "test_host_path_waits_at_most_once_before_rewriting_the_pinned_buffer"
O1 = "test_host_path_device_work_does_not_grow_with_n"
DEVICE_UPLOADS = "test_device_path_non_blocking_uploads_read_pinned_memory"
DEVICE_SYNC = "test_device_path_syncs_only_inside_gpu_sync_allowed"
SAVING = "test_host_path_saves_the_claimed_launches_against_the_general_path"
# clauses 1 to 5 again, on the ledger recorded below torch with meta standing in for the device
DISPATCH = "test_host_path_keeps_every_clause_on_a_dispatch_level_ledger_meta_stands_in_for_the_device"
CLAUSES = (LAUNCHES, UPLOAD, REQ_ID, SYNC, WAIT, O1, DEVICE_UPLOADS, DEVICE_SYNC, SAVING, DISPATCH)

EXPECTED = {
    "tail_filled_on_device": {LAUNCHES, SAVING, DISPATCH},
    # a blocking copy, and a non-blocking one out of pageable memory, is a sync too
    "indptr_uploaded_from_pageable_memory": {UPLOAD, SYNC, DISPATCH},
    "indptr_uploaded_blocking": {UPLOAD, SYNC, DISPATCH},
    "indptr_read_back": {SYNC, DISPATCH},
    "event_waited_twice": {WAIT, DISPATCH},
    "indptr_uploaded_per_token": {UPLOAD, O1, DISPATCH},
    "device_req_ids_from_pageable_memory": {DEVICE_UPLOADS, DEVICE_SYNC},
    "device_req_ids_uploaded_blocking": {DEVICE_SYNC},
    "device_path_reads_indptr_back": {DEVICE_SYNC},
    # the stateful group's, whose every upload of req_id_per_token is otherwise right
    "req_id_rewritten_every_step": {REQ_ID, DISPATCH},
}


class _Properties(list):
    def __call__(self, key, value):
        self.append((key, value))


@contextlib.contextmanager
def few_examples(tests, count: int = 10):
    """``count`` generated examples, no pinned ones (the generated must catch each broken subject, and
    the programs pinned at vLLM's sizes would cost more than all of them), no database and no shrinking
    (only the verdict counts) for each test:
    hypothesis fixes a test's settings when ``@given`` decorates it, so they are swapped on the
    test for the duration."""
    saved = [t._hypothesis_internal_use_settings for t in tests]
    for test, old in zip(tests, saved, strict=True):
        test._hypothesis_internal_use_settings = settings(
            old, max_examples=count, database=None, phases=GENERATED_ONLY, report_multiple_bugs=False
        )
    try:
        yield
    finally:
        for test, old in zip(tests, saved, strict=True):
            test._hypothesis_internal_use_settings = old


GENERATED_ONLY = [Phase.reuse, Phase.generate]


@pytest.fixture(scope="module")
def clauses(request) -> dict:
    """Each clause's test function, by name: ``CLAUSE_TESTS::<name>`` collected as pytest collects it."""
    module = pytest.Module.from_parent(request.session, path=Path(repo(CLAUSE_TESTS)))
    return {name: getattr(module.obj, name) for name in CLAUSES}


def failing_clauses(subject, tests: dict) -> set[str]:
    failed = set()
    with few_examples(list(tests.values())):
        for name, test in tests.items():
            kwargs = {"record_property": _Properties()} if name == SAVING else {}
            try:
                test(subject=subject, device="cpu", **kwargs)
            except AssertionError:
                failed.add(name)
    return failed


def test_every_clause_has_a_broken_subject_and_the_catalogue_lists_each_once():
    assert set(EXPECTED) >= set(PERFORMANCE), f"performance mutants not listed: {set(PERFORMANCE) - set(EXPECTED)}"
    broken = set().union(*EXPECTED.values())
    assert broken == set(CLAUSES), f"clauses without a broken subject: {set(CLAUSES) - broken}"


def test_the_reference_keeps_every_clause(clauses):
    assert failing_clauses(ReferenceSubject(), clauses) == set()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_broken_subject_fails_exactly_the_clauses_it_breaks(name, clauses):
    assert failing_clauses(MUTANTS[name](), clauses) == EXPECTED[name]


# ----- AITER's persistent work metadata: the block the path clauses leave to their own -----------------------
def _op(kind, what="", target="", allowed=False, **kw):
    return DeviceOp(kind, what, target=target, **kw).in_sync_region(allowed)


READ = _op("d2h", "cpu", f"{contract.SEQ_LENS}[0:3]", allowed=True)
REBUILT = _op("launch", contract.REBUILD)
SYNCED = _op("stream_sync", "synchronize")
UPLOAD_OP = _op("h2d", "copy_", "paged_kv_indptr[0:9]", pinned=True, blocking=False)


def test_only_the_persistent_blocks_own_operations_are_left_out_of_the_path_clauses():
    """The first read back of ``seq_lens`` inside ``gpu_sync_allowed``, the first rebuild and the first stream sync
    after it, and only on a step that keeps the metadata; a second read, a read outside the region, or a sync
    before the rebuild stays with the path clauses (a host path that waits there fails)."""
    step = Ledger("host step", [UPLOAD_OP, READ, REBUILT, SYNCED])
    assert contract.shared_work(step, persistent=True).ops == [UPLOAD_OP]
    assert contract.host_step_problems(step, False, False, persistent=True) == {}
    assert set(contract.host_step_problems(step, False, False, persistent=False)) == {"launches", "sync"}
    for extra in (READ, _op("d2h", "cpu", f"{contract.SEQ_LENS}[0:3]")):
        again = Ledger("host step", [UPLOAD_OP, READ, extra, REBUILT, SYNCED])
        assert contract.shared_work(again, persistent=True).ops == [UPLOAD_OP, extra]
    early = Ledger("host step", [UPLOAD_OP, SYNCED, READ, REBUILT])
    assert contract.shared_work(early, persistent=True).ops == [UPLOAD_OP, SYNCED]


def test_a_rebuild_without_a_stream_sync_after_it_and_a_repeat_that_rebuilds_are_named():
    assert contract.rebuild_synced(Ledger("s", [READ, REBUILT, SYNCED])) is None
    assert "not followed by a stream synchronisation" in contract.rebuild_synced(Ledger("s", [SYNCED, READ, REBUILT]))
    assert contract.no_rebuild_on_repeat(Ledger("s", [READ])) is None
    for again in ([READ, REBUILT, SYNCED], [READ, SYNCED]):
        assert "rebuilt or waited again" in contract.no_rebuild_on_repeat(Ledger("s", again))
