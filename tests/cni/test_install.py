"""Installing the plugin executables into a CNI bin dir (no root needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.cni.install import install_plugins


def version_of(exe: Path, tmp_path: Path) -> str:
    # VERSION needs no service and no privileges: the shim falls back to the in-process plugin
    proc = subprocess.run(
        [str(exe)],
        input=b'{"cniVersion": "1.0.0"}',
        env={"CNI_COMMAND": "VERSION", "PYKUBELET_CNI_SOCKET": str(tmp_path / "nobody.sock")},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


def test_shim_installed_as_plugin_and_loopback(tmp_path: Path) -> None:
    installed = install_plugins(tmp_path / "bin", str(tmp_path / "cni.sock"))
    assert [p.name for p in installed] == ["pykubelet-cni", "loopback"]
    if installed[0].read_bytes()[:4] != b"\x7fELF":
        pytest.skip("no C compiler here: the Python forwarder was installed")
    assert installed[0].read_bytes() == installed[1].read_bytes()
    assert '"supportedVersions"' in version_of(installed[0], tmp_path)
    assert list((tmp_path / "bin").iterdir()) == installed or sorted(installed) == sorted(
        (tmp_path / "bin").iterdir()
    )


def test_broken_compiler_falls_back_to_forwarder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/bin/false")
    plugin, _ = install_plugins(tmp_path / "bin", str(tmp_path / "cni.sock"))
    assert plugin.read_text().startswith("#!")
    assert '"supportedVersions"' in version_of(plugin, tmp_path)
