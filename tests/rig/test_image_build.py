"""The locally built images: reproducible, and holding the tools the tests rely on."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

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
    for tool in ("bin/sh", "bin/sleep", "usr/bin/nc", "usr/bin/wget", "usr/sbin/httpd", "bin/cat", "bin/ping"):
        assert tool in names, tool
    assert "etc/passwd" in names


def test_config_points_at_the_layer() -> None:
    built = images.build_images()
    for image in built.values():
        config = json.loads(image.config.data)
        assert config["os"] == "linux" and config["architecture"] == images.oci_arch()
        tar = gzip.decompress(image.layers[0].data)
        assert config["rootfs"]["diff_ids"] == [images._sha256(tar)]
        manifest = json.loads(image.manifest.data)
        assert manifest["config"]["digest"] == image.config.digest
        assert [layer["digest"] for layer in manifest["layers"]] == [image.layers[0].digest]
    pause = json.loads(built["pause"].config.data)["config"]
    assert pause["Entrypoint"][:2] == ["/bin/sh", "-c"] and "TERM" in pause["Entrypoint"][2]
