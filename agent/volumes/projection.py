"""configMap, secret, downwardAPI and projected volumes: files written from API objects and the pod.

They are written the way upstream's atomic writer lays them out: the files live in a timestamped folder,
`..data` is a symlink to it that is swapped in one rename, and each top-level name is a symlink through
`..data`. A reader inside the container thus never sees half an update. Such volumes are mounted
read-only, as upstream does, and rewritten on each sync of the pod (`refresh`).

A projected `serviceAccountToken` source is a token from TokenRequest bound to the pod (tokens.py keeps
them). The objects are read by name (GET), as the Node authorizer allows.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import time
from pathlib import Path
from typing import Any

from agent.volumes.plugin import PluginBase, ReadyVolume, VolumeError, VolumeHost
from kubeclient.errors import ApiError

DEFAULT_MODE = 0o644
KINDS = ("configMap", "secret", "downwardAPI", "projected")


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


class ProjectionPlugin(PluginBase):
    """One of the four written kinds (`kind` is configMap, secret, downwardAPI or projected)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    async def set_up(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> ReadyVolume:
        await self.refresh(host, pod, volume)
        return ReadyVolume(volume["name"], self.kind, str(host.folder(pod, self.kind, volume["name"])), True)

    async def refresh(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> bool:
        folder = host.folder(pod, self.kind, volume["name"])
        files = await _files(host, pod, self.kind, volume[self.kind], volume["name"])
        written = await asyncio.to_thread(write_atomic, folder, files)
        if written:
            await host.own(pod, folder, read_only=True)
        return written


async def _files(
    host: VolumeHost, pod: dict[str, Any], kind: str, src: dict[str, Any], volume: str
) -> dict[str, tuple[bytes, int]]:
    mode = int(src.get("defaultMode", DEFAULT_MODE))
    ns = pod["metadata"]["namespace"]
    if kind in ("configMap", "secret"):
        ref = src.get("name") if kind == "configMap" else src.get("secretName")
        obj = await host.fetch("ConfigMap" if kind == "configMap" else "Secret", ns, ref or "")
        if obj is None:
            if src.get("optional"):
                return {}
            noun = "configmap" if kind == "configMap" else "secret"
            raise VolumeError(f'MountVolume.SetUp failed for volume "{volume}" : {noun} "{ref}" not found')
        return _select(_decode(obj, kind == "secret"), src.get("items"), mode, f"{kind} {ref}")
    if kind == "downwardAPI":
        return _downward(host, pod, src.get("items") or [], mode)
    files: dict[str, tuple[bytes, int]] = {}
    for source in src.get("sources") or []:
        if source.get("configMap") is not None:
            files.update(
                await _files(host, pod, "configMap", {**source["configMap"], "defaultMode": mode}, volume)
            )
        elif source.get("secret") is not None:
            sec = dict(source["secret"])
            sec["secretName"] = sec.pop("name", "")
            files.update(await _files(host, pod, "secret", {**sec, "defaultMode": mode}, volume))
        elif source.get("downwardAPI") is not None:
            files.update(_downward(host, pod, source["downwardAPI"].get("items") or [], mode))
        elif source.get("serviceAccountToken") is not None and host.tokens is not None:
            files.update(await _token(host, pod, source["serviceAccountToken"], mode, volume))
        else:
            kinds = [k for k in source if source[k] is not None]
            raise VolumeError(
                f'MountVolume.SetUp failed for volume "{volume}" : projection {kinds} is not supported by this node'
            )
    return files


async def _token(
    host: VolumeHost, pod: dict[str, Any], src: dict[str, Any], mode: int, volume: str
) -> dict[str, tuple[bytes, int]]:
    """A bound token for the pod's account, as upstream's projection asks for it: the source's
    audience (none: the API server's), expirationSeconds (default 3600), bound to this pod. The file
    gets the volume's defaultMode (upstream makes it 0600 only for an fsGroup or fsUser it then chowns
    to, which this node does not do)."""
    assert host.tokens is not None
    meta, spec = pod["metadata"], pod.get("spec") or {}
    audiences = [src["audience"]] if src.get("audience") else []
    try:
        token = await host.tokens.get(
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
    host: VolumeHost, pod: dict[str, Any], items: list[dict[str, Any]], mode: int
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
                    text = host.field_value(pod, path)
                except Exception as err:  # the field resolver's own error type: not ours to know
                    raise VolumeError(f"downwardAPI item {item['path']!r}: {err}") from None
        elif item.get("resourceFieldRef") and host.resource_value is not None:
            try:
                text = host.resource_value(pod, item["resourceFieldRef"])
            except Exception as err:
                raise VolumeError(f"downwardAPI item {item['path']!r}: {err}") from None
        else:
            text = ""
        out[item["path"]] = (text.encode(), int(item.get("mode", mode)))
    return out
