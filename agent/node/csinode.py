"""The node's CSINode object and CSI annotations, as upstream's nodeinfomanager writes them when a CSI
driver registers or goes: the CSINode named after the node (owned by the Node) lists each driver with
the node ID it gave, its topology keys (sorted) and its allocatable volume count (when it gave a limit);
the Node gets the topology segments as labels and the `csi.volume.kubernetes.io/nodeid` annotation (a
JSON map driver -> node ID). A driver going away leaves the CSINode and the annotation, keeps the labels
(upstream's uninstall keeps them too). Writes are read-modify-replace, tried again on a conflict."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from kubeclient.client import KubeClient
from kubeclient.errors import ApiError

NODE_ID_ANNOTATION = "csi.volume.kubernetes.io/nodeid"
CSINODES = "/apis/storage.k8s.io/v1/csinodes"
ATTEMPTS = 5


class CSINodeWriter:
    def __init__(self, client: KubeClient, node_name: str) -> None:
        self.client = client
        self.node_name = node_name

    @property
    def _node_path(self) -> str:
        return f"/api/v1/nodes/{self.node_name}"

    async def install(self, driver: str, node_id: str, topology: dict[str, str], max_volumes: int) -> None:
        def node_edit(node: dict[str, Any]) -> None:
            meta = node["metadata"]
            ids = _ids(meta)
            ids[driver] = node_id
            meta.setdefault("annotations", {})[NODE_ID_ANNOTATION] = json.dumps(ids, sort_keys=True)
            meta.setdefault("labels", {}).update(topology)

        node = await self._update(self._node_path, node_edit)
        entry: dict[str, Any] = {"name": driver, "nodeID": node_id, "topologyKeys": sorted(topology) or None}
        if max_volumes > 0:
            entry["allocatable"] = {"count": max_volumes}
        entry = {k: v for k, v in entry.items() if v is not None}

        def csinode_edit(obj: dict[str, Any]) -> None:
            drivers = [d for d in (obj.get("spec") or {}).get("drivers") or [] if d.get("name") != driver]
            obj.setdefault("spec", {})["drivers"] = [*drivers, entry]

        await self._update_csinode(node, csinode_edit)

    async def uninstall(self, driver: str) -> None:
        def node_edit(node: dict[str, Any]) -> None:
            meta = node["metadata"]
            ids = _ids(meta)
            ids.pop(driver, None)
            annotations = meta.setdefault("annotations", {})
            if ids:
                annotations[NODE_ID_ANNOTATION] = json.dumps(ids, sort_keys=True)
            else:
                annotations.pop(NODE_ID_ANNOTATION, None)

        node = await self._update(self._node_path, node_edit)

        def csinode_edit(obj: dict[str, Any]) -> None:
            drivers = [d for d in (obj.get("spec") or {}).get("drivers") or [] if d.get("name") != driver]
            obj.setdefault("spec", {})["drivers"] = drivers

        await self._update_csinode(node, csinode_edit)

    async def _update_csinode(self, node: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> None:
        path = f"{CSINODES}/{self.node_name}"
        for _ in range(ATTEMPTS):
            try:
                await self._update(path, edit)
                return
            except ApiError as err:
                if err.status != 404:
                    raise
            body: dict[str, Any] = {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSINode",
                "metadata": {
                    "name": self.node_name,
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": self.node_name,
                            "uid": node["metadata"]["uid"],
                        }
                    ],
                },
                "spec": {"drivers": []},
            }
            edit(body)
            try:
                await self.client.create(CSINODES, body)
                return
            except ApiError as err:
                if err.status != 409:  # made meanwhile: edit that one
                    raise
        raise ApiError(409, "Conflict", f"CSINode {self.node_name} kept changing")

    async def _update(self, path: str, edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        return await _read_modify_replace(self.client.get, self.client.replace, path, edit)


def _ids(meta: dict[str, Any]) -> dict[str, str]:
    try:
        found = json.loads((meta.get("annotations") or {}).get(NODE_ID_ANNOTATION) or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


async def _read_modify_replace(
    get: Callable[[str], Awaitable[dict[str, Any]]],
    replace: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]],
    path: str,
    edit: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    for _ in range(ATTEMPTS):
        obj = await get(path)
        edit(obj)
        try:
            return await replace(path, obj)
        except ApiError as err:
            if err.status != 409:
                raise
    raise ApiError(409, "Conflict", f"{path} kept changing")
