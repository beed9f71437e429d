"""The ResourceQuota admission plugin: every namespaced write an evaluator charges is checked against
the namespace's quotas (check.py) and, when it fits, charged by writing the quotas' `status.used`
before the object is stored, as upstream's quota evaluator does.

Each charge is a compare-and-swap at the quota's revision read from a fresh cache: a write that lost a
race (another request, another API server replica, the controller's recount) is evaluated again on the
new status (read consistently, so another replica's charge is in it), up to three more times, then refused
with the conflict (409, as upstream's quota evaluator answers when its retries run out); so concurrent creates never push
used past hard and never lose a charge. Writes in one namespace are evaluated one at a time (upstream
serializes per namespace in its work queue, which keeps conflicts rare); namespaces never wait on each
other. Dry runs are checked, not charged. A charged write that fails later is over-counted until the
resource-quota controller recounts, as upstream.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors
from controlplane.apiserver.quota.check import QuotaRefused, Write, check_request
from controlplane.quota import resources as rl
from controlplane.quota.evaluators import evaluator_for
from controlplane.storage import ConflictError, NotFoundError
from controlplane.storage.cache import encode

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.base import Kind
    from controlplane.apiserver.kinds.ports import AdmissionRequest, Registry

Obj = dict[str, Any]
RETRIES = 3


class ResourceQuotaAdmission:
    name = "ResourceQuota"
    # Upstream runs it after every other validating plugin (webhooks too): what it charges is final.
    last = True

    def __init__(self, quota_kind: Kind) -> None:
        self.kind = quota_kind
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def _quotas(self, registry: Registry, namespace: str) -> list[Any]:
        return registry.cache.list(self.kind.bucket, self.kind.prefix(namespace))

    async def validate(self, request: AdmissionRequest) -> None:
        res = request.kind
        if not (res.namespaced and res.stored and request.namespace):
            return
        if request.operation not in ("CREATE", "UPDATE"):
            return
        evaluator = evaluator_for(res.group, res.plural)
        if evaluator is None or not evaluator.handles(request.operation, request.subresource):
            return
        if not self._quotas(request.registry, request.namespace):
            return
        lock = self._locks.get(request.namespace)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[request.namespace] = lock
        write = Write(request.operation, request.subresource, request.obj, request.old)
        async with lock:
            await self._charge(request, write, evaluator)

    async def _charge(self, request: AdmissionRequest, write: Write, evaluator: Any) -> None:
        registry = request.registry
        charged: set[str] = set()
        lost_name = ""
        for attempt in range(RETRIES + 1):
            if attempt == 0:
                await registry.cache.wait_fresh()
            else:
                # Lost to a write this server may not have seen yet (another replica's charge): read the
                # quota as of now, not as of this server's own last write, or the retry loses again at once.
                await registry.cache.wait_consistent()
            cached = [c for c in self._quotas(registry, request.namespace) if c.key not in charged]
            quotas = [json.loads(c.raw) for c in cached]
            try:
                new_used = check_request(quotas, write, evaluator)
            except QuotaRefused as refused:
                res = request.kind
                name = request.obj.get("metadata", {}).get("name", "") or request.name
                raise errors.forbidden_request(
                    f'{res.resource} "{name}" is forbidden: {refused}', res.plural, res.group, name
                ) from None
            if request.dry_run:
                return
            lost = False
            for c, quota, used in zip(cached, quotas, new_used, strict=True):
                if used is None:
                    continue
                quota.setdefault("status", {})["used"] = rl.dump(used)
                quota["metadata"].pop("resourceVersion", None)
                try:
                    await registry.store.update(c.key, encode(quota), c.revision)
                except ConflictError:
                    lost, lost_name = True, quota["metadata"].get("name", "")
                    continue
                except NotFoundError:
                    continue  # deleted meanwhile: nothing to charge
                charged.add(c.key)
            if not lost:
                return
        raise errors.conflict(self.kind.plural, self.kind.group, lost_name, errors.MODIFIED)
