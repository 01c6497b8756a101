"""The subject protocol's surface: ``fixtures.protocol`` exports the author's API (``__all__``), and every
name that moved out of it still resolves there, with a DeprecationWarning naming its new home."""

from __future__ import annotations

import importlib

import pytest

from fixtures import protocol

# Protocol 10's moves (docs/subject-protocol.md, "Changelog"), written out here so that a move undone or
# changed shows: the name, and the module it moved to.
MOVED_IN_10 = {
    "check_subject": "fixtures.subjects",
    "missing_capabilities": "fixtures.subjects",
    "REQUIRED_MEMBERS": "fixtures.subjects",
    "CAPABILITY_MEMBERS": "fixtures.subjects",
    "CAPABILITY_NEEDS": "fixtures.subjects",
    "exposed_buffers": "fixtures.harness.contract",
    "step_contract": "fixtures.harness.contract",
    "EXIT_SUITE_ERROR": "fixtures.outcomes",
    "TargetsAnotherRelease": "fixtures.outcomes",
    "OptionProvider": "fixtures.subjects",
}


@pytest.mark.parametrize(("name", "home"), sorted(MOVED_IN_10.items()))
def test_a_moved_name_resolves_at_its_old_place_with_one_warning(name, home):
    with pytest.warns(DeprecationWarning) as record:
        old = getattr(protocol, name)
    assert [str(w.message).split(";")[0] for w in record] == [f"fixtures.protocol.{name} moved to {home}.{name}"]
    assert old is getattr(importlib.import_module(home), name)
    assert name not in protocol.__all__


def test_the_protocol_exports_what_it_defines_and_nothing_it_moved():
    assert len(protocol.__all__) == len(set(protocol.__all__))
    for name in protocol.__all__:
        assert hasattr(protocol, name), name
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        protocol.no_such_name  # noqa: B018
