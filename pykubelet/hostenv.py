"""The one Python environment pykubelet runs from on a host: a virtual environment of its own, never the
system Python (Debian 12, Ubuntu 24.04 and Debian 13 refuse a system-wide pip install, PEP 668).

A host install lives in /opt/pykubelet/venv (`python3 -m venv /opt/pykubelet/venv &&
/opt/pykubelet/venv/bin/pip install <wheel or checkout>`); the shipped systemd units and the units
`pykubelet join` writes start the daemons from it. $PYKUBELET_VENV names another one (./dev's .venv in a
checkout); without it, the environment this command runs from is used when it is a virtual environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

DEFAULT_VENV = Path("/opt/pykubelet/venv")
VENV_ENV = "PYKUBELET_VENV"


class VenvError(RuntimeError):
    """The environment is missing, unusable or lacks pykubelet; the message names it and the fix."""


def _how_to_install(venv: Path) -> str:
    return f"create it with: python3 -m venv {venv} && {venv}/bin/pip install <pykubelet wheel or checkout>"


def chosen_venv(
    environ: Mapping[str, str] = os.environ, prefix: str = sys.prefix, base_prefix: str = sys.base_prefix
) -> Path:
    """$PYKUBELET_VENV, else the running virtual environment, else the host install's default."""
    if environ.get(VENV_ENV):
        return Path(environ[VENV_ENV])
    if prefix != base_prefix:
        return Path(prefix)
    return DEFAULT_VENV


def check_venv(venv: Path) -> Path:
    """The environment's python, after checking the folder exists, is readable, holds a Python and that
    Python imports pykubelet by itself (isolated: neither PYTHONPATH nor the working folder counts);
    VenvError naming the folder otherwise."""
    if not venv.is_dir():
        raise VenvError(f"the virtual environment {venv} does not exist: {_how_to_install(venv)}")
    if not os.access(venv, os.R_OK | os.X_OK):
        raise VenvError(f"the virtual environment {venv} is not readable by this user (uid {os.geteuid()})")
    python = venv / "bin" / "python"
    if not os.access(python, os.X_OK):
        raise VenvError(f"{venv} is not a virtual environment (no {python}): {_how_to_install(venv)}")
    probe = subprocess.run(
        [str(python), "-I", "-c", "import pykubelet"], capture_output=True, text=True, timeout=60, check=False
    )
    if probe.returncode != 0:
        raise VenvError(
            f"pykubelet is not installed in the virtual environment {venv}: "
            f"{venv}/bin/pip install <pykubelet wheel or checkout>"
        )
    return python
