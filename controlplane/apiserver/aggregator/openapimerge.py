"""The aggregated servers' OpenAPI in the API server's own documents, as kube-aggregator's OpenAPI
controllers do (pkg/controllers/openapi for v2, pkg/controllers/openapiv3 for v3).

v2: each Available remote APIService's /openapi/v2 is fetched (when its availability passes, so on a
change and every 30 s) and merged after the local document: a path the local document has is kept
(upstream's MergeSpecsIgnorePathConflict...), a definition with the same name and the same content is
shared, one with the same name and other content is renamed `<name>_v2` (`_v3`, ...) in that server's
document, references and all (...RenamingDefinitionsAndParameters). Specs are merged in APIService
priority order and the result is kept until a spec changes.

v3: the backend's /openapi/v3 root is read for the group-version paths it serves; the API server's root
lists them beside its own (with the backend's hash in serverRelativeURL) and GET /openapi/v3/<path>
returns the backend's document, fetched then and there, as upstream proxies it."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from controlplane.apiserver.aggregator.apis import APIServiceInfo

Obj = dict[str, Any]
Fetch = Callable[[APIServiceInfo, str], Awaitable[Obj]]
REFRESH = 60.0


@dataclass
class _Backend:
    info: APIServiceInfo
    v2: Obj | None = None
    v3_paths: dict[str, str] = field(default_factory=dict)  # group-version path -> serverRelativeURL
    fetched: float = 0.0


def _rename_refs(node: Any, renames: dict[str, str], prefix: str) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str) and v.startswith(prefix) and v[len(prefix) :] in renames:
                out[k] = prefix + renames[v[len(prefix) :]]
            else:
                out[k] = _rename_refs(v, renames, prefix)
        return out
    if isinstance(node, list):
        return [_rename_refs(v, renames, prefix) for v in node]
    return node


def merge_v2(dest: Obj, source: Obj) -> None:
    """Merge `source` into `dest` in place (upstream's path-conflict-ignoring, definition-renaming merge)."""
    definitions = dest.setdefault("definitions", {})
    renames: dict[str, str] = {}
    for name, schema in (source.get("definitions") or {}).items():
        if name in definitions and definitions[name] != schema:
            n = 2
            while f"{name}_v{n}" in definitions or f"{name}_v{n}" in (source.get("definitions") or {}):
                n += 1
            renames[name] = f"{name}_v{n}"
    source = _rename_refs(source, renames, "#/definitions/") if renames else source
    for name, schema in (source.get("definitions") or {}).items():
        name = renames.get(name, name)
        if name not in definitions:
            definitions[name] = schema
    paths = dest.setdefault("paths", {})
    for path, item in (source.get("paths") or {}).items():
        paths.setdefault(path, item)


class OpenAPIAggregation:
    def __init__(self, fetch: Fetch, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._clock = clock
        self._backends: dict[str, _Backend] = {}
        self._merged: tuple[int, Obj] | None = None
        self._generation = 0

    async def refresh(self, info: APIServiceInfo) -> None:
        """Fetch the backend's documents after its availability passed: at once for a backend not seen
        or not available before, else at most once a minute (upstream's OpenAPI controller resyncs each
        minute). Failures keep the last good documents (upstream serves what it had)."""
        now = self._clock()
        backend = self._backends.get(info.name)
        if backend is not None and backend.info.available and now - backend.fetched < REFRESH:
            backend.info = info
            return
        backend = backend or self._backends.setdefault(info.name, _Backend(info))
        backend.info, backend.fetched = info, now
        try:
            v2 = await self._fetch(info, "/openapi/v2")
        except Exception:  # a backend without OpenAPI (or a failing one) contributes nothing new
            v2 = backend.v2
        try:
            root = await self._fetch(info, "/openapi/v3")
            paths = {
                p: str((entry or {}).get("serverRelativeURL") or f"/openapi/v3/{p}")
                for p, entry in (root.get("paths") or {}).items()
            }
        except Exception:
            paths = backend.v3_paths
        if v2 != backend.v2 or paths != backend.v3_paths:
            backend.v2, backend.v3_paths = v2, paths
            self._generation += 1

    def forget(self, name: str) -> None:
        if self._backends.pop(name, None) is not None:
            self._generation += 1

    def _live(self, available: Callable[[str], APIServiceInfo | None]) -> list[_Backend]:
        out = []
        for name, backend in self._backends.items():
            info = available(name)
            if info is not None and info.available and not info.local:
                out.append(backend)
        out.sort(key=lambda b: (-b.info.group_priority, -b.info.version_priority, b.info.name))
        return out

    def v2(self, local: Obj, available: Callable[[str], APIServiceInfo | None]) -> Obj:
        live = self._live(available)
        key = hash((self._generation, tuple(b.info.name for b in live), id(local)))
        if self._merged is not None and self._merged[0] == key:
            return self._merged[1]
        merged = copy.deepcopy(local)
        for backend in live:
            if backend.v2:
                merge_v2(merged, backend.v2)
        self._merged = (key, merged)
        return merged

    def v3_root(self, local: Obj, available: Callable[[str], APIServiceInfo | None]) -> Obj:
        paths = dict(local.get("paths") or {})
        for backend in self._live(available):
            for path, url in backend.v3_paths.items():
                paths.setdefault(path, {"serverRelativeURL": url})
        return {**local, "paths": paths}

    async def v3_document(self, path: str, available: Callable[[str], APIServiceInfo | None]) -> bytes | None:
        """The backend's document for an aggregated group-version path, None when no backend lists it."""
        for backend in self._live(available):
            if path in backend.v3_paths:
                return json.dumps(await self._fetch(backend.info, f"/openapi/v3/{path}")).encode()
        return None
