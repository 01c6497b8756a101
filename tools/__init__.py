"""The project's tools (kill matrix, mutation adequacy, measurements, cost), and what their pytest plugins share."""

from __future__ import annotations

import os
from pathlib import Path


def worker_path(path: Path) -> Path:
    """``path`` with ``.<worker>`` before its suffix in an xdist worker (each writes a file of its own), else
    ``path``."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return path.with_name(f"{path.stem}.{worker}{path.suffix}") if worker else path
