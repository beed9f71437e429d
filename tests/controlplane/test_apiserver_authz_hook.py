"""The authorization hook is real: an authorizer plugged into the chain decides, with full attributes."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from controlplane.apiserver.authz import Attributes, Decision
from controlplane.apiserver.server import ApiServer, ServerConfig


class ReadOnlyExceptLeases:
    def __init__(self) -> None:
        self.seen: list[Attributes] = []

    def authorize(self, attrs: Attributes) -> Decision | None:
        self.seen.append(attrs)
        if not attrs.resource_request or attrs.verb in ("get", "list", "watch"):
            return Decision(True)
        if attrs.resource == "leases" and attrs.namespace == "kube-node-lease":
            return Decision(True)
        return Decision(False, "read-only")


@pytest.mark.integration
async def test_authorizer_chain_decides(tmp_path: Path) -> None:
    server = ApiServer(ServerConfig(tmp_path / "d", port=0, insecure_http=True))
    await server.start()
    policy = ReadOnlyExceptLeases()
    server.authorizer.authorizers.insert(0, policy)
    base = f"http://127.0.0.1:{server.port}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/api/v1/namespaces/default/configmaps") as resp:
                assert resp.status == 200
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
            async with session.post(f"{base}/api/v1/namespaces/default/configmaps", json=cm) as resp:
                body = await resp.json()
                assert resp.status == 403 and body["reason"] == "Forbidden" and "read-only" in body["message"]
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "n1"},
                "spec": {},
            }
            async with session.post(
                f"{base}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", json=lease
            ) as resp:
                assert resp.status == 201
            async with session.get(f"{base}/apis") as resp:
                assert resp.status == 200
        denied = next(a for a in policy.seen if a.verb == "create" and a.resource == "configmaps")
        assert (denied.user.name, denied.namespace, denied.api_version) == ("system:admin", "default", "v1")
        # Discovery is a non-resource request: authorized by path.
        assert any(not a.resource_request and a.path == "/apis" and a.verb == "get" for a in policy.seen)
    finally:
        await server.stop()
