"""The kinds one API server serves: the built-in kinds (kinds.BUILT_IN) with what the REST layer adds to
them (kindparts.py), and the custom resources its CRD controller adds and removes at run time.

The server builds one table (kindparts.builtin_table) and hands it to what needs the kinds: the
registry (which carries it to admission plugins, controllers and handlers), request parsing, discovery,
OpenAPI and the admission chain. No module reaches a global list of kinds: two servers in one process
serve their own custom resources.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.apiserver.admission import AdmissionChain, plugin_name
from controlplane.apiserver.kinds.base import Kind, Subresource
from controlplane.storage.etcdkeys import KeyLayout


@dataclass(frozen=True)
class Parts:
    """What the REST layer adds to one kind (see Kind.attach)."""

    subresources: tuple[Subresource, ...] = ()
    admission: tuple[Any, ...] = ()
    # (registry, kind, server config) -> in-process loops the REST layer runs for the kind.
    controllers: Callable[[Any, Kind, Any], list[Any]] | None = None


class KindTable:
    """The served kinds in discovery order (the core group first, then the API groups in upstream's
    order); a namespace is emptied in this order and the admission plugins run in it."""

    def __init__(self, kinds: Iterable[Kind], parts: Mapping[tuple[str, str], Parts] | None = None) -> None:
        self._parts = dict(parts or {})
        self._kinds: list[Kind] = []
        self._by_path: dict[tuple[str, str, str], Kind] = {}
        self._generation = 0
        for kind in kinds:
            self._attach(kind)
            self._kinds.append(kind)
            self._by_path[(kind.group, kind.version, kind.plural)] = kind

    def _attach(self, kind: Kind) -> None:
        parts = self._parts.get((kind.group, kind.plural))
        if parts is not None:
            kind.attach(parts.subresources, parts.admission)

    def __iter__(self) -> Iterator[Kind]:
        return iter(list(self._kinds))

    def __len__(self) -> int:
        return len(self._kinds)

    # --- custom resources come and go ----------------------------------------------------------------

    def add(self, kind: Kind) -> None:
        """Serve `kind` from now on, after the built-in kinds (custom resources: apiextensions/controller.py)."""
        key = (kind.group, kind.version, kind.plural)
        old = self._by_path.get(key)
        if old is not None:
            self._kinds.remove(old)
        self._attach(kind)
        self._kinds.append(kind)
        self._by_path[key] = kind
        self._generation += 1

    def remove(self, kind: Kind) -> None:
        """Stop serving `kind` (a kind `add` added)."""
        if kind in self._kinds:
            self._kinds.remove(kind)
        key = (kind.group, kind.version, kind.plural)
        if self._by_path.get(key) is kind:
            del self._by_path[key]
        self._generation += 1

    def generation(self) -> int:
        """Grows with every `add` and `remove`: what caches derived from the table (OpenAPI) compare."""
        return self._generation

    # --- lookups -------------------------------------------------------------------------------------

    def by_path(self, group: str, version: str, plural: str) -> Kind | None:
        return self._by_path.get((group, version, plural))

    def by_group_version(self, group: str, version: str) -> list[Kind]:
        return [k for k in self._kinds if k.group == group and k.version == version]

    def groups(self) -> list[tuple[str, str]]:
        """The API groups (not core) and their versions, in the order the table first names them."""
        return list(dict.fromkeys((k.group, k.version) for k in self._kinds if k.group))

    def by_kind(self, api_version: str, kind: str) -> Kind | None:
        return next((k for k in self._kinds if k.api_version == api_version and k.kind == kind), None)

    def sweepable(self) -> list[Kind]:
        """One stored, deletable namespaced kind per storage bucket: what emptying a namespace deletes."""
        seen: set[str] = set()
        out = []
        for k in self._kinds:
            if k.namespaced and k.stored and "delete" in k.verbs and k.bucket not in seen:
                seen.add(k.bucket)
                out.append(k)
        return out

    def stored_buckets(self) -> list[str]:
        """The store's buckets the kinds own (kinds stored as another kind share that kind's bucket)."""
        return list(dict.fromkeys(k.bucket for k in self._kinds if k.stored and not k.storage_bucket))

    def etcd_layout(self) -> KeyLayout:
        """Where etcd holds each bucket: its kind's `etcd_prefix` (custom resources added later follow
        the layout's generic rule, `<group>/<plural>`, which is theirs)."""
        return KeyLayout({k.bucket: k.etcd_prefix for k in self._kinds if k.stored and not k.storage_bucket})

    # --- what the server runs with the kinds -----------------------------------------------------------

    def known_plugins(self) -> list[str]:
        """The admission plugins --disable-admission-plugins may name, in the order they run."""
        return [
            plugin_name(p) for kind in self._kinds for p in kind.admission if not getattr(p, "always", False)
        ]

    def admission_chain(self, disabled: Collection[str] = ()) -> AdmissionChain:
        # A plugin marked `always` is a kind's strategy step that needs the request's user (a CSR's
        # requester); it is no admission plugin upstream, so no flag turns it off.
        return AdmissionChain(
            [
                p
                for kind in self._kinds
                for p in kind.admission
                if getattr(p, "always", False) or plugin_name(p) not in disabled
            ]
        )

    def controllers(self, registry: Any, config: Any) -> list[Any]:
        """Each kind's in-process loops: its own, then those the REST layer runs for it."""
        out: list[Any] = []
        for kind in self._kinds:
            out += kind.controllers(registry, config)
            parts = self._parts.get((kind.group, kind.plural))
            if parts is not None and parts.controllers is not None:
                out += parts.controllers(registry, kind, config)
        return out

    async def bootstrap(self, registry: Any) -> None:
        """The objects each kind keeps from the server's first start, in the table's order."""
        for kind in list(self._kinds):
            await kind.bootstrap(registry)


__all__ = ["KindTable", "Parts"]
