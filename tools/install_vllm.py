"""Install one vLLM release into the running interpreter's environment the way the suite runs it on CPU:
the release without its dependencies (it asks for a CUDA torch) plus its pinned pure-Python import chain
(``requirements/vllm-<release>-cpu-import-deps.txt``).  The vLLM envs' ``commands_pre`` in tox.ini.

The release is the one argument (tox.ini: ``VLLM_RELEASE``, else the newest the suite supports).  With ``uv``
on the PATH (``.ci/run`` installs tox-uv, whose environments have no pip) the install is ``uv pip
install --python <this interpreter>``; else it is this interpreter's pip.  Both install the same pins.
Standard library only."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def install_command(release: str, uv: str | None) -> list[str]:
    pins = ["--no-deps", f"vllm=={release}", "-r", str(ROOT / "requirements" / f"vllm-{release}-cpu-import-deps.txt")]
    if uv:
        return [uv, "pip", "install", "--quiet", "--python", sys.executable, *pins]
    return [sys.executable, "-m", "pip", "install", "--quiet", *pins]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("release", help="the vLLM release, e.g. 0.34.0")
    args = ap.parse_args(argv)
    return subprocess.call(install_command(args.release, shutil.which("uv")))


if __name__ == "__main__":
    sys.exit(main())
