"""Which subjects a benchmark session measures, how each is labelled, and what one timed step is.

A benchmark session measures the run's subject (``--subject``) and, when that
is another subject, the reference as a baseline, so that one
``--benchmark-json`` holds both and one report plots them side by side.
``SPARSE_MLA_BENCH_BASELINE`` names the baseline (default ``reference``;
``none`` or empty: no baseline).  The reference never imports vLLM, so a
default (reference) session imports no vLLM.

What one step times (:func:`build_step`):

* a subject following the protocol: ``builder.build(batch)``, the whole step;
* the ``vllm`` subject: vLLM's own ``ROCMAiterMLASparseMetadataBuilder.build(0,
  common_attn_metadata)``.  The ``CommonAttentionMetadata`` (vLLM's model
  runner makes it, outside ``build()``) is made once, before anything is
  timed, and the subject's step context (its launcher observer and, on CPU,
  its stand-ins for what a CPU lacks) is entered once around all the steps,
  so the timed call is vLLM's ``build()`` and nothing of the suite's.  On a
  GPU this also keeps the adapter's pageable host-to-device input copies
  (which synchronise the stream) out of the timed region.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from fixtures.inputs.batches import make_batch
from fixtures.subjects import load_subject
from fixtures.subjects.vllm import overlay as vllm_overlay

BASELINE_ENV = "SPARSE_MLA_BENCH_BASELINE"
DEFAULT_BASELINE = "reference"
# The sweep every build() benchmark shares: n decode requests, M = max_num_batched_tokens.
N_SWEEP = (1, 8, 64, 512, 4096)
M_SWEEP = (8192, 16384, 65536)
TOPK = 2048
VLLM_BUILDER_MODULE = "fixtures.subjects.vllm.subject"


def pure_decode_batch(n: int, seed: int = 0):
    """``n`` decode requests of one token each; context lengths around ``TOPK`` (fixed seed)."""
    rng = np.random.default_rng(seed)
    return make_batch([1] * n, rng.integers(1, 4 * TOPK, size=n).tolist())


def baseline_spec(environ=None) -> str | None:
    """The baseline subject's ``--subject`` spelling from ``SPARSE_MLA_BENCH_BASELINE``; None: no baseline."""
    value = (os.environ if environ is None else environ).get(BASELINE_ENV, DEFAULT_BASELINE).strip()
    return None if value.lower() in ("", "none", "off", "0") else value


_LOADED: dict[str, object] = {}


def bench_subjects(session_subject, environ=None) -> list:
    """The subjects a benchmark session measures: the baseline first (when it differs), then the run's."""
    spec = baseline_spec(environ)
    if spec is None:
        return [session_subject]
    if spec not in _LOADED:
        _LOADED[spec] = load_subject(spec)
    baseline = _LOADED[spec]
    if baseline.name == session_subject.name:
        return [session_subject]
    return [baseline, session_subject]


def _overlaid_backend(subject) -> vllm_overlay.OverlaidFile | None:
    """The overlay file the subject's backend module runs, if it runs one."""
    finder = vllm_overlay.active()
    backend = getattr(subject, "backend", None)
    if finder is None or backend is None or not vllm_overlay.loaded_from_overlay(backend):
        return None
    return finder.by_module.get(backend.__name__)


def subject_label(subject) -> str:
    """How reports name the subject: its name, its version if it has one, and the overlay it runs.

    E.g. ``reference``, ``vllm 0.33.0``, ``vllm 0.33.0 + overlay vllm-pr``.
    """
    label = subject.name
    version = getattr(subject, "version", None)
    if version:
        label += f" {version}"
    overlaid = _overlaid_backend(subject)
    if overlaid is not None:
        label += f" + overlay {vllm_overlay.active().root.name}"
    return label


def subject_info(subject) -> dict:
    """``extra_info`` fields naming the subject (``subject`` is its name, ``subject_label`` the report's)."""
    info = {"subject": subject.name, "subject_label": subject_label(subject)}
    overlaid = _overlaid_backend(subject)
    if overlaid is not None:
        info["vllm_overlay"] = str(vllm_overlay.active().root)
        info["vllm_overlay_file_sha256"] = overlaid.sha256
    return info


def is_vllm_builder(builder) -> bool:
    return type(builder).__module__ == VLLM_BUILDER_MODULE and hasattr(builder, "inner")


@dataclass
class Step:
    """One timed step (``run``), how to learn the path a step takes (``path``), and what ``run`` times."""

    run: Callable[[], object]
    path: Callable[[], str]
    timed: str


@contextlib.contextmanager
def build_step(builder, batch) -> Iterator[Step]:
    """The step a benchmark times for ``builder`` on ``batch`` (module doc: what is timed)."""
    if not is_vllm_builder(builder):
        yield Step(
            run=lambda: builder.build(batch),
            path=lambda: builder.build(batch).path,
            timed="builder.build(batch)",
        )
        return
    import importlib

    vllm_subject = importlib.import_module(VLLM_BUILDER_MODULE)
    cam = vllm_subject.common_attn_metadata(batch, builder.config.device, builder.config.runtime)
    with builder.step_context() as launcher_calls:

        def run():
            return builder.inner.build(0, cam)

        def path():
            launcher_calls.clear()
            run()
            return "device" if launcher_calls else "host"

        yield Step(
            run=run,
            path=path,
            timed=f"vLLM {type(builder.inner).__name__}.build(0, common_attn_metadata); inputs made once, untimed",
        )
