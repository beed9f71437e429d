"""What other people's clients see on the wire, byte for byte as kube-apiserver 1.32 writes it: discovery
paths with and without a trailing slash (kr8s asks for /version/), Status bodies in metav1.Status's field
order and JSON bodies ending in the newline Go's json.Encoder writes, the health checks' verbose form."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message
from pathlib import Path

import pytest

from e2e.manifests import open_crd
from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration


def fetch(
    server: ApiServer,
    path: str,
    method: str = "GET",
    body: bytes | None = None,
    content_type: str = "application/json",
    accept: str = "application/json",
) -> tuple[int, bytes, str]:
    """(status, body bytes, content type) of one request as the administrator."""
    status, data, headers = exchange(server, path, method, body, content_type, accept)
    return status, data, headers.get("Content-Type", "")


def exchange(
    server: ApiServer,
    path: str,
    method: str = "GET",
    body: bytes | None = None,
    content_type: str = "application/json",
    accept: str = "application/json",
) -> tuple[int, bytes, Message]:
    """(status, body bytes, headers) of one request as the administrator."""
    context = ssl.create_default_context(cafile=str(server.ca_cert))
    pki = server.data_dir / "pki"
    context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    request = urllib.request.Request(
        server.url + path, data=body, method=method, headers={"Content-Type": content_type, "Accept": accept}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as resp:
            return resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read(), err.headers


@pytest.mark.parametrize(
    "path",
    ["/version", "/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/api/v1/namespaces"],
)
def test_discovery_and_resource_paths_answer_with_a_trailing_slash(apiserver: ApiServer, path: str) -> None:
    plain = fetch(apiserver, path)
    slashed = fetch(apiserver, path + "/")
    assert plain[0] == 200 and slashed[0] == 200, (plain, slashed)
    without, with_slash = json.loads(plain[1]), json.loads(slashed[1])
    if path == "/api/v1/namespaces":  # a list: the same items, at whatever revision each read saw
        assert [i["metadata"]["name"] for i in with_slash["items"]] == [
            i["metadata"]["name"] for i in without["items"]
        ]
    else:
        assert with_slash == without


def test_kubectl_reads_version_with_a_trailing_slash(kubectl) -> None:
    """kr8s's first call on every program is GET /version/."""
    version = json.loads(kubectl("get", "--raw", "/version/"))
    assert version["major"] == "1" and version["minor"] == "32"


def test_error_status_is_byte_identical_to_upstream(apiserver: ApiServer, namespace: str) -> None:
    status, body, content_type = fetch(apiserver, f"/api/v1/namespaces/{namespace}/configmaps/nope")
    assert status == 404 and content_type.startswith("application/json")
    assert body == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"configmaps \\"nope\\" not found","reason":"NotFound",'
        b'"details":{"name":"nope","kind":"configmaps"},"code":404}\n'
    )
    status, body, _ = fetch(apiserver, "/apis/apps/v1/namespaces/x/nonesuch")
    assert status == 404
    assert body == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"the server could not find the requested resource","reason":"NotFound",'
        b'"details":{},"code":404}\n'
    )


def test_json_bodies_end_as_upstream_writes_them(apiserver: ApiServer, namespace: str) -> None:
    """Objects, lists and discovery go through Go's json.Encoder (a closing newline); /version through
    WriteRawJSON (indented two spaces, no newline)."""
    made = json.dumps({"metadata": {"name": "c"}, "data": {"a": "1"}}).encode()
    status, created, _ = fetch(apiserver, f"/api/v1/namespaces/{namespace}/configmaps", "POST", made)
    assert status == 201 and created.endswith(b"}\n") and created.count(b"\n") == 1
    for path in (
        f"/api/v1/namespaces/{namespace}/configmaps/c",
        f"/api/v1/namespaces/{namespace}/configmaps",
        "/api/v1",
        "/apis",
    ):
        status, body, _ = fetch(apiserver, path)
        assert status == 200 and body.endswith(b"}\n") and body.count(b"\n") == 1, (path, body[-40:])
    aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    status, body, _ = fetch(apiserver, "/apis", accept=aggregated)
    assert status == 200 and body.endswith(b"}\n") and b"APIGroupDiscoveryList" in body
    status, body, _ = fetch(apiserver, "/version")
    assert (
        status == 200 and body.startswith(b'{\n  "major": "1",\n  "minor": "32",') and body.endswith(b"\n}")
    )
    # kube-openapi writes its documents as marshalled: no newline.
    for path in ("/openapi/v2", "/openapi/v3", "/openapi/v3/api/v1"):
        status, body, _ = fetch(apiserver, path)
        assert status == 200 and body.endswith(b"}"), path


def test_health_endpoints_list_named_checks(apiserver: ApiServer) -> None:
    status, body, content_type = fetch(apiserver, "/readyz", accept="*/*")
    assert (status, body, content_type) == (200, b"ok", "text/plain; charset=utf-8")
    status, body, _ = fetch(apiserver, "/readyz?verbose", accept="*/*")
    lines = body.decode().split("\n")
    assert status == 200 and lines[0] == "[+]ping ok" and lines[-2:] == ["readyz check passed", ""]
    assert {
        "[+]log ok",
        "[+]etcd ok",
        "[+]etcd-readiness ok",
        "[+]informer-sync ok",
        "[+]shutdown ok",
    } <= set(lines)
    status, body, _ = fetch(apiserver, "/livez?verbose", accept="*/*")
    assert status == 200 and body.endswith(b"livez check passed\n") and b"[+]shutdown ok" not in body
    assert fetch(apiserver, "/readyz/etcd", accept="*/*")[:2] == (200, b"ok")
    assert fetch(apiserver, "/readyz/poststarthook/rbac/bootstrap-roles", accept="*/*")[:2] == (200, b"ok")
    assert fetch(apiserver, "/readyz/nonesuch", accept="*/*")[0] == 404
    status, body, _ = fetch(apiserver, "/readyz?verbose&exclude=etcd&exclude=nonesuch", accept="*/*")
    assert status == 200 and "[+]etcd excluded: ok\n" in body.decode()
    assert 'warn: some health checks cannot be excluded: no matches for "nonesuch"\n' in body.decode()


def test_watch_from_before_the_cache_window_is_410(tmp_path: Path) -> None:
    """The window starts at the server's start, as upstream's watch cache starts from its initial list:
    a watcher of the previous server process gets 410 and relists instead of a replay from the store."""
    with ApiServer(tmp_path / "api") as server:
        made = json.dumps({"metadata": {"name": "before"}}).encode()
        status, body, _ = fetch(server, "/api/v1/namespaces/default/configmaps", "POST", made)
        assert status == 201
        rv = int(json.loads(body)["metadata"]["resourceVersion"])
        server.stop()
        server.start()
        status, body, _ = fetch(
            server,
            f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv - 1}&timeoutSeconds=5",
        )
        assert status == 200 and body, "the watch ended without an event"
        event = json.loads(body.split(b"\n")[0])
        assert event["type"] == "ERROR", event
        gone = event["object"]
        assert (gone["code"], gone["reason"]) == (410, "Expired")
        oldest = int(gone["message"].rpartition("(")[2].rstrip(")"))
        assert gone["message"] == f"too old resource version: {rv - 1} ({oldest})" and oldest >= rv


def remaining_item_counts(server: ApiServer, namespace: str) -> list[int | None]:
    for i in range(5):
        made = json.dumps({"metadata": {"name": f"c{i}", "labels": {"n": str(i)}}}).encode()
        assert fetch(server, f"/api/v1/namespaces/{namespace}/configmaps", "POST", made)[0] == 201
    counts, token = [], ""
    while True:
        query = "?limit=2" + (f"&continue={token}" if token else "")
        status, body, _ = fetch(server, f"/api/v1/namespaces/{namespace}/configmaps{query}")
        assert status == 200
        meta = json.loads(body)["metadata"]
        counts.append(meta.get("remainingItemCount"))
        token = meta.get("continue", "")
        if not token:
            break
    status, body, _ = fetch(server, f"/api/v1/namespaces/{namespace}/configmaps?limit=2&labelSelector=n")
    assert status == 200 and json.loads(body)["metadata"]["continue"]
    assert "remainingItemCount" not in json.loads(body)["metadata"]  # a selector: upstream does not count
    return counts


def test_paged_lists_carry_remaining_item_count(apiserver: ApiServer, namespace: str) -> None:
    assert remaining_item_counts(apiserver, namespace) == [3, 1, None]


def test_kubectl_reads_openapi_v2_as_protobuf_and_names_an_unknown_kind(
    kubectl, apiserver: ApiServer, namespace: str
) -> None:
    """kubectl asks /openapi/v2 for protobuf first; with it, an unknown kind gets kubectl's own words."""
    status, body, content_type = fetch(
        apiserver, "/openapi/v2", accept="application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
    )
    assert status == 200 and content_type == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    assert body.startswith(b"\n\x032.0")  # Document.swagger (field 1) = "2.0"
    unknown = {"apiVersion": "nowhere.example.com/v1", "kind": "Gizmo", "metadata": {"name": "g"}}
    out = kubectl.run("apply", "-n", namespace, "-f", "-", input=json.dumps(unknown), check=False)
    assert out.returncode == 1
    assert 'no matches for kind "Gizmo" in version "nowhere.example.com/v1"' in out.stderr
    assert "ensure CRDs are installed first" in out.stderr
    # Client-side apply reads the patch strategies from the protobuf document: a merge by key works.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"a": "1"}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "env": [{"name": "A", "value": "1"}]}]},
    }
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))
    pod["metadata"]["labels"] = {"a": "2"}
    assert "pod/p configured" in kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))


def test_table_for_a_kind_without_a_table_is_not_acceptable(apiserver: ApiServer) -> None:
    """Upstream has no Table for what it cannot list (SelfSubjectAccessReview): Table alone is 406, with
    a plain fallback the object comes as it is."""
    review = json.dumps(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}},
        }
    ).encode()
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    table = "application/json;as=Table;v=v1;g=meta.k8s.io"
    status, body, _ = fetch(apiserver, path, "POST", review, accept=table)
    assert status == 406
    assert json.loads(body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "only the following media types are accepted: "
        "application/json, application/yaml, application/vnd.kubernetes.protobuf",
        "reason": "NotAcceptable",
        "code": 406,
    }
    status, body, _ = fetch(apiserver, path, "POST", review, accept=table + ",application/json")
    assert status == 201 and json.loads(body)["kind"] == "SelfSubjectAccessReview"
    assert json.loads(body)["status"]["allowed"] is True


def test_kubectl_validates_against_the_openapi_document_once_a_crd_exists(kubectl, namespace: str) -> None:
    """Every custom resource list's schema refers to ListMeta: the document must define it, or kubectl's
    client-side validation refuses every manifest ("unknown model in reference") once one CRD exists."""
    crd = open_crd("wire.example.com", "Gadget", "gadgets")
    kubectl.run("apply", "-f", "-", input=json.dumps(crd))
    kubectl.run("wait", "--for=condition=Established", "crd/gadgets.wire.example.com", "--timeout=30s")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "validated"}, "data": {"a": "1"}}
    out = kubectl.run(
        "apply", "--validate=strict", "-n", namespace, "-f", "-", input=json.dumps(cm), check=False
    )
    assert out.returncode == 0, out.stderr
    kubectl.run("delete", "crd", "gadgets.wire.example.com", "--wait=false")


def test_kr8s_reads_version_and_objects(apiserver: ApiServer, namespace: str) -> None:
    """kr8s (a third-party client) asks for `/version/` with a trailing slash before anything else; every
    call of its failed on the 404 that path got."""
    import kr8s
    from kr8s.objects import ConfigMap

    api = kr8s.api(kubeconfig=str(apiserver.kubeconfig))
    assert api.version()["gitVersion"].startswith("v1.32.")
    cm = ConfigMap({"metadata": {"name": "kr8s-cm", "namespace": namespace}, "data": {"a": "1"}}, api=api)
    cm.create()
    assert ConfigMap.get("kr8s-cm", namespace=namespace, api=api).raw["data"] == {"a": "1"}
    assert "kr8s-cm" in [c.name for c in kr8s.get("configmaps", namespace=namespace, api=api)]
    cm.delete()
