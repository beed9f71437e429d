"""What the REST layer adds to the kinds: the parts of a kind that need the server around it.

A kind module holds its strategy and imports nothing of the REST layer (kinds/README.md). What a kind
cannot do without the REST layer is attached here, per kind: subresources whose verbs stream or proxy
(pods/log, exec, attach, portforward, the proxy subresources), admission plugins implemented by the
admission packages (webhooks, policies), and in-process loops that drive the registry (the namespace
finalizer, the CRD controller). The server's table (kindtable.KindTable) attaches them (Kind.attach,
idempotent) and runs the controllers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from controlplane.apiserver import errors, streaming
from controlplane.apiserver.admissionpolicy.plugin import ValidatingAdmissionPolicyPlugin
from controlplane.apiserver.apiextensions.controller import CrdController
from controlplane.apiserver.kinds import BUILT_IN, pod
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.kinds.node import KIND as NODE
from controlplane.apiserver.kindtable import KindTable, Parts
from controlplane.apiserver.kubeletproxy import log_container, validate_log_query
from controlplane.apiserver.nsfinalizer import NamespaceFinalizer
from controlplane.apiserver.podsecurity import PodSecurity
from controlplane.apiserver.resourceproxy import Proxy, node_location, pod_location, service_location
from controlplane.apiserver.webhooks.plugins import MutatingAdmissionWebhook, ValidatingAdmissionWebhook

if TYPE_CHECKING:
    from controlplane.apiserver.handlers import RestHandler
    from controlplane.apiserver.request import RequestInfo


class PodLog(pod.Log):
    """pods/log: checked here, streamed from the pod's node agent (kubeletproxy.py)."""

    async def get(self, rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        found = (await rest.registry.get(info.resource, info.namespace, info.name)).obj
        container = log_container(found, request.query.get("container", ""))
        params = validate_log_query(request.query)
        node_name = (found.get("spec") or {}).get("nodeName")
        if not node_name:
            raise errors.bad_request(f"pod {found['metadata']['name']} does not have a host assigned")
        if rest.kubelet is None:
            raise errors.internal(
                "this server has no client certificate for node agents (serving plain HTTP)"
            )
        node = await rest.registry.get(NODE, "", node_name)
        return await rest.kubelet.stream_log(request, found, node.obj, container, params)


class _Streams:
    """pods/exec, attach, portforward: upgraded connections streamed to the pod's node agent."""

    name: str

    async def connect(self, rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        if self.name == "portforward":
            return await streaming.connect_port_forward(rest, request, info)
        return await streaming.connect_stream(rest, request, info, self.name)


class PodExec(_Streams, pod.Exec):
    pass


class PodAttach(_Streams, pod.Attach):
    pass


class PodPortForward(_Streams, pod.PortForward):
    pass


def _namespace_finalizer(registry: Any, kind: Kind, config: Any) -> list[Any]:
    return [NamespaceFinalizer(registry, kind)]


def _crd_controller(registry: Any, kind: Kind, config: Any) -> list[Any]:
    return [CrdController(registry, kind)]


_POD_SUBRESOURCES = (
    PodLog(),
    PodExec(),
    PodAttach(),
    PodPortForward(),
    Proxy("PodProxyOptions", pod_location),
)

# (group, plural) -> what the REST layer adds to that kind.
PARTS: dict[tuple[str, str], Parts] = {
    # PodSecurity needs the request's warnings and audit annotations (webhooks.context): a REST-side plugin.
    ("", "namespaces"): Parts(controllers=_namespace_finalizer, admission=(PodSecurity(),)),
    ("", "nodes"): Parts(subresources=(Proxy("NodeProxyOptions", node_location),)),
    ("", "pods"): Parts(subresources=_POD_SUBRESOURCES),
    ("", "services"): Parts(subresources=(Proxy("ServiceProxyOptions", service_location),)),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): Parts(
        admission=(MutatingAdmissionWebhook(),)
    ),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"): Parts(
        admission=(ValidatingAdmissionPolicyPlugin(),)
    ),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): Parts(
        admission=(ValidatingAdmissionWebhook(),)
    ),
    ("apiextensions.k8s.io", "customresourcedefinitions"): Parts(controllers=_crd_controller),
}


def builtin_table() -> KindTable:
    """A table of the built-in kinds with their parts: what one server serves before any CRD."""
    return KindTable(BUILT_IN, PARTS)


__all__ = ["PARTS", "builtin_table"]
