"""The volume plugin table: each pod volume type (the field of the pod's volume that names its source:
emptyDir, hostPath, configMap, ...) is one plugin module, registered here by that field's name, as
upstream's kubelet keeps its VolumePluginMgr. The manager finds a volume's plugin in the table and asks
it to set the volume up, to rewrite it on sync and to take it down when the pod goes; a type the table
does not hold is upstream's "volume type X is not supported by this node".

`VolumeHost` is what every plugin may use of the node: the agent's root folder, the API reads (and the
few writes: a claim's status, events), the field resolvers of the downward API, the token manager and
the node's memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agent.volumes.ownership import set_ownership
from agent.volumes.tokens import TokenManager

Fetch = Callable[[str, str, str], Awaitable[dict[str, Any] | None]]
FieldValue = Callable[[dict[str, Any], str], str]
# (pod, resourceFieldRef) -> the value as text; the pod layer knows the rule (requests, limits, divisors).
ResourceValue = Callable[[dict[str, Any], dict[str, Any]], str]
Record = Callable[[dict[str, Any], str, str, str], None]


class VolumeError(Exception):
    """Volumes cannot be set up now: `messages` are the FailedMount events the kubelet records for it, in
    upstream's wording (one per failed operation; none while a volume only waits for its attachment)."""

    def __init__(self, *messages: str) -> None:
        super().__init__("; ".join(messages))
        self.messages = messages


class AttachPending(VolumeError):
    """The volume waits for the attach/detach controller to attach it: the kubelet records no event for
    that (the controller's FailedAttachVolume tells why); the pod waits and the volume counts among the
    `unattached volumes` of the kubelet's wait message."""

    def __init__(self) -> None:
        super().__init__()


# Upstream's in-tree plugin names where they are not the volume type's name in lower case
# (pkg/volume/emptydir: kubernetes.io/empty-dir; pkg/volume/downwardapi: kubernetes.io/downward-api).
_PLUGIN_NAMES = {"emptyDir": "empty-dir", "downwardAPI": "downward-api"}


def plugin_folder(kind: str) -> str:
    """The folder of a volume type's volumes under a pod's volumes/: kubernetes.io~<plugin name>."""
    return "kubernetes.io~" + _PLUGIN_NAMES.get(kind, kind.lower())


@dataclass(frozen=True)
class ReadyVolume:
    name: str
    kind: str
    host_path: str
    read_only: bool


@dataclass(frozen=True)
class VolumeUsage:
    """A volume's figures as its plugin measured them (upstream's volume.Metrics), for the Summary's pod
    volume stats and the kubelet_volume_stats_* series: `name` is the pod's volume name, `folder` the
    volume's folder under the pod's volumes (<kind>/<name>), `claim` (namespace, name) the claim behind
    it, if any."""

    name: str
    folder: str
    time: float
    capacity: int
    available: int
    used: int
    inodes: int
    inodes_free: int
    inodes_used: int
    claim: tuple[str, str] | None = None


@dataclass
class VolumeHost:
    root_dir: Path
    fetch: Fetch
    field_value: FieldValue
    resource_value: ResourceValue | None = None
    tokens: TokenManager | None = None
    node_memory: Callable[[], int] = lambda: 0  # the node's allocatable memory: the largest tmpfs emptyDir
    # API writes a volume type may need (a claim's status after NodeExpandVolume): a merge patch of a path
    patch: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]] | None = None
    record: Record | None = None  # an event: (object, type, reason, message)

    def pod_volumes_dir(self, uid: str) -> Path:
        return self.root_dir / "pods" / uid / "volumes"

    def folder(self, pod: dict[str, Any], kind: str, name: str) -> Path:
        """<root>/pods/<uid>/volumes/<plugin>/<name>, upstream's layout: the plugin's name with its '/'
        escaped as '~' (kubernetes.io~empty-dir, kubernetes.io~configmap, ...), which tools that read a
        node's pod folders (backup agents, log shippers, du scripts) look for."""
        return self.pod_volumes_dir(pod["metadata"]["uid"]) / plugin_folder(kind) / name

    async def own(self, pod: dict[str, Any], folder: Path, read_only: bool) -> None:
        """fsGroup and fsGroupChangePolicy (agent/volumes/ownership.py)."""
        psc = (pod.get("spec") or {}).get("securityContext") or {}
        if psc.get("fsGroup") is None:
            return
        await asyncio.to_thread(
            set_ownership, folder, int(psc["fsGroup"]), read_only, psc.get("fsGroupChangePolicy") or ""
        )


class VolumePlugin(Protocol):
    """One volume type. `kind` is the pod volume field it serves."""

    kind: str

    async def set_up(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> ReadyVolume:
        """Make the volume ready to bind into containers (VolumeError, or claims.ClaimError to wait)."""
        ...

    async def refresh(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> bool:
        """Rewrite the volume from its sources on the pod's sync; True when something changed."""
        ...

    async def tear_down(self, host: VolumeHost, uid: str) -> None:
        """Undo what this type did for the pod `uid` (its spec may be gone), before its folder goes."""
        ...

    async def stats(self, host: VolumeHost, uid: str) -> list[VolumeUsage]:
        """The figures of the pod `uid`'s volumes of this type that the plugin measures itself (CSI:
        NodeGetVolumeStats); the stats provider measures the others' folders."""
        ...

    async def in_use(self, host: VolumeHost) -> list[str]:
        """The unique names of this type's attachable volumes mounted on the node (volumesInUse)."""
        ...


class PluginBase:
    """Defaults for a plugin with nothing to rewrite on sync and nothing of its own to take down."""

    kind = ""

    async def refresh(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> bool:
        return False

    async def tear_down(self, host: VolumeHost, uid: str) -> None:
        return None

    async def stats(self, host: VolumeHost, uid: str) -> list[VolumeUsage]:
        return []

    async def in_use(self, host: VolumeHost) -> list[str]:
        return []


class PluginTable:
    """The registered volume plugins, by the volume field each serves (in registration order)."""

    def __init__(self, plugins: Iterable[VolumePlugin] = ()) -> None:
        self._plugins: dict[str, VolumePlugin] = {}
        for plugin in plugins:
            self.register(plugin)

    def register(self, plugin: VolumePlugin) -> None:
        if plugin.kind in self._plugins:
            raise ValueError(f"volume plugin {plugin.kind!r} is registered twice")
        self._plugins[plugin.kind] = plugin

    def kinds(self) -> tuple[str, ...]:
        return tuple(self._plugins)

    def find(self, kind: str) -> VolumePlugin | None:
        return self._plugins.get(kind)

    def kind_of(self, volume: dict[str, Any]) -> str:
        """The volume's type: the first registered field it sets, else the first field it has (a type
        this node does not serve), emptyDir for a volume with no source (the API's default)."""
        for kind in self._plugins:
            if volume.get(kind) is not None:
                return kind
        others = [k for k in volume if k != "name"]
        return others[0] if others else "emptyDir"

    def __iter__(self):
        return iter(self._plugins.values())
