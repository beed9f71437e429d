"""The kube-system/extension-apiserver-authentication ConfigMap, as upstream's
ClusterAuthenticationTrustController publishes it: the client CA and the requestheader settings
(front-proxy CA, allowed client names, header names), so an extension API server (the metrics server)
learns whom to trust for the X-Remote-* headers from the API, with the
extension-apiserver-authentication-reader Role. Rewritten at each start (the CAs may be new)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from controlplane.apiserver.aggregator.proxy import EXTRA_PREFIX, GROUP_HEADER, USER_HEADER
from controlplane.apiserver.certs import FRONT_PROXY_CLIENT, Pki
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds.configmap import KIND as CONFIGMAPS
from controlplane.apiserver.registry import Registry

NAMESPACE = "kube-system"
NAME = "extension-apiserver-authentication"


def data(
    client_ca: Path,
    front_proxy_ca: Path,
    extra_client_ca: Path | None = None,
    allowed_names: tuple[str, ...] = (),
) -> dict[str, str]:
    bundle = client_ca.read_text()
    if extra_client_ca is not None:
        bundle = bundle.rstrip("\n") + "\n" + extra_client_ca.read_text()
    return {
        "client-ca-file": bundle,
        "requestheader-allowed-names": json.dumps(list(allowed_names or (FRONT_PROXY_CLIENT,))),
        "requestheader-client-ca-file": front_proxy_ca.read_text(),
        "requestheader-extra-headers-prefix": json.dumps([EXTRA_PREFIX]),
        "requestheader-group-headers": json.dumps([GROUP_HEADER]),
        "requestheader-username-headers": json.dumps([USER_HEADER]),
    }


async def publish(
    registry: Registry,
    pki: Pki,
    extra_client_ca: Path | None = None,
    front_proxy_ca: Path | None = None,
    allowed_names: tuple[str, ...] = (),
) -> None:
    """`extra_client_ca`: --client-ca-file, published with the server's own CA; `front_proxy_ca` and
    `allowed_names`: --requestheader-client-ca-file and --requestheader-allowed-names (default: the
    server's own front-proxy CA and client name)."""
    assert pki.front_proxy_ca_cert is not None
    wanted = data(pki.ca_cert, front_proxy_ca or pki.front_proxy_ca_cert, extra_client_ca, allowed_names)
    if registry.cache.get(CONFIGMAPS.key(NAMESPACE, NAME)) is None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": NAME},
            "data": wanted,
        }
        try:
            await registry.create(CONFIGMAPS, NAMESPACE, body)
            return
        except ApiError as err:
            if err.code != 409:
                raise

    def put(obj: dict[str, Any]) -> dict[str, Any]:
        obj["data"] = wanted
        return obj

    await registry.guaranteed_update(CONFIGMAPS, NAMESPACE, NAME, put)
