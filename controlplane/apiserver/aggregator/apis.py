"""The APIServices the server knows (kept in step with the watch cache, synchronously with each commit),
by group/version, and what discovery shows for the aggregated ones: their groups in /apis and
/apis/<group> (served here, as kube-aggregator serves them), their resources in the aggregated (v2)
discovery document from the backend's last good /apis/<group>/<version> answer."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from controlplane.apiserver.kinds.apiservice import KIND as APISERVICES
from controlplane.storage.cache import CacheEvent, WatchCache

Obj = dict[str, Any]


@dataclass(frozen=True)
class APIServiceInfo:
    """The parts of an APIService the proxy and discovery read, parsed once."""

    name: str
    group: str
    version: str
    service_namespace: str
    service_name: str
    port: int
    ca_bundle: bytes
    insecure: bool
    group_priority: int
    version_priority: int
    available: bool

    @property
    def local(self) -> bool:
        return not self.service_name

    @classmethod
    def parse(cls, obj: Obj) -> APIServiceInfo:
        spec = obj.get("spec") or {}
        svc = spec.get("service") or {}
        conditions = (obj.get("status") or {}).get("conditions") or []
        available = any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)
        try:
            ca = base64.b64decode(spec.get("caBundle") or "")
        except ValueError:
            ca = b""
        return cls(
            obj["metadata"]["name"],
            spec.get("group", "") or "",
            spec.get("version", "") or "",
            svc.get("namespace", "") or "",
            svc.get("name", "") or "",
            int(svc.get("port") or 443),
            ca,
            bool(spec.get("insecureSkipTLSVerify")),
            int(spec.get("groupPriorityMinimum") or 0),
            int(spec.get("versionPriority") or 0),
            available,
        )


class APIServices:
    def __init__(self, cache: WatchCache) -> None:
        self.cache = cache
        self.by_name: dict[str, APIServiceInfo] = {}
        self.resources: dict[tuple[str, str], list[Obj]] = {}  # the backends' last APIResourceList entries
        self.listeners: list[Any] = []

    def start(self) -> None:
        for cached in self.cache.subscribe(APISERVICES.bucket, self._on_event):
            info = APIServiceInfo.parse(cached.obj)
            self.by_name[info.name] = info

    def _on_event(self, event: CacheEvent) -> None:
        name = event.obj.key.rsplit("/", 1)[-1]
        if event.type == "DELETED":
            old = self.by_name.pop(name, None)
            if old is not None:
                self.resources.pop((old.group, old.version), None)
        else:
            self.by_name[name] = APIServiceInfo.parse(event.obj.obj)
        for listener in self.listeners:
            listener(name)

    def remote(self, group: str, version: str) -> APIServiceInfo | None:
        """The APIService proxying group/version, None when it is served here (or not at all)."""
        info = self.by_name.get(f"{version}.{group}")
        return info if info is not None and not info.local else None

    def remote_groups(self, local: set[str]) -> list[tuple[str, list[APIServiceInfo]]]:
        """Aggregated groups (not served here) with their versions, upstream's order: groups by
        groupPriorityMinimum (highest first), versions by versionPriority (highest first)."""
        grouped: dict[str, list[APIServiceInfo]] = {}
        for info in self.by_name.values():
            if not info.local and info.group and info.group not in local:
                grouped.setdefault(info.group, []).append(info)
        out = []
        for group, versions in grouped.items():
            versions.sort(key=lambda i: (-i.version_priority, i.version))
            out.append((group, versions))
        out.sort(key=lambda gv: (-max(i.group_priority for i in gv[1]), gv[0]))
        return out


def group_doc(group: str, versions: list[APIServiceInfo]) -> Obj:
    entries = [{"groupVersion": f"{group}/{i.version}", "version": i.version} for i in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def aggregated_items(apis: APIServices, local: set[str]) -> list[Obj]:
    """APIGroupDiscovery entries for the aggregated groups (apidiscovery.k8s.io/v2), from the resource
    lists the availability check fetched; a version not yet fetched is listed Stale with no resources."""
    items = []
    for group, versions in apis.remote_groups(local):
        out_versions = []
        for info in versions:
            entries = apis.resources.get((group, info.version))
            resources = [_v2_resource(group, info.version, e) for e in entries or [] if "/" not in e["name"]]
            for entry in entries or []:
                if "/" in entry["name"]:
                    _attach_subresource(resources, group, info.version, entry)
            out_versions.append(
                {
                    "version": info.version,
                    "resources": resources,
                    "freshness": "Current" if entries is not None and info.available else "Stale",
                }
            )
        items.append({"metadata": {"name": group}, "versions": out_versions})
    return items


def _v2_resource(group: str, version: str, entry: Obj) -> Obj:
    out: Obj = {
        "resource": entry["name"],
        "responseKind": {"group": group, "version": version, "kind": entry.get("kind", "")},
        "scope": "Namespaced" if entry.get("namespaced") else "Cluster",
        "singularResource": entry.get("singularName", ""),
        "verbs": sorted(entry.get("verbs") or []),
    }
    if entry.get("shortNames"):
        out["shortNames"] = entry["shortNames"]
    if entry.get("categories"):
        out["categories"] = entry["categories"]
    return out


def _attach_subresource(resources: list[Obj], group: str, version: str, entry: Obj) -> None:
    parent, _, sub = entry["name"].partition("/")
    for res in resources:
        if res["resource"] == parent:
            res.setdefault("subresources", []).append(
                {
                    "subresource": sub,
                    "responseKind": {"group": group, "version": version, "kind": entry.get("kind", "")},
                    "verbs": sorted(entry.get("verbs") or []),
                }
            )
