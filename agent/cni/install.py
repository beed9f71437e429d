"""Put the plugin executables into a CNI bin dir (the rig and `pykubelet up` call this).

The fast executable is the C shim (agent/cni/shim.c) compiled here with the service socket and the
Python fallback baked in; without a C compiler we install a small Python forwarder instead (correct,
but ~30 ms slower per call). `loopback` is the same executable: the plugin dispatches on the
network's "type", so the node needs no reference plugins at all.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

from agent.cni import protocol

log = logging.getLogger("agent.cni.install")

PLUGIN_NAME = "pykubelet-cni"
SHIM_SOURCE = resources.files("agent.cni") / "shim.c"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _c_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def build_shim(dest: Path, socket_path: str, python: str) -> bool:
    """Compile the shim to dest; False when no C compiler is available."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc or not SHIM_SOURCE.is_file():  # no compiler, or an install without the C source
        return False
    with tempfile.TemporaryDirectory() as tmp, resources.as_file(SHIM_SOURCE) as source:
        out = Path(tmp) / "shim"
        cmd = [
            cc,
            "-O2",
            "-Wall",
            f"-DSOCKET_PATH={_c_string(socket_path)}",
            f"-DFALLBACK_PYTHON={_c_string(python)}",
            f"-DFALLBACK_PYTHONPATH={_c_string(str(PROJECT_ROOT))}",
            "-o",
            str(out),
            str(source),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:  # e.g. a compiler without libc headers: the forwarder still works
            log.warning(
                "building the CNI shim failed, installing the Python forwarder: %s", proc.stderr.strip()
            )
            return False
        _atomic_copy(out, dest)
    return True


def _python_forwarder(socket_path: str, python: str) -> str:
    return f"""#!{python} -S
# pykubelet-cni forwarder (no C compiler was available to build the shim)
import os, sys
os.environ.setdefault({protocol.SOCKET_ENV!r}, {socket_path!r})
sys.path.insert(0, {str(PROJECT_ROOT)!r})
from agent.cni import client
sys.exit(client.main())
"""


def _atomic_copy(src: Path, dest: Path) -> None:
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o755)
    os.replace(tmp, dest)


def install_plugins(
    bin_dir: str | os.PathLike[str],
    socket_path: str = protocol.DEFAULT_SOCKET,
    *,
    python: str = sys.executable,
    loopback: bool = True,
    compile_shim: bool = True,
) -> list[Path]:
    """Install `pykubelet-cni` (and `loopback`) into bin_dir; returns the installed paths."""
    bin_path = Path(bin_dir)
    bin_path.mkdir(parents=True, exist_ok=True)
    plugin = bin_path / PLUGIN_NAME
    if not (compile_shim and build_shim(plugin, socket_path, python)):
        tmp = plugin.with_name(f".{PLUGIN_NAME}.tmp")
        tmp.write_text(_python_forwarder(socket_path, python))
        os.chmod(tmp, 0o755)
        os.replace(tmp, plugin)
    installed = [plugin]
    if loopback:
        lo = bin_path / "loopback"
        _atomic_copy(plugin, lo)
        installed.append(lo)
    return installed
