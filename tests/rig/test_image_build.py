"""The locally built images: reproducible, and holding the tools the tests rely on."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from pykubelet.rig import images


def test_build_is_reproducible() -> None:
    first, second = images.build_images(), images.build_images()
    for name in first:
        assert first[name].manifest.digest == second[name].manifest.digest


def test_busybox_layer_has_the_applets_tests_need() -> None:
    busybox = images.build_images()["library/busybox"]
    layer = busybox.layers[0]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer.data))) as tar:
        names = set(tar.getnames())
        assert tar.getmember("bin/busybox").mode & 0o111
        assert tar.getmember("tmp").mode == 0o1777
    for tool in (
        "bin/sh",
        "bin/sleep",
        "usr/bin/nc",
        "usr/bin/wget",
        "usr/sbin/httpd",
        "bin/cat",
        "bin/ping",
    ):
        assert tool in names, tool
    assert "etc/passwd" in names


def test_config_points_at_the_layers() -> None:
    built = images.build_images()
    for image in built.values():
        config = json.loads(image.config.data)
        assert config["os"] == "linux" and config["architecture"] == images.oci_arch()
        diff_ids = [images._sha256(gzip.decompress(layer.data)) for layer in image.layers]
        assert config["rootfs"]["diff_ids"] == diff_ids
        assert len(config["history"]) == len(diff_ids)
        manifest = json.loads(image.manifest.data)
        assert manifest["config"]["digest"] == image.config.digest
        assert [layer["digest"] for layer in manifest["layers"]] == [layer.digest for layer in image.layers]
    pause = json.loads(built["pause"].config.data)["config"]
    assert pause["Entrypoint"][:2] == ["/bin/sh", "-c"] and "TERM" in pause["Entrypoint"][2]


def test_grpc_health_image() -> None:
    built = images.build_images()
    grpc_health, busybox = built[images.GRPC_HEALTH_REPOSITORY], built["library/busybox"]
    assert grpc_health.layers[0].digest == busybox.layers[0].digest  # shared, pushed and pulled once
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(grpc_health.layers[1].data))) as tar:
        assert tar.getnames() == ["bin", "bin/grpc-health"]
        member = tar.getmember("bin/grpc-health")
        assert member.mode & 0o111
        binary = tar.extractfile(member).read()  # type: ignore[union-attr]
    assert binary == images.grpc_health_binary().read_bytes()
    assert not _elf_interpreter(binary), "grpc-health must be static: the image has no libc"
    config = json.loads(grpc_health.config.data)["config"]
    assert config["Entrypoint"] == [images.GRPC_HEALTH_BINARY] and config["Cmd"] == []


def test_grpc_health_binary_is_reproducible_and_cached(tmp_path: Path) -> None:
    first = images.grpc_health_binary(tmp_path / "a")
    second = images.grpc_health_binary(tmp_path / "b")  # compiled again, from scratch
    assert first.read_bytes() == second.read_bytes()
    mtime = first.stat().st_mtime_ns
    assert images.grpc_health_binary(tmp_path / "a") == first and first.stat().st_mtime_ns == mtime
    out = subprocess.run([str(first), "-help"], capture_output=True, text=True, timeout=5, check=True)
    assert "-status-file" in out.stdout

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(RuntimeError, match="not private"):
        images.grpc_health_binary(shared)


def _elf_interpreter(binary: bytes) -> bool:
    """Whether an ELF64 little-endian executable names a dynamic loader (a PT_INTERP program header)."""
    assert binary[:4] == b"\x7fELF" and binary[4] == 2 and binary[5] == 1
    phoff = int.from_bytes(binary[32:40], "little")
    phentsize = int.from_bytes(binary[54:56], "little")
    phnum = int.from_bytes(binary[56:58], "little")
    types = [
        int.from_bytes(binary[phoff + i * phentsize : phoff + i * phentsize + 4], "little")
        for i in range(phnum)
    ]
    return 3 in types
