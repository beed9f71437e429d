"""API discovery: which resources a server serves, and where a (apiVersion, kind) lives.

The garbage collector watches every kind that can own or be owned, and must turn an ownerReference's
apiVersion and kind into a URL; a controller that works on any kind needs the same map (client-go's
discovery client and RESTMapper).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from kubeclient.client import KubeClient


@dataclass(frozen=True)
class ApiResource:
    group_version: str  # "v1", "apps/v1"
    kind: str
    plural: str
    namespaced: bool
    verbs: frozenset[str]

    @property
    def group(self) -> str:
        return self.group_version.rpartition("/")[0] if "/" in self.group_version else ""

    def collection(self, namespace: str = "") -> str:
        base = (
            f"/api/{self.group_version}" if "/" not in self.group_version else f"/apis/{self.group_version}"
        )
        if self.namespaced and namespace:
            return f"{base}/namespaces/{quote(namespace)}/{self.plural}"
        return f"{base}/{self.plural}"

    def path(self, namespace: str, name: str) -> str:
        return f"{self.collection(namespace if self.namespaced else '')}/{quote(name)}"


async def server_resources(client: KubeClient) -> list[ApiResource]:
    """Every top-level resource of every served group version (subresources left out)."""
    versions = ["v1"]
    groups = await client.get("/apis")
    for group in groups.get("groups") or []:
        for version in group.get("versions") or []:
            if version.get("groupVersion"):
                versions.append(version["groupVersion"])
    out: list[ApiResource] = []
    for gv in versions:
        doc = await client.get(f"/api/{gv}" if gv == "v1" else f"/apis/{gv}")
        for entry in doc.get("resources") or []:
            if "/" in entry.get("name", ""):
                continue
            out.append(
                ApiResource(
                    gv,
                    entry.get("kind", ""),
                    entry["name"],
                    bool(entry.get("namespaced")),
                    frozenset(entry.get("verbs") or ()),
                )
            )
    return out


class RestMapper:
    """(apiVersion, kind) -> ApiResource, from discovery."""

    def __init__(self, resources: list[ApiResource]) -> None:
        self.resources = resources
        self._by_kind = {(r.group_version, r.kind): r for r in resources}

    def lookup(self, api_version: str, kind: str) -> ApiResource | None:
        return self._by_kind.get((api_version, kind))
