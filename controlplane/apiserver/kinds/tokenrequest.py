"""serviceaccounts/<name>/token: TokenRequest (authentication.k8s.io/v1), upstream's
pkg/registry/core/serviceaccount/storage/token.go (1.32).

A POST names the account in the URL; the body may ask for audiences (default: the API server's),
expirationSeconds (default 3600, at least 600, at most 2^32, shortened to
--service-account-max-token-expiration with a warning) and an object to bind the token to: a Pod (of
that account; the pod's node goes into the token too), a Secret or a Node, by name and, when given,
UID. A pod-bound token of the ServiceAccount admission plugin's lifetime (3607 s) for the API's own
audiences is issued for a year and carries `warnafter`, upstream's safe rollout of bound tokens; the
status still says 3607 s, so kubelets refresh it as if it expired then. Nothing is stored.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.kinds.base import Subresource
from controlplane.apiserver.kinds.ports import AdmissionRequest
from controlplane.apiserver.satokens import EXPIRATION_EXTENSION, WARN_ONLY_EXPIRATION

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import RequestInfo, RestHandler

Obj = dict[str, Any]

GROUP, VERSION, KIND = "authentication.k8s.io", "v1", "TokenRequest"
API_VERSION = f"{GROUP}/{VERSION}"
DEFAULT_EXPIRATION = 3600
MIN_EXPIRATION = 600
MAX_EXPIRATION = 1 << 32


def _now_rfc3339(epoch: float) -> str:
    return dt.datetime.fromtimestamp(int(epoch), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _invalid(field: str, value: Any, detail: str) -> errors.ApiError:
    return errors.invalid_object(KIND, GROUP, "", [errors.invalid(field, value, detail)])


def _gvk_string(api_version: str, kind: str) -> str:
    group, _, version = api_version.rpartition("/")
    return f"{group}/{version}, Kind={kind}"


class TokenRequestSubresource(Subresource):
    name = "token"
    group = GROUP
    version = VERSION
    kind = KIND
    verbs = ("create",)
    schema = "AuthenticationV1TokenRequest"

    async def create(self, rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        issuer = rest.token_issuer
        if issuer is None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", {})
        body, unknown = await rest.decode_body(request, info, KIND, API_VERSION, self.schema)
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != info.name:
            raise errors.invalid_object(
                KIND,
                GROUP,
                info.name,
                [
                    errors.invalid(
                        "metadata.name", meta["name"], "must match the service account name if specified"
                    )
                ],
            )
        if meta.get("namespace") and meta["namespace"] != info.namespace:
            raise errors.invalid_object(
                KIND,
                GROUP,
                info.name,
                [
                    errors.invalid(
                        "metadata.namespace",
                        meta["namespace"],
                        "must match the service account namespace if specified",
                    )
                ],
            )
        account = (await rest.registry.get(info.resource, info.namespace, info.name)).obj
        spec = body.get("spec") or {}
        audiences = list(spec.get("audiences") or issuer.audiences)
        expiration = spec.get("expirationSeconds")
        expiration = DEFAULT_EXPIRATION if expiration is None else int(expiration)
        now = issuer.clock()
        out: Obj = {
            "kind": KIND,
            "apiVersion": API_VERSION,
            "metadata": {
                "name": info.name,
                "namespace": info.namespace,
                "creationTimestamp": _now_rfc3339(now),
            },
            "spec": {"audiences": audiences, "expirationSeconds": expiration},
        }
        if spec.get("boundObjectRef"):
            out["spec"]["boundObjectRef"] = spec["boundObjectRef"]
        if expiration < MIN_EXPIRATION:
            raise _invalid(
                "spec.expirationSeconds", expiration, "may not specify a duration less than 10 minutes"
            )
        if expiration > MAX_EXPIRATION:
            raise _invalid(
                "spec.expirationSeconds", expiration, "may not specify a duration larger than 2^32 seconds"
            )
        user = rest.user(request)
        admission = AdmissionRequest(
            "CREATE", info.resource, self.name, info.namespace, info.name, out, None, user, rest.registry
        )
        await rest.registry.admission.admit(admission)
        await rest.registry.admission.validate(admission)
        pod, secret, node = await self._bound(rest, info, spec.get("boundObjectRef"))
        warnings = list(unknown)
        if issuer.max_expiration > 0 and expiration > issuer.max_expiration:
            warnings.append(
                f"requested expiration of {expiration} seconds shortened to {issuer.max_expiration} seconds"
            )
            expiration = out["spec"]["expirationSeconds"] = issuer.max_expiration
        lifetime, warn_after = expiration, 0
        if (
            issuer.extend_expiration
            and pod is not None
            and expiration == WARN_ONLY_EXPIRATION
            and all(a in issuer.audiences for a in audiences)
        ):
            lifetime, warn_after = EXPIRATION_EXTENSION, expiration
        claims = issuer.claims(
            account, audiences, lifetime, pod=pod, secret=secret, node=node, warn_after=warn_after
        )
        out["status"] = {"token": issuer.sign(claims), "expirationTimestamp": _now_rfc3339(now + expiration)}
        response = rest.json(out, 201)
        for text in warnings:
            response.headers.add("Warning", f"299 - {json.dumps(text)}")
        return response

    async def _bound(
        self, rest: RestHandler, info: RequestInfo, ref: Obj | None
    ) -> tuple[Obj | None, Obj | None, Obj | None]:
        """The pod, secret or node the token is bound to (and a pod's node), checked as upstream does."""
        from controlplane.apiserver.kinds.node import KIND as NODES
        from controlplane.apiserver.kinds.pod import KIND as PODS
        from controlplane.apiserver.kinds.secret import KIND as SECRETS

        if not ref:
            return None, None, None
        kind, api_version = ref.get("kind", ""), ref.get("apiVersion", "")
        core = api_version in ("v1", "")
        name = ref.get("name", "")
        pod = secret = node = None
        if core and kind == "Pod":
            pod = (await rest.registry.get(PODS, info.namespace, name)).obj
            if (pod.get("spec") or {}).get("serviceAccountName") != info.name:
                raise errors.bad_request(
                    f'cannot bind token for serviceaccount "{info.name}" to pod running with different serviceaccount name.'
                )
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name:
                cached = rest.registry.cache.get(NODES.key("", node_name))
                # A missing node still goes in by name, so a token tells where its pod was placed.
                node = cached.obj if cached is not None else {"metadata": {"name": node_name}}
            bound = pod
        elif core and kind == "Node":
            bound = node = (await rest.registry.get(NODES, "", name)).obj
        elif core and kind == "Secret":
            bound = secret = (await rest.registry.get(SECRETS, info.namespace, name)).obj
        else:
            raise errors.bad_request(f"cannot bind token to object of type {_gvk_string(api_version, kind)}")
        uid = (bound.get("metadata") or {}).get("uid")
        if ref.get("uid") and ref["uid"] != uid:
            raise errors.conflict(
                kind,
                "",
                name,
                f"the UID in the bound object reference ({ref['uid']}) does not match the UID in record. "
                "The object might have been deleted and then recreated",
            )
        return pod, secret, node


TOKEN = TokenRequestSubresource()
