"""What the kinds know of the server around them: small interfaces at the bottom of the kinds layer.

A kind's strategy is called by the REST layer (the registry, the handlers, the server) and calls back
into it: a bootstrap hook creates objects through the registry, a virtual kind's create reads the request
body through the handler, an admission rule of a kind reads the request it judges. The kinds must not
import those modules (the import-linter contract "The API server's kinds import nothing of its REST
layer" keeps it so): they name them by these protocols, which state only what kinds use. The REST layer's
classes (registry.Registry, handlers.RestHandler, request.RequestInfo, server.ServerConfig) satisfy them
structurally; AdmissionRequest and Plugin live here because kinds and the admission chain both build and
read them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from controlplane.apiserver.userinfo import UserInfo

if TYPE_CHECKING:
    from aiohttp import web

    from controlplane.apiserver.kinds.base import Kind
    from controlplane.apiserver.options import DeleteOptions

Obj = dict[str, Any]


class Cached(Protocol):
    """An object as the watch cache holds it."""

    obj: Obj


class Registry(Protocol):
    """The generic store a kind's hooks and admission rules reach (registry.Registry)."""

    cache: Any  # the watch cache (storage.cache.WatchCache): reads without a round trip
    store: Any  # the storage backend (storage.interface.Store): allocations' compare-and-swap records
    admission: Any  # the admission chain (admission.AdmissionChain)
    authorization: Any  # the server's authorizers and RBAC index (authmodes.Authorization), or None
    service_ranges: Any  # --service-cluster-ip-range and --service-node-port-range (serviceranges.py)
    kinds: Any  # the kinds this server serves (kindtable.KindTable): by_kind, by_path

    async def get(self, res: Kind, namespace: str, name: str, consistent: bool = True) -> Cached: ...

    async def create(
        self,
        res: Kind,
        namespace: str,
        obj: Obj,
        user: UserInfo | None = None,
        dry_run: bool = False,
        manager: str | None = None,
        validate: bool = True,
    ) -> Obj: ...

    async def ensure(self, res: Kind, namespace: str, obj: Obj) -> None: ...

    async def update(
        self,
        res: Kind,
        namespace: str,
        name: str,
        body: Obj,
        subresource: str = "",
        user: UserInfo | None = None,
        dry_run: bool = False,
        manager: str | None = None,
        validate: bool = True,
    ) -> Obj: ...

    async def guaranteed_update(
        self,
        res: Kind,
        namespace: str,
        name: str,
        mutate: Callable[[Obj], Obj | Awaitable[Obj]],
        subresource: str = "",
        user: UserInfo | None = None,
        dry_run: bool = False,
        manager: str | None = None,
        validate: bool = True,
        admit: bool = True,
    ) -> Obj: ...

    async def delete(
        self, res: Kind, namespace: str, name: str, options: DeleteOptions
    ) -> tuple[Obj, bool]: ...


class RequestInfo(Protocol):
    """What a request path addresses (request.RequestInfo)."""

    resource: Kind
    namespace: str
    name: str
    subresource: str
    subpath: str


class RestHandler(Protocol):
    """The REST handlers, as a subresource's verbs and a virtual kind's create use them
    (handlers.RestHandler)."""

    registry: Registry
    authorizer: Any  # authz.Authorizer
    authenticator: Any  # authn.Authenticator or None: bearer tokens, for TokenReview
    token_issuer: Any  # satokens' issuer or None: serviceaccounts/<name>/token
    kubelet: Any  # the node agents' client (kubeletproxy.KubeletClient) or None

    @staticmethod
    def user(request: web.Request) -> UserInfo: ...

    @staticmethod
    def manager(request: web.Request) -> str: ...

    @staticmethod
    def dry_run(request: web.Request) -> bool: ...

    async def body(self, request: web.Request) -> Any: ...

    @staticmethod
    def check_kind(obj: Any, kind: str, api_version: str) -> Obj: ...

    @staticmethod
    def decode(
        obj: Obj, kind: str, api_version: str, schema: str, request: web.Request, patch: bool = False
    ) -> list[str]: ...

    async def decode_body(
        self, request: web.Request, info: RequestInfo, kind: str, api_version: str, schema: str
    ) -> tuple[Obj, list[str]]: ...

    @staticmethod
    def warn(response: web.StreamResponse, unknown: list[str]) -> web.StreamResponse: ...

    @staticmethod
    def json(obj: Any, status: int = 200, **kwargs: Any) -> web.Response: ...


class ServerConfig(Protocol):
    """The server's settings a kind's in-process loops read (server.ServerConfig)."""

    event_ttl: float


@dataclass
class AdmissionRequest:
    operation: str  # CREATE, UPDATE, DELETE, CONNECT (obj: the connect options)
    kind: Kind
    subresource: str
    namespace: str
    name: str
    obj: Obj
    old: Obj | None
    user: UserInfo | None
    registry: Registry
    dry_run: bool = False  # checked, never charged (ResourceQuota)
    # The store generated the name (metadata.generateName): upstream's mutating admission runs before
    # that, so admission webhooks are shown the object as the client sent it.
    generated_name: bool = False


class Plugin(Protocol):
    """A plugin implements `admit(request)` (may change request.obj), `validate(request)`, or both;
    either raises an ApiError to refuse the write. Plugins that judge deletes implement
    `admit_delete(request)` (request.old is the object); those that must wait for something to judge
    them (admission webhooks and policies) implement the coroutine `review_delete(request)`."""


__all__ = ["AdmissionRequest", "Cached", "Plugin", "Registry", "RequestInfo", "RestHandler", "ServerConfig"]
