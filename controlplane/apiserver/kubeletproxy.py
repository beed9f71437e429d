"""pods/log: the API server reaches the node agent's kubelet API and streams the answer back, as
upstream's LogLocation + LocationStreamer do (pkg/registry/core/pod/strategy.go, rest/log.go).

The server connects to the node's InternalIP (then Hostname) on status.daemonEndpoints.kubeletEndpoint
with its own client certificate (CN kube-apiserver-kubelet-client, signed by the cluster CA, which the
agent trusts as its clientCAFile). Like upstream without --kubelet-certificate-authority, it does not
verify the kubelet's self-signed serving certificate; with it (`ca`), the kubelet's certificate must be
signed by that CA and name the address connected to (a kubelet that got its certificate through a
kubelet-serving CSR: serverTLSBootstrap), for logs and for exec/attach/port-forward/proxy, which share
this context.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from controlplane.apiserver import errors, wsreader
from kubeclient.tlsverify import go_compatible

# PodLogOptions query parameters passed on to the kubelet, as upstream's LogLocation forwards them.
LOG_PARAMS = ("follow", "previous", "timestamps", "tailLines", "limitBytes", "sinceSeconds", "sinceTime")
DEFAULT_KUBELET_PORT = 10250
CHUNK = 32 * 1024


def log_container(pod: dict[str, Any], requested: str) -> str:
    """The container whose log is asked for, with upstream's errors when it cannot be told or is unknown."""
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    app = [c["name"] for c in spec.get("containers") or []]
    init = [c["name"] for c in spec.get("initContainers") or []]
    ephemeral = [c["name"] for c in spec.get("ephemeralContainers") or []]
    if not requested:
        if len(app) == 1:
            return app[0]
        message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(app)}]"
        if init:
            message += f" or one of the init containers: [{' '.join(init)}]"
        if ephemeral:
            message += f" or one of the ephemeral containers: [{' '.join(ephemeral)}]"
        raise errors.bad_request(message)
    if requested not in app + init + ephemeral:
        raise errors.bad_request(f"container {requested} is not valid for pod {name}")
    return requested


# --kubelet-preferred-address-types' default here (upstream's puts Hostname first; a node agent's host
# name need not resolve from the server, its InternalIP does).
DEFAULT_ADDRESS_TYPES = ("InternalIP", "Hostname", "ExternalIP")


def kubelet_address(node: dict[str, Any], types: tuple[str, ...] = DEFAULT_ADDRESS_TYPES) -> tuple[str, int]:
    status = node.get("status") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    host = next((addresses[t] for t in types if addresses.get(t)), None)
    if not host:
        raise errors.internal(f"no preferred addresses found; known addresses: {list(addresses.items())}")
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get(
        "Port"
    ) or DEFAULT_KUBELET_PORT
    return host, int(port)


def validate_log_query(query: Any) -> dict[str, str]:
    """The PodLogOptions to forward; bad numbers are a 400 naming the parameter, as upstream's decoding."""
    out = {k: query[k] for k in LOG_PARAMS if k in query}
    for key, minimum in (("tailLines", 0), ("limitBytes", 1), ("sinceSeconds", 1)):
        if key in out:
            try:
                value = int(out[key])
            except ValueError:
                raise errors.bad_request(f'{key}: invalid value "{out[key]}"') from None
            if value < minimum:
                raise errors.invalid_object(
                    "PodLogOptions",
                    "",
                    "",
                    [errors.invalid(key, value, f"must be greater than or equal to {minimum}")],
                )
    if "sinceSeconds" in out and "sinceTime" in out:
        raise errors.invalid_object(
            "PodLogOptions",
            "",
            "",
            [errors.forbidden("", "at most one of `sinceTime` or `sinceSeconds` may be specified")],
        )
    return out


class KubeletClient:
    """HTTPS to node agents with the API server's kubelet-client certificate."""

    def __init__(
        self,
        cert: Path,
        key: Path,
        ca: Path | None = None,
        address_types: tuple[str, ...] = DEFAULT_ADDRESS_TYPES,
    ) -> None:
        self.address_types = address_types  # --kubelet-preferred-address-types
        self._context = go_compatible(ssl.create_default_context())
        if ca is not None:
            self._context.load_verify_locations(cafile=str(ca))
        else:
            self._context.check_hostname = False
            self._context.verify_mode = ssl.CERT_NONE
        self._context.load_cert_chain(cert, key)
        self._session: aiohttp.ClientSession | None = None

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """TLS with the kubelet-client certificate, for the streaming subresources' own connections."""
        return self._context

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No overall timeout: a followed log streams for as long as the client keeps reading.
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def stream_log(
        self,
        request: web.Request,
        pod: dict[str, Any],
        node: dict[str, Any],
        container: str,
        params: dict[str, str],
    ) -> web.StreamResponse:
        host, port = kubelet_address(node, self.address_types)
        meta = pod["metadata"]
        url = (
            f"https://{host if ':' not in host else f'[{host}]'}:{port}/containerLogs/"
            f"{quote(meta['namespace'])}/{quote(meta['name'])}/{quote(container)}"
        )
        try:
            upstream = await self._http().get(url, params=params, ssl=self._context)
        except (aiohttp.ClientError, OSError) as err:
            raise errors.internal(f'Get "{url}": {err}') from None
        try:
            if upstream.status != 200:
                # The kubelet's own answer (a Status saying why) goes back as it came.
                body = await upstream.read()
                return web.Response(
                    status=upstream.status,
                    body=body,
                    content_type=upstream.content_type or "application/json",
                )
            return await wsreader.stream(request, upstream.content.iter_any())
        finally:
            upstream.release()
