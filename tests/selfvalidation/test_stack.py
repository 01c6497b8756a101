"""The one AITER probe (``fixtures.subjects.vllm.loading.aiter.probe_aiter``): never fooled by a module named ``aiter``.

AMD's AITER counts as present only when every function the backend uses is
found; the suite's own CPU stand-in and a spec-less module in
``sys.modules['aiter']`` are answered, not crashed on.
"""

import sys
import types

from fixtures.subjects.vllm.loading.aiter import AITER_FUNCTIONS, STAND_IN_MARK, probe_aiter


def fake_aiter(with_functions: bool, spec: bool = False):
    """A module named aiter (and aiter.mla), with or without the backend's functions."""
    top, mla = types.ModuleType("aiter"), types.ModuleType("aiter.mla")
    top.mla = mla
    if not spec:
        top.__spec__ = None
    if with_functions:
        for module_name, attribute in AITER_FUNCTIONS:
            target = mla if module_name == "aiter.mla" else top
            setattr(target, attribute, types.SimpleNamespace() if attribute == "dtypes" else (lambda *a, **k: None))
    return top, mla


def test_the_suites_stand_in_is_never_aiter(monkeypatch):
    top, mla = fake_aiter(with_functions=True)
    setattr(top, STAND_IN_MARK, True)
    monkeypatch.setitem(sys.modules, "aiter", top)
    monkeypatch.setitem(sys.modules, "aiter.mla", mla)
    assert probe_aiter() == (False, "sys.modules['aiter'] is this suite's CPU stand-in, not AMD AITER")


def test_a_spec_less_module_without_the_functions_is_answered_not_crashed_on(monkeypatch):
    top, mla = fake_aiter(with_functions=False)
    monkeypatch.setitem(sys.modules, "aiter", top)
    monkeypatch.setitem(sys.modules, "aiter.mla", mla)
    ok, detail = probe_aiter()
    assert not ok and detail.startswith("'aiter' imports but is not AMD AITER: missing")
    assert all(f"{m}.{f}" in detail for m, f in AITER_FUNCTIONS)


def test_every_backend_function_present_counts_as_aiter(monkeypatch):
    top, mla = fake_aiter(with_functions=True)
    monkeypatch.setitem(sys.modules, "aiter", top)
    monkeypatch.setitem(sys.modules, "aiter.mla", mla)
    ok, detail = probe_aiter()
    assert ok and "AMD AITER" in detail
    delattr(top, "get_mla_metadata_v1")
    assert probe_aiter() == (False, "'aiter' imports but is not AMD AITER: missing aiter.get_mla_metadata_v1")
