"""pods/exec, pods/attach, pods/portforward at the API server alone (a recording stand-in kubelet, no
runtime): discovery, authorization as `create` on the subresource, upstream's refusals before any
upgrade, and what reaches the kubelet: the streams as its query (input/output/error/tty), a SPDY/3.1
upgrade with remotecommand's versions (WebSocket v5 translated) or portforward.k8s.io (the tunnel), on
the server's kubelet-client certificate; a kubelet's refusal comes back to kubectl. The whole path with
containerd is e2e/test_streaming.py."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration  # real servers, etcd or processes


@pytest.fixture
def kubelet(apiserver: ApiServer, v1: client.CoreV1Api, namespace: str) -> Iterator[tuple[str, list[dict]]]:
    """A node whose kubelet records each request and refuses it as a kubelet without the container."""
    from controlplane.apiserver.certs import ensure_pki

    seen: list[dict] = []

    class Kubelet(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            peer = self.connection.getpeercert() or {}
            seen.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "headers": self.headers,
                    "cn": dict(x[0] for x in peer.get("subject", ())).get("commonName", ""),
                }
            )
            body = b'container not found ("c")'
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    pki = ensure_pki(apiserver.data_dir)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca_cert))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_cert_chain(pki.serving_cert, pki.serving_key)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Kubelet)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    node = f"stream-{namespace}"
    v1.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=node)))
    v1.patch_node_status(
        node,
        {
            "status": {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": httpd.server_address[1]}},
            }
        },
    )
    try:
        yield node, seen
    finally:
        httpd.shutdown()
        httpd.server_close()
        v1.delete_node(node)


def _pod(name: str, node: str | None = None) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(name="c", image="busybox")]),
    )


def _kubectl(apiserver: ApiServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(apiserver.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_discovery_lists_the_streaming_subresources(apiserver: ApiServer) -> None:
    listed = json.loads(_kubectl(apiserver, "get", "--raw", "/api/v1").stdout)["resources"]
    resources = {r["name"]: r for r in listed}
    for name, kind in (
        ("pods/exec", "PodExecOptions"),
        ("pods/attach", "PodAttachOptions"),
        ("pods/portforward", "PodPortForwardOptions"),
    ):
        assert resources[name]["kind"] == kind and sorted(resources[name]["verbs"]) == ["create", "get"]


def test_refusals_before_any_upgrade(v1: client.CoreV1Api, namespace: str, kubelet) -> None:
    node, seen = kubelet
    with pytest.raises(ApiException) as err:
        v1.connect_post_namespaced_pod_exec("nope", namespace, command=["true"], stdout=True)
    assert err.value.status == 404 and 'pods \\"nope\\" not found' in err.value.body
    v1.create_namespaced_pod(namespace, _pod("unbound"))
    with pytest.raises(ApiException) as err:
        v1.connect_post_namespaced_pod_attach("unbound", namespace, stdout=True)
    assert err.value.status == 400 and "pod unbound does not have a host assigned" in err.value.body
    v1.create_namespaced_pod(namespace, _pod("bound", node))
    for call, kwargs, message in (
        (
            v1.connect_post_namespaced_pod_exec,
            {"command": ["true"], "stdout": True},
            "Upgrade request required",
        ),
        (
            v1.connect_post_namespaced_pod_exec,
            {"command": ["true"], "stdout": True, "container": "x"},
            "container x is not valid for pod bound",
        ),
        (v1.connect_post_namespaced_pod_exec, {"stdout": True}, "you must specify at least 1 command"),
        (v1.connect_post_namespaced_pod_attach, {}, "you must specify at least 1 of stdin, stdout, stderr"),
        (v1.connect_post_namespaced_pod_portforward, {"ports": "70000"}, "port must be between 1 and 65535"),
        (v1.connect_post_namespaced_pod_portforward, {"ports": "80"}, "Upgrade request required"),
    ):
        with pytest.raises(ApiException) as err:
            call("bound", namespace, **kwargs)
        assert err.value.status == 400 and message in err.value.body, (message, err.value.body)
    assert seen == []  # nothing reached the kubelet


def test_streaming_is_authorized_as_create_on_the_subresource(
    apiserver: ApiServer, api: client.ApiClient, v1: client.CoreV1Api, namespace: str, kubelet
) -> None:
    node, seen = kubelet
    v1.create_namespaced_pod(namespace, _pod("guarded", node))
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="reader"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="reader"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="reader"),
            subjects=[
                client.RbacV1Subject(kind="User", name="mallory", api_group="rbac.authorization.k8s.io")
            ],
        ),
    )
    # kubectl tries a WebSocket (GET) first, then SPDY (POST): refused as get, then as create.
    done = _kubectl(apiserver, "--as", "mallory", "-n", namespace, "exec", "guarded", "--", "true")
    assert done.returncode == 1
    assert (
        f'pods "guarded" is forbidden: User "mallory" cannot create resource "pods/exec" '
        f'in API group "" in the namespace "{namespace}"'
    ) in done.stderr, done.stderr
    assert seen == []


def test_what_reaches_the_kubelet_and_its_refusal_reaching_kubectl(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str, kubelet, tmp_path: Path
) -> None:
    node, seen = kubelet
    v1.create_namespaced_pod(namespace, _pod("target", node))
    done = _kubectl(apiserver, "-n", namespace, "exec", "target", "--", "echo", "hi")
    assert done.returncode == 1 and 'container not found (\\"c\\")' in done.stderr.replace('"', '\\"'), done
    first = seen[-1]
    assert first["method"] == "POST" and first["cn"] == "kube-apiserver-kubelet-client"
    assert first["path"] == f"/exec/{namespace}/target/c?command=echo&command=hi&output=1&error=1"
    assert first["headers"]["Upgrade"] == "SPDY/3.1" and "Authorization" not in first["headers"]
    assert "v4.channel.k8s.io" in first["headers"].get_all("X-Stream-Protocol-Version")
    # kubectl forwards only to a running pod: the stand-in kubelet reports it so.
    v1.patch_namespaced_pod_status("target", namespace, {"status": {"phase": "Running"}})
    done = _kubectl(apiserver, "-n", namespace, "port-forward", "pod/target", "0:8080")
    assert done.returncode == 1, done
    forward = seen[-1]
    assert forward["path"] == f"/portForward/{namespace}/target"
    assert forward["headers"].get_all("X-Stream-Protocol-Version") == ["portforward.k8s.io"]
