"""Container images built on the machine, without internet, and pushed to a registry over its HTTP API.

Three images, all from Debian's busybox-static: `busybox` (one layer: /bin/busybox, a link per applet,
a minimal /etc), `pause` (the same layer, with a PID 1 that sleeps until SIGTERM) and `grpc-health`
(the same layer plus /bin/grpc-health, a grpc.health.v1 server compiled here from grpchealth.c, for
gRPC probes; see that file for its flags). Layers are built deterministically (fixed mtimes, sorted
entries, gzip without a timestamp, a stripped static binary compiled from a fixed file name), so the
same busybox and compiler give the same digests on every run and `IfNotPresent` pulls behave as they
would against a real registry.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import stat
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

BUSYBOX_BINARY = "/bin/busybox"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
EPOCH = 1_700_000_000  # fixed mtime for reproducible layers

PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"
PAUSE_SCRIPT = 'trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done'

GRPC_HEALTH_SOURCE = resources.files("pykubelet.rig") / "grpchealth.c"
GRPC_HEALTH_BINARY = "/bin/grpc-health"
GRPC_HEALTH_REPOSITORY, GRPC_HEALTH_TAG = "grpc-health", "1"
GRPC_HEALTH_PORT = 5000  # the server's default -port
# Static (the image has no libc), stripped (no symbol table naming the build folder).
GRPC_HEALTH_CFLAGS = ("-static", "-O2", "-s", "-Wall")


def oci_arch() -> str:
    machine = platform.machine()
    return {
        "x86_64": "amd64",
        "aarch64": "arm64",
        "armv7l": "arm",
        "ppc64le": "ppc64le",
        "s390x": "s390x",
    }.get(machine, machine)


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Blob:
    media_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return _sha256(self.data)

    def descriptor(self) -> dict:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data)}


@dataclass
class Image:
    """An OCI image held in memory: a manifest, a config and its layers."""

    config: Blob
    layers: list[Blob]
    manifest: Blob = field(init=False)

    def __post_init__(self) -> None:
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": self.config.descriptor(),
            "layers": [layer.descriptor() for layer in self.layers],
        }
        self.manifest = Blob(OCI_MANIFEST, json.dumps(manifest, sort_keys=True).encode())


def _busybox_applets() -> list[str]:
    out = subprocess.run([BUSYBOX_BINARY, "--list-full"], capture_output=True, text=True, check=True)
    return sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})


def _add_dir(tar: tarfile.TarFile, path: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(path)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    info.mtime = EPOCH
    tar.addfile(info)


def _add_file(tar: tarfile.TarFile, path: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(path)
    info.size = len(data)
    info.mode = mode
    info.mtime = EPOCH
    tar.addfile(info, io.BytesIO(data))


def _busybox_layer_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in (
            "bin",
            "sbin",
            "usr",
            "usr/bin",
            "usr/sbin",
            "etc",
            "root",
            "home",
            "var",
            "var/www",
            "proc",
            "sys",
            "dev",
        ):
            _add_dir(tar, d, 0o700 if d == "root" else 0o755)
        _add_dir(tar, "tmp", 0o1777)
        with open(BUSYBOX_BINARY, "rb") as f:
            _add_file(tar, "bin/busybox", f.read(), 0o755)
        _add_file(tar, "etc/passwd", PASSWD.encode())
        _add_file(tar, "etc/group", GROUP.encode())
        _add_file(tar, "var/www/index.html", b"hello from pykubelet busybox\n")
        for applet in _busybox_applets():
            path = applet.lstrip("/")
            if path == "bin/busybox":
                continue
            info = tarfile.TarInfo(path)
            info.type = tarfile.SYMTYPE
            info.linkname = "/bin/busybox"
            info.mode = 0o777
            info.mtime = EPOCH
            tar.addfile(info)
    return buf.getvalue()


def _gzip(data: bytes) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return out.getvalue()


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("building the grpc-health image needs a C compiler (gcc, libc6-dev): none on PATH")
    return cc


def _cache_dir() -> Path:
    configured = os.environ.get("PYKUBELET_BUILD_CACHE")
    return Path(configured or Path(tempfile.gettempdir()) / f"pykubelet-build-cache-{os.getuid()}")


def _private_dir(path: Path) -> bool:
    """Create path for this user only; False when it is someone else's or others may write to it (a
    shared /tmp must not let another user plant the binary the tests run as root)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.lstat()
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def grpc_health_binary(cache_dir: Path | None = None) -> Path:
    """The grpc-health server compiled from grpchealth.c: static, so it runs in the busybox image and on
    the host alike. Compiling takes about half a second, so the result is kept in cache_dir under a
    hash of the source, flags and compiler; the compile runs on a copy with a fixed name in an empty
    folder, so every checkout and every run makes the same bytes."""
    cc = _compiler()
    source = GRPC_HEALTH_SOURCE.read_bytes()
    version = subprocess.run([cc, "--version"], capture_output=True, check=False).stdout
    key = hashlib.sha256(b"\0".join([source, " ".join(GRPC_HEALTH_CFLAGS).encode(), cc.encode(), version]))
    folder = cache_dir or _cache_dir()
    if not _private_dir(folder):
        raise RuntimeError(
            f"build cache {folder} is not private to this user: remove it or set PYKUBELET_BUILD_CACHE"
        )
    cached = folder / f"grpc-health-{key.hexdigest()[:24]}"
    if cached.exists():
        return cached
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "grpc-health.c").write_bytes(source)
        proc = subprocess.run(
            [cc, *GRPC_HEALTH_CFLAGS, "-o", "grpc-health", "grpc-health.c"],
            cwd=tmp,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"compiling {GRPC_HEALTH_SOURCE} failed:\n{proc.stderr.strip()}")
        partial = cached.with_name(f".{cached.name}.{os.getpid()}")
        shutil.copyfile(Path(tmp, "grpc-health"), partial)
        os.chmod(partial, 0o755)
        os.replace(partial, cached)  # whole or absent, even with builds running side by side
    return cached


def _grpc_health_layer_tar(binary: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add_dir(tar, "bin")  # as in the busybox layer, so stacking it changes nothing but the file
        _add_file(tar, GRPC_HEALTH_BINARY.lstrip("/"), binary.read_bytes(), 0o755)
    return buf.getvalue()


def _config(diff_ids: list[str], cmd: list[str], entrypoint: list[str] | None = None) -> Blob:
    cfg: dict = {
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        "Cmd": cmd,
        "WorkingDir": "/",
    }
    if entrypoint:
        cfg["Entrypoint"] = entrypoint
    config = {
        "architecture": oci_arch(),
        "os": "linux",
        "created": "2023-11-14T22:13:20Z",
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [
            {"created": "2023-11-14T22:13:20Z", "created_by": f"pykubelet.rig.images from {source}"}
            for source in ("busybox-static", "grpchealth.c")[: len(diff_ids)]
        ],
    }
    return Blob(OCI_CONFIG, json.dumps(config, sort_keys=True).encode())


def build_images() -> dict[str, Image]:
    """The test images by repository name: 'library/busybox', 'pause' and 'grpc-health'."""
    tar = _busybox_layer_tar()
    layer = Blob(OCI_LAYER_GZIP, _gzip(tar))
    diff_id = _sha256(tar)
    grpc_tar = _grpc_health_layer_tar(grpc_health_binary())
    grpc_layer = Blob(OCI_LAYER_GZIP, _gzip(grpc_tar))
    return {
        "library/busybox": Image(_config([diff_id], ["sh"]), [layer]),
        "pause": Image(_config([diff_id], [], ["/bin/sh", "-c", PAUSE_SCRIPT]), [layer]),
        GRPC_HEALTH_REPOSITORY: Image(
            _config([diff_id, _sha256(grpc_tar)], [], [GRPC_HEALTH_BINARY]), [layer, grpc_layer]
        ),
    }


# -- pushing ---------------------------------------------------------------------------------------


def _request(
    method: str, url: str, data: bytes | None = None, headers: dict | None = None
) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()
            return resp.status, dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers)


def push(registry: str, repository: str, tag: str, image: Image) -> str:
    """Push image as registry/repository:tag (registry is host:port, plain HTTP); returns its digest."""
    base = f"http://{registry}/v2/{repository}"
    for blob in [image.config, *image.layers]:
        status, _ = _request("HEAD", f"{base}/blobs/{blob.digest}")
        if status == 200:
            continue
        status, headers = _request("POST", f"{base}/blobs/uploads/")
        if status != 202:
            raise RuntimeError(f"registry {registry}: starting upload to {repository} gave HTTP {status}")
        location = headers.get("Location") or headers.get("location") or ""
        if location.startswith("/"):
            location = f"http://{registry}{location}"
        sep = "&" if "?" in location else "?"
        status, _ = _request(
            "PUT",
            f"{location}{sep}digest={blob.digest}",
            blob.data,
            {"Content-Type": "application/octet-stream"},
        )
        if status != 201:
            raise RuntimeError(f"registry {registry}: uploading {blob.digest} gave HTTP {status}")
    status, _ = _request(
        "PUT", f"{base}/manifests/{tag}", image.manifest.data, {"Content-Type": image.manifest.media_type}
    )
    if status != 201:
        raise RuntimeError(f"registry {registry}: pushing manifest {repository}:{tag} gave HTTP {status}")
    return image.manifest.digest


@dataclass(frozen=True)
class RigImages:
    """References to the pushed images, as a pod spec would name them."""

    registry: str
    busybox: str  # registry/library/busybox:latest
    busybox_pinned: str  # a non-latest tag, for IfNotPresent
    pause: str
    grpc_health: str  # registry/grpc-health:1, entrypoint /bin/grpc-health (serves on port 5000)

    @property
    def busybox_short(self) -> str:
        """`busybox`: resolves to docker.io/library/busybox, which containerd mirrors to our registry."""
        return "busybox"


def busybox_version() -> str:
    out = subprocess.run([BUSYBOX_BINARY], capture_output=True, text=True, check=False).stdout
    first = out.splitlines()[0] if out else ""
    # "BusyBox v1.35.0 (Debian ...) multi-call binary."
    for word in first.split():
        if word.startswith("v") and word[1:2].isdigit():
            return word[1:]
    return "1"


def publish_test_images(registry: str) -> RigImages:
    """Build the images and push them; cheap to call again (blobs already there are skipped)."""
    images = build_images()
    version = busybox_version()
    for tag in ("latest", version):
        push(registry, "library/busybox", tag, images["library/busybox"])
    push(registry, "pause", "3.9", images["pause"])
    push(registry, GRPC_HEALTH_REPOSITORY, GRPC_HEALTH_TAG, images[GRPC_HEALTH_REPOSITORY])
    return RigImages(
        registry=registry,
        busybox=f"{registry}/library/busybox:latest",
        busybox_pinned=f"{registry}/library/busybox:{version}",
        pause=f"{registry}/pause:3.9",
        grpc_health=f"{registry}/{GRPC_HEALTH_REPOSITORY}:{GRPC_HEALTH_TAG}",
    )
