"""Writes pod status to the API: PATCH pods/status only when what we computed differs from what we last
wrote (and from what the API already holds), with the pod's UID as a precondition so a status never lands
on a newer pod of the same name.

Also performs the final DELETE of a pod the agent finished terminating (gracePeriodSeconds 0 with a UID
precondition), which is what removes the object once the node has let go of it.
"""

from __future__ import annotations

import logging
from typing import Any

from agent.kube.client import MERGE_PATCH, ApiError, KubeClient

log = logging.getLogger("agent.pods.status")


def pod_path(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"


class StatusManager:
    def __init__(self, client: KubeClient | None) -> None:
        self.client = client
        self._written: dict[str, dict[str, Any]] = {}
        self.patches = 0

    def last(self, uid: str) -> dict[str, Any] | None:
        return self._written.get(uid)

    async def update(self, pod: dict[str, Any], status: dict[str, Any]) -> bool:
        """Write the status if it changed; True if a PATCH was sent."""
        uid = pod["metadata"]["uid"]
        if self._written.get(uid) == status or _same(pod.get("status") or {}, status):
            self._written[uid] = status
            return False
        if self.client is None:
            self._written[uid] = status
            return True
        body = {"metadata": {"uid": uid}, "status": status}
        try:
            await self.client.patch(pod_path(pod) + "/status", body, content_type=MERGE_PATCH)
        except ApiError as err:
            if err.not_found or err.conflict:
                log.info("status not written, pod gone pod=%s uid=%s", pod_path(pod), uid)
                return False
            raise
        self._written[uid] = status
        self.patches += 1
        return True

    async def delete(self, pod: dict[str, Any]) -> bool:
        """The final DELETE after termination; True when the object is gone (or was already)."""
        uid = pod["metadata"]["uid"]
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        if self.client is not None:
            try:
                await self.client.delete(pod_path(pod), body)
            except ApiError as err:
                if not (err.not_found or err.conflict):
                    raise
        self.forget(uid)
        return True

    def forget(self, uid: str) -> None:
        self._written.pop(uid, None)


def _same(api: dict[str, Any], ours: dict[str, Any]) -> bool:
    """Whether the API already holds our status (fields the API may add, like nominatedNodeName, aside)."""
    return all(api.get(k) == v for k, v in ours.items())
