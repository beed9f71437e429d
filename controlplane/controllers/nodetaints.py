"""Writing a node's taints, as upstream's controller utilities do (AddOrUpdateTaintOnNode,
RemoveTaintOffNode, SwapNodeControllerTaint).

spec.taints has no merge key, so a patch replaces the whole list; it carries the resourceVersion it was
computed from, and a 409 (someone else changed the node meanwhile) means: read the node again, redo the
change, try again (upstream retries 5 times with a 100 ms jittered backoff). The first attempt starts
from the caller's cached copy, as upstream's first GET reads the API server's cache (resourceVersion 0).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

from controlplane.controllers import taints as taintutil
from kubeclient.client import MERGE_PATCH, KubeClient
from kubeclient.errors import ApiError

Obj = dict[str, Any]
RETRIES = 5
BACKOFF = 0.1


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name)}"


def stamp(at: datetime) -> str:
    """RFC 3339 with seconds, as metav1.Time serialises."""
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


async def _change_taints(
    client: KubeClient, name: str, cached: Obj | None, change: Callable[[list[Obj]], tuple[list[Obj], bool]]
) -> None:
    node = cached
    for attempt in range(RETRIES):
        if node is None:
            node = await client.get(node_path(name))
        new, changed = change(taintutil.node_taints(node))
        if not changed:
            return
        body = {
            "metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion", "")},
            "spec": {"taints": new or None},
        }
        try:
            await client.patch(node_path(name), body, content_type=MERGE_PATCH)
            return
        except ApiError as err:
            if not err.conflict or attempt == RETRIES - 1:
                raise
        node = None
        await asyncio.sleep(BACKOFF * (1 + random.random()))


async def add_or_update_taints(
    client: KubeClient, name: str, taints: list[Obj], cached: Obj | None = None
) -> None:
    """Put `taints` on the node (each replacing the same key+effect if it differs)."""
    if not taints:
        return

    def change(current: list[Obj]) -> tuple[list[Obj], bool]:
        changed = False
        for taint in taints:
            current, one = taintutil.add_or_update(current, taint)
            changed = changed or one
        return current, changed

    await _change_taints(client, name, cached, change)


async def remove_taints(client: KubeClient, name: str, taints: list[Obj], cached: Obj | None = None) -> None:
    """Take `taints` (by key and effect) off the node; no request when the cached node has none of them."""
    if not taints:
        return
    if cached is not None and not any(taintutil.has_taint(taintutil.node_taints(cached), t) for t in taints):
        return

    def change(current: list[Obj]) -> tuple[list[Obj], bool]:
        changed = False
        for taint in taints:
            current, one = taintutil.remove(current, taint)
            changed = changed or one
        return current, changed

    await _change_taints(client, name, cached, change)


async def swap_taints(client: KubeClient, node: Obj, add: list[Obj], drop: list[Obj], now: datetime) -> bool:
    """Add `add` (stamped timeAdded now) and remove `drop`; False if the API refused (upstream's
    SwapNodeControllerTaint reports failure rather than raising)."""
    name = node["metadata"]["name"]
    stamped = [{**t, "timeAdded": stamp(now)} for t in add]
    try:
        await add_or_update_taints(client, name, stamped, node)
        if any(taintutil.has_taint(taintutil.node_taints(node), t) for t in drop):
            # Our copy is stale once something was added: remove from a fresh read then.
            await remove_taints(client, name, drop, None if stamped else node)
    except ApiError:
        return False
    return True
