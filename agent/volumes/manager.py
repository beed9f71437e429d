"""The pod's volumes made ready on the host and turned into CRI mounts.

Each volume type is a plugin in the table (plugin.py; `default_table` below registers the node's
types): emptyDir (emptydir.py), hostPath (hostpath.py), configMap, secret, downwardAPI and projected
(projection.py), persistentVolumeClaim (claims.py) and whatever else the agent adds (csi). The manager
finds each volume's plugin, collects the claims still waiting into the kubelet's one FailedMount
message, rewrites the written kinds on each sync (`refresh`, called on the pod worker's periodic sync,
syncFrequency, 1 min by default, and on every change of the pod: a changed ConfigMap, Secret, label,
annotation or a token due reaches running containers, as upstream's remount on sync does), and takes
every plugin's part down when the pod goes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from agent.cri import pb
from agent.volumes import claims, subpath
from agent.volumes.emptydir import EmptyDirPlugin, disk_usage, unmount_under
from agent.volumes.hostpath import HostPathPlugin
from agent.volumes.mountwait import MountWaits
from agent.volumes.plugin import (
    AttachPending,
    Fetch,
    FieldValue,
    PluginTable,
    ReadyVolume,
    Record,
    ResourceValue,
    VolumeError,
    VolumeHost,
    VolumePlugin,
    VolumeUsage,
)
from agent.volumes.projection import KINDS as WRITTEN_KINDS
from agent.volumes.projection import ProjectionPlugin
from agent.volumes.tokens import TokenManager
from kubeclient.quantity import QuantityError, value

log = logging.getLogger("agent.volumes")


def default_table(
    extra: Iterable[VolumePlugin] = (), claim_sources: Iterable[claims.PersistentSource] = ()
) -> PluginTable:
    """The node's volume types; `extra` adds more (csi), `claim_sources` the PersistentVolume sources a
    claim may be backed by beyond hostPath and local."""
    claim = claims.ClaimPlugin({s.field: s for s in claim_sources})
    return PluginTable(
        [
            EmptyDirPlugin(),
            HostPathPlugin(),
            claim,
            *(ProjectionPlugin(kind) for kind in WRITTEN_KINDS),
            claims.EphemeralPlugin(claim),
            *extra,
        ]
    )


class VolumeManager:
    def __init__(
        self,
        root_dir: str,
        fetch: Fetch,
        field_value: FieldValue,
        resource_value: ResourceValue | None = None,
        tokens: TokenManager | None = None,
        node_memory: Callable[[], int] = lambda: 0,
        table: PluginTable | None = None,
        patch: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]] | None = None,
        record: Record | None = None,
        waits: MountWaits | None = None,
    ) -> None:
        self.host = VolumeHost(
            Path(root_dir), fetch, field_value, resource_value, tokens, node_memory, patch, record
        )
        self.table = table if table is not None else default_table()
        self.root_dir = self.host.root_dir
        self.tokens = tokens
        self.waits = waits if waits is not None else MountWaits()

    def pod_volumes_dir(self, uid: str) -> Path:
        return self.host.pod_volumes_dir(uid)

    async def prepare(self, pod: dict[str, Any]) -> dict[str, ReadyVolume]:
        """Every volume of the pod a container uses, ready to mount. A volume no container (init,
        regular or ephemeral) mounts or uses as a device is not set up at all, as upstream's
        desired-state populator skips it (`Skipping unused volume`): its source need not exist. Each
        used volume is tried (as upstream's reconciler tries each on its own); when one is not ready,
        VolumeError carries the kubelet's FailedMount messages: each failed operation's own
        (`MountVolume.SetUp failed for volume ...`) and, for claims the desired-state populator could not
        process, the volume manager's `Unable to attach or mount volumes` message. A volume that only
        waits for its attachment adds no message. A pod whose volumes are still not ready after
        upstream's 2 min 3 s gets upstream's `Error syncing pod, skipping` log line (mountwait.py)."""
        ready = {}
        unprocessed: list[tuple[str, str]] = []
        unattached: list[str] = []
        failed: list[str] = []
        for volume in used_volumes(pod):
            try:
                ready[volume["name"]] = await self._prepare_one(pod, volume)
            except claims.ClaimError as err:
                unprocessed.append((volume["name"], str(err)))
            except AttachPending:
                unattached.append(volume["name"])
            except VolumeError as err:
                failed.extend(err.messages)
        uid = pod["metadata"]["uid"]
        if not (unprocessed or failed or unattached):
            self.waits.done(uid)
            return ready
        lists = wait_lists(pod, ready, sorted(unattached), unprocessed)
        self.waits.failed(pod_name(pod), uid, lists)
        messages = [wait_message(lists, unprocessed)] if unprocessed else []
        raise VolumeError(*messages, *failed)

    async def refresh(self, pod: dict[str, Any]) -> bool:
        """Rewrite the pod's volumes from their sources as they are now (the written kinds: configMap,
        secret, downwardAPI, projected), as upstream's periodic remount does; the atomic writer swaps a
        volume only when its content changed. True when something was rewritten. Mounts with a subPath
        keep what they bound at start (upstream's behaviour too)."""
        written = False
        for volume in used_volumes(pod):
            plugin = self.table.find(self.table.kind_of(volume))
            if plugin is not None:
                written |= await plugin.refresh(self.host, pod, volume)
        return written

    def refresh_in(self, uid: str) -> float | None:
        """Seconds until a token of the pod is due (None: the pod projects none)."""
        return self.tokens.next_refresh_in(uid) if self.tokens is not None else None

    def forget(self, uid: str) -> None:
        """The pod is gone: drop its tokens and its wait."""
        self.waits.done(uid)
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
            used = await asyncio.to_thread(disk_usage, self.host.folder(pod, "emptyDir", volume["name"]))
            if used > limit:
                return f'Usage of EmptyDir volume "{volume["name"]}" exceeds the limit "{limit_text}". '
        return None

    async def teardown(self, uid: str) -> list[str]:
        """Each plugin takes its part of the pod down (a CSI volume unpublished and, when no other pod
        uses it, unstaged); then whatever is still mounted below the pod's folder (tmpfs emptyDirs) is
        unmounted, before the folder goes."""
        for plugin in self.table:
            await plugin.tear_down(self.host, uid)
        return await asyncio.to_thread(unmount_under, self.root_dir / "pods" / uid)

    async def stats(self, uid: str) -> list[VolumeUsage]:
        """The figures the plugins measure themselves for the pod `uid`'s volumes (CSI volumes)."""
        out: list[VolumeUsage] = []
        for plugin in self.table:
            out.extend(await plugin.stats(self.host, uid))
        return out

    async def in_use(self) -> list[str]:
        """node.status.volumesInUse: the attachable volumes mounted on the node, by unique name, sorted."""
        names: set[str] = set()
        for plugin in self.table:
            names.update(await plugin.in_use(self.host))
        return sorted(names)

    async def _prepare_one(self, pod: dict[str, Any], volume: dict[str, Any]) -> ReadyVolume:
        kind = self.table.kind_of(volume)
        plugin = self.table.find(kind)
        if plugin is None:
            raise VolumeError(
                f'MountVolume.SetUp failed for volume "{volume["name"]}" : volume type {kind} is not supported '
                "by this node"
            )
        return await plugin.set_up(self.host, pod, volume)


def wait_lists(
    pod: dict[str, Any],
    ready: dict[str, ReadyVolume],
    unattached: list[str],
    unprocessed: list[tuple[str, str]],
) -> str:
    """WaitForAttachAndMount's error without its cause: the volumes the containers use that are not
    mounted, those waiting for their attachment, those not processed. Each list sorted, space-separated,
    as Go prints a []string."""
    unmounted = sorted(n for n in used_volume_names(pod) if n not in ready)
    not_processed = sorted(n for n, _ in unprocessed)
    return (
        f"unmounted volumes=[{' '.join(unmounted)}], unattached volumes=[{' '.join(unattached)}], "
        f"failed to process volumes=[{' '.join(not_processed)}]"
    )


def wait_message(lists: str, unprocessed: list[tuple[str, str]]) -> str:
    """upstream's FailedMount for a pod whose claims the populator could not process (kubelet.go's
    `Unable to attach or mount volumes: %v` over WaitForAttachAndMount's error, whose cause is then
    the populator's errors)."""
    return f"Unable to attach or mount volumes: {lists}: " + "; ".join(m for _, m in unprocessed)


def used_volume_names(pod: dict[str, Any]) -> set[str]:
    """The volumes a container of the pod (init, regular or ephemeral) mounts or uses as a block device
    (upstream's GetPodVolumeNames over all containers)."""
    return {
        ref["name"]
        for kind in ("initContainers", "containers", "ephemeralContainers")
        for c in (pod.get("spec") or {}).get(kind) or []
        for ref in [*(c.get("volumeMounts") or []), *(c.get("volumeDevices") or [])]
    }


def used_volumes(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's volumes that some container uses, in the pod's order; the others are skipped (logged
    at debug level, as upstream's populator logs `Skipping unused volume` at V(4))."""
    used = used_volume_names(pod)
    out = []
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if volume.get("name") in used:
            out.append(volume)
        else:
            log.debug("Skipping unused volume pod=%s volume=%s", pod_name(pod), volume.get("name"))
    return out


def pod_name(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def limited_empty_dirs(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's disk-backed emptyDir volumes with a sizeLimit (a memory one is bounded by its tmpfs)."""
    return [
        v
        for v in (pod.get("spec") or {}).get("volumes") or []
        if isinstance(v.get("emptyDir"), dict)
        and v["emptyDir"].get("sizeLimit")
        and v["emptyDir"].get("medium") != "Memory"
    ]


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
