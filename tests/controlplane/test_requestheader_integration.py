"""Front-proxy (request-header) authentication on the real API server: a request with the front proxy's
client certificate (the server's front-proxy CA, CN front-proxy-client) is the user its X-Remote-* headers
name; without them the certificate is nobody; the same headers from any other client change nothing."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from pykubelet.rig.apiserver import ApiServer

REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def review(server: ApiServer, cert: tuple[Path, Path], headers: dict[str, str]) -> tuple[int, Any]:
    context = ssl.create_default_context(cafile=str(server.ca_cert))
    context.load_cert_chain(*cert)
    body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode()
    request = urllib.request.Request(
        server.url + REVIEW, data=body, method="POST", headers={"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def test_a_front_proxy_speaks_for_its_user(apiserver: ApiServer) -> None:
    pki = apiserver.data_dir / "pki"
    proxy = (pki / "front-proxy-client.crt", pki / "front-proxy-client.key")
    status, body = review(
        apiserver,
        proxy,
        {"X-Remote-User": "alice", "X-Remote-Group": "dev", "X-Remote-Extra-Scopes": "read"},
    )
    assert status == 201, body
    assert body["status"]["userInfo"] == {
        "username": "alice",
        "groups": ["dev", "system:authenticated"],
        "extra": {"scopes": ["read"]},
    }
    # Without the header the proxy's certificate is nobody (anonymous may not review itself).
    status, body = review(apiserver, proxy, {})
    assert status == 403 and 'User "system:anonymous"' in body["message"], body
    # An ordinary client (the admin's certificate) cannot claim another user by header.
    admin = (pki / "admin.crt", pki / "admin.key")
    status, body = review(apiserver, admin, {"X-Remote-User": "alice"})
    assert status == 201 and body["status"]["userInfo"]["username"] != "alice", body
