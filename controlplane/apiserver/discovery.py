"""Discovery documents (/api, /apis, /api/v1, /apis/<g>/<v>) and /version, derived from the server's kind
table (kindtable.py)."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import TYPE_CHECKING, Any

from controlplane.apiserver.kinds.base import Kind, Subresource
from kubeclient.version import KUBERNETES_VERSION

if TYPE_CHECKING:
    from controlplane.apiserver.kindtable import KindTable

Obj = dict[str, Any]


def version_info() -> Obj:
    major, minor, _ = KUBERNETES_VERSION.lstrip("v").split(".")
    return {
        "major": major,
        "minor": minor,
        "gitVersion": KUBERNETES_VERSION,
        "gitCommit": "pykubelet",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "python3",
        "compiler": "cpython",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group(name: str, versions: list[str]) -> Obj:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def _versions_by_group(table: KindTable) -> dict[str, list[str]]:
    """Each group's versions, the preferred (the first the table names) first, as upstream lists autoscaling
    v2 before v1."""
    out: dict[str, list[str]] = {}
    for group, version in table.groups():
        out.setdefault(group, []).append(version)
    return out


def api_group_list(table: KindTable) -> Obj:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(g, vs) for g, vs in _versions_by_group(table).items()],
    }


def api_group(table: KindTable, name: str) -> Obj | None:
    versions = _versions_by_group(table).get(name)
    if versions:
        return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}
    return None


def sub_kind(res: Kind, sub: Subresource) -> tuple[str, str, str]:
    """The group, version and kind a subresource answers with (its parent's unless it says otherwise)."""
    return (sub.group, sub.version, sub.kind) if sub.kind else (res.group, res.version, res.kind)


def _storage_hash(res: Kind) -> str:
    digest = hashlib.sha256(f"{res.group}/{res.version}/{res.kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def _with_names(entry: Obj, res: Kind) -> Obj:
    """Short names and categories, present only when the resource has them (as upstream)."""
    if res.short_names:
        entry["shortNames"] = list(res.short_names)
    if res.categories:
        entry["categories"] = list(res.categories)
    return entry


def _resource_entries(res: Kind) -> list[Obj]:
    entry: Obj = _with_names(
        {
            "name": res.plural,
            "singularName": res.singular,
            "namespaced": res.namespaced,
            "kind": res.kind,
            "verbs": sorted(res.verbs),
        },
        res,
    )
    if "get" in res.verbs:
        entry["storageVersionHash"] = _storage_hash(res)
    out = [entry]
    for sub in res.subresources:
        group, version, kind = sub_kind(res, sub)
        sub_entry: Obj = {
            "name": f"{res.plural}/{sub.name}",
            "singularName": "",
            "namespaced": res.namespaced,
            "kind": kind,
            "verbs": sorted(sub.verbs),
        }
        if (group, version) != (res.group, res.version):
            sub_entry["group"] = group
            sub_entry["version"] = version
        out.append(sub_entry)
    return out


def resource_list(table: KindTable, group: str, version: str) -> Obj | None:
    resources = table.by_group_version(group, version)
    if not resources:
        return None
    items = [e for r in resources for e in _resource_entries(r)]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": items,
    }


def etag(doc: Obj) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def wants_aggregated(accept: str) -> bool:
    """kubectl asks for the aggregated v2 form first; one request then replaces one per group."""
    return any(
        "as=APIGroupDiscoveryList" in part and "v=v2" in part.replace("v=v2beta1", "")
        for part in accept.split(",")
    )


def _aggregated_resource(res: Kind) -> Obj:
    entry: Obj = _with_names(
        {
            "resource": res.plural,
            "responseKind": {"group": res.group, "version": res.version, "kind": res.kind},
            "scope": "Namespaced" if res.namespaced else "Cluster",
            "singularResource": res.singular,
            "verbs": sorted(res.verbs),
        },
        res,
    )
    subs = []
    for sub in res.subresources:
        group, version, kind = sub_kind(res, sub)
        subs.append(
            {
                "subresource": sub.name,
                "responseKind": {"group": group, "version": version, "kind": kind},
                "verbs": sorted(sub.verbs),
            }
        )
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated(table: KindTable, core: bool) -> Obj:
    wanted = {"": ["v1"]} if core else _versions_by_group(table)
    items = []
    for group, versions in wanted.items():
        meta = {"name": group} if group else {}
        entries = [
            {
                "version": version,
                "resources": [_aggregated_resource(r) for r in table.by_group_version(group, version)],
                "freshness": "Current",
            }
            for version in versions
        ]
        items.append({"metadata": meta, "versions": entries})
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }
