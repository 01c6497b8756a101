"""Suite-wide options, hypothesis profiles, markers, fixtures and reports.

Options: ``--subject`` (built-in name or ``module:attribute``), ``--device``
(auto, cpu, cuda), ``--strict-gating``, ``--require CAP`` and ``--expect PART``.
See docs/running.md; the strict gating rule is in ``fixtures/gating.py``.
"""

from __future__ import annotations

import os

from fixtures.devices import DEVICE_CHOICES, configure_triton_interpreter

# Must run before anything imports triton.
_DEVICE_GUESS = configure_triton_interpreter()

import pytest  # noqa: E402
import torch  # noqa: E402

from fixtures import profiles, stack, vllm_overlay  # noqa: E402
from fixtures.devices import resolve_device  # noqa: E402
from fixtures.gating import (  # noqa: E402
    NOT_APPLICABLE,
    StrictGating,
    benchmark_skip_reason,
    gpu_skip_reason,
)
from fixtures.reporting import VerificationReport  # noqa: E402
from fixtures.subjects import (  # noqa: E402
    CAPABILITIES,
    SubjectError,
    load_subject,
    missing_capabilities,
)

# ----- hypothesis profiles (fixtures/profiles.py) --------------------------
profiles.register_and_load()

# Directories whose tests check the suite itself rather than a subject.
SELFTEST_DIRS = ("oracles", "contracts", "selfvalidation")


def pytest_addoption(parser):
    group = parser.getgroup("sparse-mla", "sparse MLA decode verification")
    group.addoption(
        "--subject",
        default="reference",
        help="implementation under test: a built-in name (reference) or module:attribute",
    )
    group.addoption(
        "--device",
        default="auto",
        choices=DEVICE_CHOICES,
        help="auto: cuda when a GPU is present (ROCm included), else cpu with the Triton interpreter",
    )
    group.addoption(
        "--strict-gating",
        action="store_true",
        default=bool(os.environ.get("SPARSE_MLA_STRICT")),
        help="pre-merge gating: anything requested but unavailable is an error, never a skip",
    )
    group.addoption(
        "--require",
        action="append",
        default=[],
        metavar="CAP",
        help=f"capability the subject must have (repeatable); one of {sorted(CAPABILITIES)}",
    )
    group.addoption(
        "--vllm-overlay",
        default=None,
        metavar="DIR",
        help="run vLLM with the Python files under DIR/vllm/ in place of the installed ones "
        "(a vLLM checkout, or a folder of changed files in vLLM's layout); the installed package is not modified",
    )
    group.addoption(
        "--baseline",
        default=None,
        choices=("release", "none"),
        help="release: every build step also runs through the installed vLLM release's builder and the whole "
        "persistent buffers are compared bit for bit (default with --vllm-overlay; needs vLLM); none: off",
    )
    group.addoption(
        "--vllm-overlay-missing",
        default="error",
        choices=("error", "skip"),
        help="when the --vllm-overlay folder does not exist: error (default), or skip the whole run with a "
        "line saying why (CI's default overlay); under --strict-gating always an error",
    )
    group.addoption(
        "--expect",
        action="append",
        default=[],
        choices=stack.EXPECTABLE,
        metavar="PART",
        help=f"part of the machine's stack that must be present, else the run stops (repeatable): {stack.EXPECTABLE}",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(*caps): property needs these subject capabilities")
    try:
        device = resolve_device(config.getoption("--device"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if device == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--device cuda was requested but torch sees no GPU (CUDA or ROCm)")
    overlay = config.getoption("--vllm-overlay")
    if overlay and not os.path.exists(overlay):
        strict = config.getoption("--strict-gating")
        if config.getoption("--vllm-overlay-missing") == "skip" and not strict:
            pytest.exit(f"skipped: --vllm-overlay {overlay} does not exist; this verification did not run", 0)
        raise pytest.UsageError(f"--vllm-overlay {overlay} does not exist" + (" (--strict-gating)" if strict else ""))
    try:
        if overlay:
            vllm_overlay.install(overlay)
        subject = load_subject(config.getoption("--subject"))
        if (config.getoption("--baseline") or ("release" if overlay else "none")) == "release":
            subject = with_release_baseline(subject)
    except (SubjectError, vllm_overlay.OverlayError) as exc:
        raise pytest.UsageError(str(exc)) from None
    unknown = sorted(set(config.getoption("--require")) - CAPABILITIES)
    if unknown:
        raise pytest.UsageError(f"--require: unknown capabilities {unknown}; known: {sorted(CAPABILITIES)}")
    missing = missing_capabilities(subject, *config.getoption("--require"))
    if missing:
        raise pytest.UsageError(f"subject {subject.name!r} lacks required capabilities {missing}")
    # A subject may list what it stands in for (e.g. no GPU, a missing library);
    # pre-merge gating allows none of it.
    problems = subject.gating_problems() if hasattr(subject, "gating_problems") else []
    if problems and config.getoption("--strict-gating"):
        raise pytest.UsageError(f"--strict-gating: subject {subject.name!r}: " + "; ".join(problems))
    config._sparse_mla = {"device": device, "subject": subject}
    _check_expected_stack(config)
    config.pluginmanager.register(VerificationReport(config), "sparse-mla-report")
    if config.getoption("--strict-gating"):
        config.pluginmanager.register(StrictGating(), "sparse-mla-strict-gating")


def with_release_baseline(subject):
    """``subject`` with the installed vLLM release beside it (``fixtures.baseline``)."""
    from fixtures.baseline import WithBaseline
    from fixtures.subjects.vllm_subject import VllmSubject

    return WithBaseline(subject, VllmSubject(release=True))


def _check_expected_stack(config):
    problems = stack.unmet(config.getoption("--expect"))
    if problems:
        raise pytest.UsageError("--expect: missing from this machine's stack:\n  " + "\n  ".join(problems))


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = item.path.relative_to(config.rootpath).parts
        if len(parts) > 1 and parts[0] == "tests" and parts[1] in SELFTEST_DIRS:
            item.add_marker(pytest.mark.selftest)
        elif parts and parts[0] == "tests" and "benchmarks" not in parts:
            item.add_marker(pytest.mark.verification)
        if "benchmarks" in parts or "benchmark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.bench)


def pytest_runtest_setup(item):
    state = item.config._sparse_mla
    if item.get_closest_marker("bench"):
        reason = benchmark_skip_reason(item.config)
        if reason:
            pytest.skip(reason)
    if item.get_closest_marker("gpu") and state["device"] != "cuda":
        pytest.skip(gpu_skip_reason(item.config))
    marker = item.get_closest_marker("needs")
    if marker:
        missing = missing_capabilities(state["subject"], *marker.args)
        if missing:
            notes = getattr(state["subject"], "capability_notes", {})
            why = "".join(f" ({notes[c]})" for c in missing if c in notes)
            pytest.skip(f"{NOT_APPLICABLE}subject {state['subject'].name!r} lacks {', '.join(missing)}{why}")


# ----- fixtures ----------------------------------------------------------------
@pytest.fixture(scope="session")
def device(pytestconfig) -> torch.device:
    """The device under test: one test body serves CPU and GPU."""
    return torch.device(pytestconfig._sparse_mla["device"])


@pytest.fixture(scope="session")
def subject(pytestconfig):
    return pytestconfig._sparse_mla["subject"]
