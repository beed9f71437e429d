"""The aggregation layer as the server wires it: the APIService index, the availability check and the
proxy, behind four questions the server asks (is this group/version aggregated, serve it, what do
/apis and /apis/<group> add)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.aggregator.apis import APIServiceInfo, APIServices, aggregated_items, group_doc
from controlplane.apiserver.aggregator.availability import AvailabilityChecker
from controlplane.apiserver.aggregator.proxy import BackendTLS, relay
from controlplane.apiserver.aggregator.requestinfo import attributes
from controlplane.apiserver.aggregator.resolve import ResolveError, resolve
from controlplane.apiserver.authn import USER_KEY, UserInfo
from controlplane.apiserver.authz import AuthorizerChain, forbidden
from controlplane.apiserver.registry import Registry

Obj = dict[str, Any]


class Aggregator:
    def __init__(self, registry: Registry, authorizer: AuthorizerChain, local_groups: set[str]) -> None:
        self.registry = registry
        self.authorizer = authorizer
        self.local_groups = local_groups
        self.apis = APIServices(registry.cache)
        self.tls = BackendTLS(None, None)
        self.checker = AvailabilityChecker(registry, self.apis, self.tls)
        self._session: aiohttp.ClientSession | None = None

    def start(self, client_cert: Path | None, client_key: Path | None) -> None:
        self.tls.client_cert, self.tls.client_key = client_cert, client_key
        self.apis.start()
        self.checker.start()
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10), auto_decompress=False
        )

    async def stop(self) -> None:
        await self.checker.stop()
        if self._session:
            await self._session.close()

    def remote(self, group: str, version: str) -> APIServiceInfo | None:
        if group in self.local_groups:
            return None
        return self.apis.remote(group, version)

    async def serve(self, request: web.Request, info: APIServiceInfo, tail: str) -> web.StreamResponse:
        user: UserInfo = request[USER_KEY]
        if tail:
            # A resource request: authorized here, as the aggregator's own handler chain does before it
            # proxies (the backend authorizes again, by SubjectAccessReview).
            attrs = attributes(
                user, request.method, info.group, info.version, tail, request.query, request.path
            )
            decision = self.authorizer.authorize(attrs)
            if not decision.allowed:
                raise forbidden(attrs, decision.reason)
        if not info.available:
            return web.Response(status=503, text="service unavailable\n")
        try:
            endpoints = resolve(self.registry.cache, info.service_namespace, info.service_name, info.port)
        except ResolveError as err:
            raise errors.ApiError(503, "ServiceUnavailable", str(err)) from None
        assert self._session is not None
        return await relay(self._session, self.tls, request, info, endpoints[0], user)

    def group(self, name: str) -> Obj | None:
        for group, versions in self.apis.remote_groups(self.local_groups):
            if group == name:
                return {"kind": "APIGroup", "apiVersion": "v1", **group_doc(group, versions)}
        return None

    def group_list_additions(self) -> list[Obj]:
        return [group_doc(g, v) for g, v in self.apis.remote_groups(self.local_groups)]

    def aggregated_additions(self) -> list[Obj]:
        return aggregated_items(self.apis, self.local_groups)

    # --- OpenAPI (openapimerge.py) ------------------------------------------------------------------

    def openapi_v2(self, local: Obj) -> Obj:
        return self.checker.openapi.v2(local, self.apis.by_name.get)

    def openapi_v3_root(self, local: Obj) -> Obj:
        return self.checker.openapi.v3_root(local, self.apis.by_name.get)

    async def openapi_v3_document(self, path: str) -> bytes | None:
        try:
            return await self.checker.openapi.v3_document(path, self.apis.by_name.get)
        except (ResolveError, RuntimeError, aiohttp.ClientError, OSError, ValueError) as err:
            raise errors.ApiError(
                503, "ServiceUnavailable", f"error trying to reach service: {err}", {}
            ) from None
