"""Every strategy the suite draws from never raises and trips no health check, under every profile and random seeds.

A strategy that raises is the suite's error, never the subject's (it is
reported so: ``fixtures.plugin.blame``), but a gate must not raise one at all.
The strategies are found, not listed: the arguments of every ``@given``
property under the verification folders and of every rule (and initialize
rule) of every state machine they run, each drawn with no subject at all (a
draw needs none).  Each is drawn under the size flips of every hypothesis
profile (``fixtures.plugin.profiles.LARGE_FLIPS``: a profile of fewer examples
draws vLLM's sizes more often) and under every forward domain a subject of the
suite declares (``fixtures.protocol.ForwardDomain``: the NoPE strategies draw
only what the subject serves), each under fresh random seeds; a failure names
the strategy, the profile, the domain and the seed (``@seed(N)`` reproduces it).
Health checks are those of the profiles (``too_slow`` and ``data_too_large``
suppressed, filters and assumptions checked).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import random

import pytest
import torch
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import INITIALIZE_RULE_MARKER, RULE_MARKER, RuleBasedStateMachine

from fixtures import ROOT
from fixtures.inputs import forward_cases, sizes
from fixtures.plugin.profiles import LARGE_FLIPS, PROFILES
from fixtures.protocol import ForwardDomain, LayerSwitch

# The folders whose properties run against a subject (fixtures.plugin.hooks marks them verification),
# and the bad-input contracts, which draw the same batches.
VERIFICATION = ("differential", "gating", "stateful", "nope", "performance", "contracts")
SEEDS_PER_CASE = 2
EXAMPLES = 20
DOMAINS = {
    "every layer": ForwardDomain(),
    # a backend that serves bf16 models only, with a bf16 query and no per-tensor fp8 cache (FlashMLA's)
    "bf16 only": ForwardDomain((torch.bfloat16,), ("auto",), ql_in_model_dtype_only=True),
    "fp8 cache only": ForwardDomain((torch.float16,), ("fp8",)),
    # a forward whose caller slices the padded rows off (vLLM's MLAAttention)
    "no padded rows": ForwardDomain(padded_rows=False),
    # a backend that serves layers with attention sinks (vLLM's ROCm backend on an MI3xx)
    "with sinks": ForwardDomain(sinks=True),
    # a backend whose kernels take multiples of 16 heads only (no padding): few of the drawn counts
    "16-aligned heads only": ForwardDomain(serves_heads=lambda heads: heads % 16 == 0),
    # a deployment switch that picks a kernel, settable on some ranks only (vLLM ROCm's AITER Triton sparse MLA's)
    "with a layer switch": ForwardDomain(switches=(LayerSwitch("A_KERNEL_SWITCH", lambda lora, rope: lora % 2 == 0),)),
}


def given_strategies() -> dict[str, st.SearchStrategy]:
    """``module::test`` -> the strategy of its ``@given`` arguments, for every property of the verification folders."""
    found = {}
    for folder in VERIFICATION:
        package = f"tests.{folder}"
        for info in pkgutil.iter_modules([str(ROOT / "tests" / folder)]):
            module = importlib.import_module(f"{package}.{info.name}")
            for name, fn in vars(module).items():
                handle = getattr(fn, "hypothesis", None)
                kwargs = getattr(handle, "_given_kwargs", None)
                if handle is None:
                    continue
                if kwargs is None:  # hypothesis moved it: say so rather than check nothing
                    raise AssertionError(f"{module.__name__}.{name}: hypothesis' handle has no _given_kwargs")
                found[f"{module.__name__}::{name}"] = st.fixed_dictionaries(kwargs)
    return found


def machine_classes() -> list[type]:
    todo, seen = [RuleBasedStateMachine], []
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.append(sub)
                todo.append(sub)
    return [cls for cls in seen if cls.__module__.startswith(("fixtures.", "tests."))]


def machine_strategies() -> dict[str, st.SearchStrategy]:
    """``Machine.rule`` -> the strategy of its arguments, for every rule and initialize rule of every state machine
    the verification folders import (a machine bound to a subject at run time has its class's rules)."""
    given_strategies()  # imports the properties, and with them the machines
    found = {}
    for cls in machine_classes():
        for name, fn in inspect.getmembers(cls):
            rule = getattr(fn, RULE_MARKER, None) or getattr(fn, INITIALIZE_RULE_MARKER, None)
            if rule is not None and rule.arguments_strategies:
                owner = next(k for k in cls.__mro__ if name in vars(k))
                found[f"{owner.__module__}.{owner.__qualname__}.{name}"] = st.fixed_dictionaries(
                    dict(rule.arguments_strategies)
                )
    return found


def distinct(named: dict[str, st.SearchStrategy]) -> dict[str, st.SearchStrategy]:
    """One name per distinct strategy (nine NoPE properties draw the same ``forward_cases()``): the first."""
    first: dict[str, str] = {}
    for name, strategy in named.items():
        first.setdefault(repr(strategy), name)
    return {name: named[name] for name in first.values()}


STRATEGIES = distinct({**given_strategies(), **machine_strategies()})


def draw_all(strategy: st.SearchStrategy, seed_value: int) -> None:
    @seed(seed_value)
    @settings(
        max_examples=EXAMPLES,
        database=None,
        deadline=None,
        derandomize=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(strategy)
    def draw(_):
        pass

    draw()


def test_the_strategies_are_found():
    """The discovery finds the properties and the machines (a hypothesis release that moved its handles
    would make every other test here check nothing)."""
    givens = [name for name in STRATEGIES if "::" in name]
    rules = [name for name in STRATEGIES if "::" not in name]
    assert len(givens) >= 12, givens
    assert any("feed" in repr(s) for s in STRATEGIES.values()), "the builder-feeds-forward cases are not found"
    assert any("forward_cases" in repr(s) for s in STRATEGIES.values()), "the NoPE forward cases are not found"
    assert len(rules) >= 10, rules


@pytest.mark.parametrize("name", sorted(STRATEGIES), ids=lambda name: name.rsplit(".", 1)[-1])
def test_every_draw_succeeds_under_every_profile_and_domain(name, monkeypatch):
    strategy = STRATEGIES[name]
    nope = "forward_cases" in repr(strategy) or "feed_cases" in repr(strategy)
    for profile in PROFILES:
        for kind, flips in LARGE_FLIPS.items():
            monkeypatch.setitem(sizes.FLIPS, kind, flips.get(profile, flips["dev"]))
        for domain_name, domain in DOMAINS.items() if nope else [("every layer", ForwardDomain())]:
            monkeypatch.setattr(forward_cases, "_RUN_DOMAIN", [domain])
            for _ in range(SEEDS_PER_CASE):
                seed_value = random.getrandbits(32)
                try:
                    draw_all(strategy, seed_value)
                except BaseException as exc:  # noqa: BLE001 - any raise is the finding
                    raise AssertionError(
                        f"{name}: a draw raised under profile {profile!r}'s size flips, forward domain "
                        f"{domain_name!r}, @seed({seed_value}): {type(exc).__name__}: {exc}"
                    ) from exc


def test_a_domain_without_padded_rows_draws_live_rows_only(monkeypatch):
    """A subject whose caller slices the padding off (``ForwardDomain.padded_rows``, vLLM's) is never handed
    rows past ``num_actual_tokens``; the live-token counts are drawn as for every other domain."""
    monkeypatch.setattr(forward_cases, "_RUN_DOMAIN", [ForwardDomain(padded_rows=False)])
    drawn = draw_cases()
    assert all(c.num_tokens == c.num_actual_tokens for c in drawn), [
        c for c in drawn if c.num_tokens != c.num_actual_tokens
    ][:1]
    assert len({c.num_actual_tokens for c in drawn}) > 3, "the live-token counts collapsed"


def test_sinks_are_drawn_only_for_a_domain_that_serves_them_one_a_head(monkeypatch):
    """Layers with sinks are drawn for a domain that declares them (``ForwardDomain.sinks``), never for one
    that does not; a drawn layer's sinks are float32, one a head, neighbouring heads differing."""
    for declared in (False, True):
        monkeypatch.setattr(forward_cases, "_RUN_DOMAIN", [ForwardDomain(sinks=declared)])
        drawn = draw_cases()
        with_sinks = [c for c in drawn if c.sink_base is not None]
        assert bool(with_sinks) == declared, f"sinks drawn for ForwardDomain(sinks={declared}): {len(with_sinks)}"
    sinks = forward_cases.case_sinks(next(c for c in with_sinks if c.num_heads > 1), "cpu")
    assert sinks.dtype == torch.float32 and sinks.dim() == 1 and bool(sinks[0] != sinks[1])


def draw_cases(count: int = 60) -> list:
    """``count`` forward cases under the domain in force, derandomised."""
    drawn = []

    @settings(max_examples=count, database=None, deadline=None, derandomize=True)
    @given(forward_cases.forward_cases())
    def draw(c):
        drawn.append(c)

    draw()
    return drawn
