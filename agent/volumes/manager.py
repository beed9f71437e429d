"""Making pod volumes ready on the host and turning volumeMounts into CRI mounts.

configMap, secret, downwardAPI and projected volumes are written the way upstream's atomic writer
lays them out: the files live in a timestamped folder, `..data` is a symlink to it that is swapped in
one rename, and each top-level name is a symlink through `..data`. A reader inside the container thus
never sees half an update. Such volumes are mounted read-only, as upstream does.

A projected `serviceAccountToken` source is a token from TokenRequest bound to the pod (tokens.py keeps
them). `refresh`, called on the pod worker's periodic sync (syncFrequency, 1 min by default) and on every
change of the pod, rewrites these volumes from the objects as they are then, the same atomic way, so a
changed ConfigMap, Secret, label or annotation (or a token due) reaches running containers, as upstream's
remount on sync does. The objects are read by name (GET), as the Node authorizer allows.

emptyDir with `medium: Memory` is a tmpfs (emptydir.py); fsGroup is applied as upstream (ownership.py).
A persistentVolumeClaim volume is its bound volume's hostPath or local folder (claims.py), bind-mounted,
read-only when the pod's claim source says so.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.cri import pb
from agent.volumes import claims, subpath
from agent.volumes.emptydir import disk_usage, mount_tmpfs, tmpfs_size, unmount_under
from agent.volumes.ownership import set_ownership
from agent.volumes.tokens import TokenManager
from kubeclient.errors import ApiError
from kubeclient.quantity import QuantityError, value

Fetch = Callable[[str, str, str], Awaitable[dict[str, Any] | None]]
FieldValue = Callable[[dict[str, Any], str], str]
# (pod, resourceFieldRef) -> the value as text; the pod layer knows the rule (requests, limits, divisors).
ResourceValue = Callable[[dict[str, Any], dict[str, Any]], str]

DEFAULT_MODE = 0o644
READ_ONLY_KINDS = ("configMap", "secret", "downwardAPI", "projected")
SUPPORTED = ("emptyDir", "hostPath", "persistentVolumeClaim", *READ_ONLY_KINDS)


class VolumeError(Exception):
    """A volume cannot be set up now (FailedMount); the message is upstream's wording."""


@dataclass(frozen=True)
class ReadyVolume:
    name: str
    kind: str
    host_path: str
    read_only: bool


def _kind(volume: dict[str, Any]) -> str:
    for kind in SUPPORTED:
        if volume.get(kind) is not None:
            return kind
    others = [k for k in volume if k != "name"]
    return others[0] if others else "emptyDir"


def _decode(obj: dict[str, Any], secret: bool) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    if secret:
        out.update({k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()})
        out.update({k: v.encode() for k, v in (obj.get("stringData") or {}).items()})
    else:
        out.update({k: v.encode() for k, v in (obj.get("data") or {}).items()})
        out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return out


def _select(
    data: dict[str, bytes], items: list[dict[str, Any]] | None, default_mode: int, what: str
) -> dict[str, tuple[bytes, int]]:
    if not items:
        return {k: (v, default_mode) for k, v in data.items()}
    out = {}
    for item in items:
        if item["key"] not in data:
            raise VolumeError(f"configuration for {what} has no key {item['key']!r}")
        out[item["path"]] = (data[item["key"]], int(item.get("mode", default_mode)))
    return out


def write_atomic(target: Path, files: dict[str, tuple[bytes, int]]) -> bool:
    """Lay out `files` in `target` as upstream's atomic writer does; False if nothing changed."""
    target.mkdir(parents=True, exist_ok=True)
    data_link = target / "..data"
    if data_link.is_symlink():
        current = target / os.readlink(data_link)
        if _same_content(current, files):
            return False
    stamp = target / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.time_ns() % 10**9}"
    for rel, (content, mode) in files.items():
        path = stamp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        # Created with its mode (a secret is never readable by others, not even for a moment).
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            os.fchmod(f.fileno(), mode)
    tmp_link = target / "..data_tmp"
    tmp_link.unlink(missing_ok=True)
    tmp_link.symlink_to(stamp.name)
    old = os.readlink(data_link) if data_link.is_symlink() else None
    os.replace(tmp_link, data_link)
    tops = {rel.split("/", 1)[0] for rel in files}
    for top in tops:
        link = target / top
        if not link.is_symlink():
            link.symlink_to(f"..data/{top}")
    for entry in target.iterdir():
        if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in tops:
            entry.unlink()
    if old and old != stamp.name:
        shutil.rmtree(target / old, ignore_errors=True)
    return True


def _same_content(folder: Path, files: dict[str, tuple[bytes, int]]) -> bool:
    try:
        present = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
        if present != set(files):
            return False
        return all((folder / rel).read_bytes() == content for rel, (content, _) in files.items())
    except OSError:
        return False


class VolumeManager:
    def __init__(
        self,
        root_dir: str,
        fetch: Fetch,
        field_value: FieldValue,
        resource_value: ResourceValue | None = None,
        tokens: TokenManager | None = None,
        node_memory: Callable[[], int] = lambda: 0,
    ) -> None:
        self.root_dir = Path(root_dir)
        self.fetch = fetch
        self.field_value = field_value
        self.resource_value = resource_value
        self.tokens = tokens
        self.node_memory = node_memory  # the node's allocatable memory: the largest a tmpfs emptyDir gets

    def pod_volumes_dir(self, uid: str) -> Path:
        return self.root_dir / "pods" / uid / "volumes"

    async def prepare(self, pod: dict[str, Any]) -> dict[str, ReadyVolume]:
        """Every volume of the pod, ready to mount; raises VolumeError for the first that is not (for
        claims: every claim that is not, in the kubelet's `Unable to attach or mount volumes` form)."""
        ready = {}
        waiting: list[tuple[str, str]] = []
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            try:
                ready[volume["name"]] = await self._prepare_one(pod, volume)
            except claims.ClaimError as err:
                waiting.append((volume["name"], str(err)))
        if waiting:
            names = " ".join(sorted(n for n, _ in waiting))
            raise VolumeError(
                f"Unable to attach or mount volumes: unmounted volumes=[{names}], unattached volumes=[{names}], "
                f"failed to process volumes=[{names}]: {'; '.join(m for _, m in waiting)}"
            )
        return ready

    async def refresh(self, pod: dict[str, Any]) -> bool:
        """Rewrite the pod's configMap, secret, downwardAPI and projected volumes from the objects (and
        the pod's labels and annotations) as they are now, as upstream's periodic remount does; the
        atomic writer swaps a volume only when its content changed. True when something was rewritten.
        Mounts with a subPath keep what they bound at start (upstream's behaviour too)."""
        written = False
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            kind = _kind(volume)
            if kind in READ_ONLY_KINDS:
                written |= await self._write(pod, volume, kind)
        return written

    def refresh_in(self, uid: str) -> float | None:
        """Seconds until a token of the pod is due (None: the pod projects none)."""
        return self.tokens.next_refresh_in(uid) if self.tokens is not None else None

    def forget(self, uid: str) -> None:
        """The pod is gone: drop its tokens."""
        if self.tokens is not None:
            self.tokens.forget(uid)

    async def empty_dir_over_limit(self, pod: dict[str, Any]) -> str | None:
        """upstream's eviction manager for local storage: the message for the first disk-backed emptyDir
        whose usage is over its sizeLimit (`Usage of EmptyDir volume "v" exceeds the limit "1Mi". `),
        None when every one fits."""
        for volume in limited_empty_dirs(pod):
            limit_text = volume["emptyDir"]["sizeLimit"]
            try:
                limit = value(limit_text)
            except QuantityError:
                continue
            used = await asyncio.to_thread(disk_usage, self._folder(pod, "emptyDir", volume["name"]))
            if used > limit:
                return f'Usage of EmptyDir volume "{volume["name"]}" exceeds the limit "{limit_text}". '
        return None

    async def teardown(self, uid: str) -> list[str]:
        """Unmount whatever the pod's volumes mounted (tmpfs emptyDirs), before its folder goes."""
        return await asyncio.to_thread(unmount_under, self.root_dir / "pods" / uid)

    async def _prepare_one(self, pod: dict[str, Any], volume: dict[str, Any]) -> ReadyVolume:
        name, kind = volume["name"], _kind(volume)
        if kind not in SUPPORTED:
            raise VolumeError(
                f'MountVolume.SetUp failed for volume "{name}" : volume type {kind} is not supported by this node'
            )
        folder = self._folder(pod, kind, name)
        if kind == "emptyDir":
            if (volume["emptyDir"] or {}).get("medium") == "Memory":
                size = tmpfs_size(pod, volume, self.node_memory())
                try:
                    await asyncio.to_thread(mount_tmpfs, folder, size)
                except OSError as err:
                    raise VolumeError(f'MountVolume.SetUp failed for volume "{name}" : {err}') from None
            else:
                await asyncio.to_thread(_make_dir, folder, 0o777)
            await self._own(pod, folder, read_only=False)
            return ReadyVolume(name, kind, str(folder), False)
        if kind == "hostPath":
            path = await asyncio.to_thread(_host_path, volume["hostPath"], name)
            return ReadyVolume(name, kind, path, False)
        if kind == "persistentVolumeClaim":
            path = await claims.resolve(self.fetch, _host_path, pod["metadata"]["namespace"], volume)
            return ReadyVolume(name, kind, path, bool(volume[kind].get("readOnly")))
        await self._write(pod, volume, kind)
        return ReadyVolume(name, kind, str(folder), True)

    def _folder(self, pod: dict[str, Any], kind: str, name: str) -> Path:
        return self.pod_volumes_dir(pod["metadata"]["uid"]) / f"kubernetes.io~{kind.lower()}" / name

    async def _write(self, pod: dict[str, Any], volume: dict[str, Any], kind: str) -> bool:
        folder = self._folder(pod, kind, volume["name"])
        files = await self._files(pod, kind, volume[kind], volume["name"])
        written = await asyncio.to_thread(write_atomic, folder, files)
        if written:
            await self._own(pod, folder, read_only=True)
        return written

    async def _own(self, pod: dict[str, Any], folder: Path, read_only: bool) -> None:
        """fsGroup and fsGroupChangePolicy (agent/volumes/ownership.py)."""
        psc = (pod.get("spec") or {}).get("securityContext") or {}
        if psc.get("fsGroup") is None:
            return
        await asyncio.to_thread(
            set_ownership, folder, int(psc["fsGroup"]), read_only, psc.get("fsGroupChangePolicy") or ""
        )

    async def _files(
        self, pod: dict[str, Any], kind: str, src: dict[str, Any], volume: str
    ) -> dict[str, tuple[bytes, int]]:
        mode = int(src.get("defaultMode", DEFAULT_MODE))
        ns = pod["metadata"]["namespace"]
        if kind in ("configMap", "secret"):
            ref = src.get("name") if kind == "configMap" else src.get("secretName")
            obj = await self.fetch("ConfigMap" if kind == "configMap" else "Secret", ns, ref or "")
            if obj is None:
                if src.get("optional"):
                    return {}
                noun = "configmap" if kind == "configMap" else "secret"
                raise VolumeError(
                    f'MountVolume.SetUp failed for volume "{volume}" : {noun} "{ref}" not found'
                )
            return _select(_decode(obj, kind == "secret"), src.get("items"), mode, f"{kind} {ref}")
        if kind == "downwardAPI":
            return self._downward(pod, src.get("items") or [], mode)
        files: dict[str, tuple[bytes, int]] = {}
        for source in src.get("sources") or []:
            if source.get("configMap") is not None:
                files.update(
                    await self._files(pod, "configMap", {**source["configMap"], "defaultMode": mode}, volume)
                )
            elif source.get("secret") is not None:
                sec = dict(source["secret"])
                sec["secretName"] = sec.pop("name", "")
                files.update(await self._files(pod, "secret", {**sec, "defaultMode": mode}, volume))
            elif source.get("downwardAPI") is not None:
                files.update(self._downward(pod, source["downwardAPI"].get("items") or [], mode))
            elif source.get("serviceAccountToken") is not None and self.tokens is not None:
                files.update(await self._token(pod, source["serviceAccountToken"], mode, volume))
            else:
                kinds = [k for k in source if source[k] is not None]
                raise VolumeError(
                    f'MountVolume.SetUp failed for volume "{volume}" : projection {kinds} is not supported by this node'
                )
        return files

    async def _token(
        self, pod: dict[str, Any], src: dict[str, Any], mode: int, volume: str
    ) -> dict[str, tuple[bytes, int]]:
        """A bound token for the pod's account, as upstream's projection asks for it: the source's
        audience (none: the API server's), expirationSeconds (default 3600), bound to this pod. The file
        gets the volume's defaultMode (upstream makes it 0600 only for an fsGroup or fsUser it then chowns
        to, which this node does not do)."""
        assert self.tokens is not None
        meta, spec = pod["metadata"], pod.get("spec") or {}
        audiences = [src["audience"]] if src.get("audience") else []
        try:
            token = await self.tokens.get(
                meta["namespace"],
                spec.get("serviceAccountName") or "default",
                audiences,
                int(src.get("expirationSeconds") or 3600),
                meta["name"],
                meta["uid"],
            )
        except ApiError as err:
            raise VolumeError(
                f'MountVolume.SetUp failed for volume "{volume}" : failed to fetch token: {err.message or err}'
            ) from None
        return {src.get("path") or "token": (token.encode(), mode)}

    def _downward(
        self, pod: dict[str, Any], items: list[dict[str, Any]], mode: int
    ) -> dict[str, tuple[bytes, int]]:
        out = {}
        for item in items:
            if item.get("fieldRef"):
                path = item["fieldRef"]["fieldPath"]
                if path in ("metadata.labels", "metadata.annotations"):
                    values = pod["metadata"].get(path.split(".")[1]) or {}
                    text = "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
                else:
                    try:
                        text = self.field_value(pod, path)
                    except Exception as err:  # the field resolver's own error type: not ours to know
                        raise VolumeError(f"downwardAPI item {item['path']!r}: {err}") from None
            elif item.get("resourceFieldRef") and self.resource_value is not None:
                try:
                    text = self.resource_value(pod, item["resourceFieldRef"])
                except Exception as err:
                    raise VolumeError(f"downwardAPI item {item['path']!r}: {err}") from None
            else:
                text = ""
            out[item["path"]] = (text.encode(), int(item.get("mode", mode)))
        return out


def limited_empty_dirs(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's disk-backed emptyDir volumes with a sizeLimit (a memory one is bounded by its tmpfs)."""
    return [
        v
        for v in (pod.get("spec") or {}).get("volumes") or []
        if isinstance(v.get("emptyDir"), dict)
        and v["emptyDir"].get("sizeLimit")
        and v["emptyDir"].get("medium") != "Memory"
    ]


def _make_dir(path: Path, mode: int) -> None:
    """The folder with `mode`, set only when its permission bits differ (upstream's setupDir), so the
    setgid bit fsGroup gave it stays."""
    path.mkdir(parents=True, exist_ok=True)
    if path.stat().st_mode & 0o777 != mode:
        path.chmod(mode)


def _host_path(src: dict[str, Any], volume: str) -> str:
    path, kind = src["path"], src.get("type") or ""
    p = Path(path)
    if kind == "DirectoryOrCreate":
        p.mkdir(parents=True, exist_ok=True)
    elif kind == "FileOrCreate":
        p.parent.mkdir(parents=True, exist_ok=True)
        p.touch(exist_ok=True)
    checks = {
        "Directory": p.is_dir,
        "File": p.is_file,
        "Socket": p.is_socket,
        "CharDevice": p.is_char_device,
        "BlockDevice": p.is_block_device,
    }
    if kind in checks and not checks[kind]():
        raise VolumeError(
            f'MountVolume.SetUp failed for volume "{volume}" : hostPath type check failed: {path} is not a {kind.lower()}'
        )
    return path


def container_mounts(
    container: dict[str, Any], volumes: dict[str, ReadyVolume], env: dict[str, str] | None = None
) -> list[pb.Mount]:
    """CRI mounts for the container's volumeMounts; subPath and subPathExpr (expanded with `env`, the
    container's variables) as agent/volumes/subpath.py checks them."""
    out = []
    for vm in container.get("volumeMounts") or []:
        vol = volumes.get(vm["name"])
        if vol is None:
            raise VolumeError(f'unable to find volume "{vm["name"]}" for container "{container["name"]}"')
        host = vol.host_path
        try:
            sub = subpath.sub_path(vm, env or {})
            if sub:
                host = subpath.prepare(host, sub)
        except subpath.SubPathError as err:
            raise VolumeError(str(err)) from None
        propagation = {
            "HostToContainer": pb.PROPAGATION_HOST_TO_CONTAINER,
            "Bidirectional": pb.PROPAGATION_BIDIRECTIONAL,
        }.get(vm.get("mountPropagation") or "", pb.PROPAGATION_PRIVATE)
        out.append(
            pb.Mount(
                container_path=vm["mountPath"],
                host_path=host,
                readonly=bool(vm.get("readOnly")) or vol.read_only,
                propagation=propagation,
            )
        )
    return out
