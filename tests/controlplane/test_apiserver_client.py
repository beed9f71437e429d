"""The official Python client, unchanged, against the real server: the semantics the agent relies on."""

from __future__ import annotations

import datetime
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from pykubelet.rig.apiserver import ApiServer, api_client

pytestmark = pytest.mark.integration


def pod(name: str, node: str | None = None, **labels: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels or None),
        spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(name="c", image="busybox")]),
    )


def raw(
    server: ApiServer,
    method: str,
    path: str,
    body: object = None,
    content_type: str = "application/json",
    query: list[tuple[str, str]] | None = None,
) -> tuple[int, dict]:
    """Call the server directly over HTTPS with the admin client certificate."""
    data = (
        body.encode()
        if isinstance(body, str)
        else body
        if isinstance(body, bytes) or body is None
        else json.dumps(body).encode()
    )
    with urlopen_admin(server, method, path, data, content_type, query) as resp:
        status, payload = resp.status, resp.read()
    return status, json.loads(payload or b"{}")


class _Response:
    def __init__(self, status: int, stream) -> None:  # type: ignore[no-untyped-def]
        self.status = status
        self.stream = stream

    def read(self) -> bytes:
        return self.stream.read()

    def __enter__(self) -> _Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stream.close()


def urlopen_admin(
    server: ApiServer,
    method: str,
    path: str,
    data: bytes | None = None,
    content_type: str = "application/json",
    query: list[tuple[str, str]] | None = None,
) -> _Response:
    context = ssl.create_default_context(cafile=str(server.ca_cert))
    context.load_cert_chain(server.data_dir / "pki" / "admin.crt", server.data_dir / "pki" / "admin.key")
    url = server.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": content_type, "Accept": "application/json"}
    )
    try:
        resp = urllib.request.urlopen(request, context=context, timeout=30)
        return _Response(resp.status, resp)
    except urllib.error.HTTPError as err:
        return _Response(err.code, err)


def test_crud_conflicts_and_status_shapes(v1: client.CoreV1Api, namespace: str) -> None:
    created = v1.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"), data={"a": "1"})
    )
    rv = created.metadata.resource_version
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")))
    assert err.value.status == 409 and json.loads(err.value.body)["reason"] == "AlreadyExists"
    created.data = {"a": "2"}
    updated = v1.replace_namespaced_config_map("c", namespace, created)
    assert int(updated.metadata.resource_version) > int(rv)
    created.metadata.resource_version = rv
    with pytest.raises(ApiException) as err:
        v1.replace_namespaced_config_map("c", namespace, created)
    status = json.loads(err.value.body)
    assert err.value.status == 409 and status["reason"] == "Conflict" and status["kind"] == "Status"
    assert status["details"] == {"name": "c", "kind": "configmaps"}
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_config_map("missing", namespace)
    status = json.loads(err.value.body)
    assert (
        err.value.status == 404
        and status["reason"] == "NotFound"
        and status["message"] == 'configmaps "missing" not found'
    )
    generated = v1.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(generate_name="gen-"))
    )
    assert generated.metadata.name.startswith("gen-") and len(generated.metadata.name) == 9


def test_secret_string_data_is_folded_into_data(v1: client.CoreV1Api, namespace: str) -> None:
    secret = v1.create_namespaced_secret(
        namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="s"), data={"a": "YQ=="}, string_data={"b": "bee"}),
    )
    assert (
        secret.data == {"a": "YQ==", "b": "YmVl"} and secret.string_data is None and secret.type == "Opaque"
    )


def test_validation_422_with_causes(v1: client.CoreV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(
            namespace,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name="p"),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="")]),
            ),
        )
    status = json.loads(err.value.body)
    assert err.value.status == 422 and status["reason"] == "Invalid"
    assert status["message"] == 'Pod "p" is invalid: spec.containers[0].image: Required value'
    assert status["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].image"}
    ]


def test_list_selectors_and_pagination(v1: client.CoreV1Api, namespace: str) -> None:
    for i in range(7):
        v1.create_namespaced_pod(
            namespace, pod(f"p{i}", node="n1" if i % 2 else None, app="a" if i < 4 else "b")
        )
    names = lambda items: sorted(p.metadata.name for p in items)  # noqa: E731
    assert names(v1.list_namespaced_pod(namespace, field_selector="spec.nodeName=n1").items) == [
        "p1",
        "p3",
        "p5",
    ]
    assert names(
        v1.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName=n1,metadata.namespace={namespace}"
        ).items
    ) == ["p1", "p3", "p5"]
    assert names(v1.list_namespaced_pod(namespace, label_selector="app=b").items) == ["p4", "p5", "p6"]
    assert names(
        v1.list_namespaced_pod(
            namespace, label_selector="app in (a),app!=b", field_selector="spec.nodeName!=n1"
        ).items
    ) == ["p0", "p2"]
    seen: list[str] = []
    token = None
    pages = 0
    first_rv = None
    while True:
        page = v1.list_namespaced_pod(namespace, limit=3, _continue=token)
        first_rv = first_rv or page.metadata.resource_version
        assert page.metadata.resource_version == first_rv, "every page is served at the first page's revision"
        seen += [p.metadata.name for p in page.items]
        pages += 1
        if pages == 1:
            v1.create_namespaced_pod(namespace, pod("p9"))  # not visible in the snapshot
        token = page.metadata._continue
        if not token:
            break
    assert seen == [f"p{i}" for i in range(7)] and pages == 3
    with pytest.raises(ApiException) as err:
        v1.list_namespaced_pod(namespace, field_selector="spec.bogus=1")
    assert err.value.status == 400


def test_watch_resume_and_410(tmp_path: Path) -> None:
    # A server with a tiny watch window so that an old resourceVersion really falls out of it.
    with (
        ApiServer(tmp_path / "small", extra_args=["--watch-cache-size", "5"]) as server,
        api_client(server.kubeconfig) as api,
    ):
        v1 = client.CoreV1Api(api)
        listed = v1.list_namespaced_config_map("default")
        start_rv = listed.metadata.resource_version
        for i in range(3):
            v1.create_namespaced_config_map(
                "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"w{i}"))
            )
        w = watch.Watch()
        events = []
        for event in w.stream(
            v1.list_namespaced_config_map, "default", resource_version=start_rv, timeout_seconds=15
        ):
            events.append((event["type"], event["object"].metadata.name))
            if len(events) == 3:
                w.stop()
        assert events == [("ADDED", "w0"), ("ADDED", "w1"), ("ADDED", "w2")]
        for i in range(10):
            v1.patch_namespaced_config_map("w0", "default", {"data": {"i": str(i)}})
        status, body = raw(
            server,
            "GET",
            "/api/v1/namespaces/default/configmaps",
            query=[("watch", "true"), ("resourceVersion", start_rv), ("timeoutSeconds", "2")],
        )
        assert status == 200 and body["type"] == "ERROR"
        assert body["object"]["code"] == 410 and body["object"]["reason"] == "Expired"
        # The client's own 410 handling: it raises ApiException(410) once it cannot retry.
        with pytest.raises(ApiException) as err:
            for _ in watch.Watch().stream(
                v1.list_namespaced_config_map, "default", resource_version=start_rv, timeout_seconds=2
            ):
                pass
        assert err.value.status == 410


def test_watch_initial_events_bookmarks_and_single_object(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str
) -> None:
    for i in range(3):
        v1.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"i{i}"))
        )
    with urlopen_admin(
        apiserver,
        "GET",
        f"/api/v1/namespaces/{namespace}/configmaps",
        query=[
            ("watch", "true"),
            ("sendInitialEvents", "true"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", "3"),
        ],
    ) as resp:
        lines = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    assert resp.status == 200
    types = [ev["type"] for ev in lines]
    assert types[:4] == ["ADDED", "ADDED", "ADDED", "BOOKMARK"]
    assert lines[3]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert types[-1] == "BOOKMARK", "a bookmark comes before timeoutSeconds ends"
    # One object by name (what `kubectl get -w NAME` does), resumed from a list's resourceVersion so the
    # changes are seen whether they land before or after the watch request.
    rv = v1.list_namespaced_config_map(namespace).metadata.resource_version
    got = []
    w = watch.Watch()

    def change() -> None:
        time.sleep(0.3)
        v1.patch_namespaced_config_map("i1", namespace, {"data": {"x": "1"}})
        v1.patch_namespaced_config_map("i2", namespace, {"data": {"x": "1"}})
        v1.delete_namespaced_config_map("i1", namespace)

    threading.Thread(target=change, daemon=True).start()
    for event in w.stream(
        v1.list_namespaced_config_map,
        namespace,
        field_selector="metadata.name=i1",
        resource_version=rv,
        timeout_seconds=10,
    ):
        got.append(event["type"])
        if event["type"] == "DELETED":
            w.stop()
    assert got == ["MODIFIED", "DELETED"]


def test_status_subresource_and_binding(v1: client.CoreV1Api, namespace: str) -> None:
    v1.create_namespaced_pod(namespace, pod("s"))
    # The main resource ignores status; the status subresource ignores the spec and the ownerReferences
    # but takes metadata changes (upstream's podStatusStrategy resets only those).
    v1.patch_namespaced_pod(
        "s", namespace, {"status": {"phase": "Running"}, "metadata": {"labels": {"a": "b"}}}
    )
    p = v1.read_namespaced_pod("s", namespace)
    assert p.status.phase == "Pending" and p.metadata.labels == {"a": "b"}
    v1.patch_namespaced_pod_status(
        "s",
        namespace,
        {
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            "metadata": {"labels": {"a": "c"}},
        },
    )
    p = v1.read_namespaced_pod("s", namespace)
    assert p.status.phase == "Running" and p.metadata.labels == {"a": "c"}
    # A uid in the patch is a precondition, as the kubelet's status manager relies on.
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_pod_status(
            "s", namespace, {"metadata": {"uid": "someone-else"}, "status": {"phase": "Failed"}}
        )
    assert err.value.status == 409 and "Precondition failed: UID" in json.loads(err.value.body)["message"]
    uid = v1.read_namespaced_pod("s", namespace).metadata.uid
    v1.patch_namespaced_pod_status("s", namespace, {"metadata": {"uid": uid}, "status": {"phase": "Running"}})
    # Strategic merge on status merges conditions by type.
    v1.patch_namespaced_pod_status(
        "s", namespace, {"status": {"conditions": [{"type": "ContainersReady", "status": "True"}]}}
    )
    assert sorted(c.type for c in v1.read_namespaced_pod("s", namespace).status.conditions) == [
        "ContainersReady",
        "Ready",
    ]
    # A uid in the Binding is a precondition too: a decision about an older pod of that name is refused.
    stale = client.V1Binding(
        metadata=client.V1ObjectMeta(name="s", uid="an-older-pod"),
        target=client.V1ObjectReference(kind="Node", name="n1"),
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod_binding("s", namespace, stale, _preload_content=False)
    assert err.value.status == 409 and "Precondition failed: UID in precondition: an-older-pod" in str(
        err.value.body
    )
    assert v1.read_namespaced_pod("s", namespace).spec.node_name is None
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name="s", uid=uid, annotations={"example.com/placed-by": "test"}),
        target=client.V1ObjectReference(kind="Node", name="n1"),
    )
    before_bind = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    managed = v1.read_namespaced_pod("s", namespace).metadata.managed_fields
    v1.create_namespaced_pod_binding("s", namespace, binding, _preload_content=False)
    p = v1.read_namespaced_pod("s", namespace)
    scheduled = next(c for c in p.status.conditions if c.type == "PodScheduled")
    assert p.spec.node_name == "n1" and scheduled.status == "True"
    assert scheduled.last_transition_time >= before_bind  # the time of binding, not of creation
    # upstream's setPodHostAndAnnotations: the Binding's annotations are merged into the pod's
    assert (p.metadata.annotations or {}).get("example.com/placed-by") == "test"
    # upstream's BindingREST writes the pod below the field manager: no managedFields entry for it
    assert p.metadata.managed_fields == managed and managed
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod_binding("s", namespace, binding, _preload_content=False)
    assert err.value.status == 409


def test_graceful_pod_deletion_and_uid_precondition(v1: client.CoreV1Api, namespace: str) -> None:
    v1.create_namespaced_pod(namespace, pod("bound", node="n1"))
    v1.create_namespaced_pod(namespace, pod("unbound"))
    v1.delete_namespaced_pod("unbound", namespace)
    with pytest.raises(ApiException):
        v1.read_namespaced_pod("unbound", namespace)
    deleted = v1.delete_namespaced_pod("bound", namespace)
    assert (
        deleted.metadata.deletion_timestamp is not None
        and deleted.metadata.deletion_grace_period_seconds == 30
    )
    p = v1.read_namespaced_pod("bound", namespace)
    assert p.metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as err:
        v1.delete_namespaced_pod(
            "bound",
            namespace,
            body=client.V1DeleteOptions(
                grace_period_seconds=0, preconditions=client.V1Preconditions(uid="not-the-uid")
            ),
        )
    # rest.BeforeDelete's text, naming the kind.
    assert err.value.status == 409 and json.loads(err.value.body)["message"] == (
        f'Operation cannot be fulfilled on Pod "bound": the UID in the precondition (not-the-uid) does not match '
        f"the UID in record ({p.metadata.uid}). The object might have been deleted and then recreated"
    )
    v1.delete_namespaced_pod(
        "bound",
        namespace,
        body=client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=p.metadata.uid)
        ),
    )
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_pod("bound", namespace)
    assert err.value.status == 404


def test_finalizers_hold_objects(v1: client.CoreV1Api, namespace: str) -> None:
    v1.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="f", finalizers=["example.com/hold"]))
    )
    v1.delete_namespaced_config_map("f", namespace)
    held = v1.read_namespaced_config_map("f", namespace)
    assert held.metadata.deletion_timestamp is not None
    v1.patch_namespaced_config_map(
        "f", namespace, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/hold"]}}
    )
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_config_map("f", namespace)
    assert err.value.status == 404


def test_namespace_deletion_terminates_and_empties(v1: client.CoreV1Api) -> None:
    v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="doomed")))
    v1.create_namespaced_config_map("doomed", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")))
    v1.create_namespaced_pod("doomed", pod("p"))
    v1.delete_namespace("doomed")
    assert v1.read_namespace("doomed").status.phase == "Terminating"
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map(
            "doomed", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="late"))
        )
    assert err.value.status == 403
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            v1.read_namespace("doomed")
        except ApiException as e:
            assert e.status == 404
            break
        time.sleep(0.1)
    else:
        pytest.fail("namespace was not removed")
    assert v1.list_namespaced_config_map("doomed").items == []
    with pytest.raises(ApiException) as err:
        v1.delete_namespace("default")
    assert err.value.status == 403


def test_agent_paths_nodes_leases_events(api: client.ApiClient, v1: client.CoreV1Api) -> None:
    node = v1.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name="agent-node", labels={"kubernetes.io/hostname": "agent-node"})
        )
    )
    v1.patch_node_status(
        "agent-node",
        {
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                "nodeInfo": {"kubeletVersion": "v1.32.0"},
            }
        },
    )
    assert v1.read_node("agent-node").status.conditions[0].reason == "KubeletReady"
    assert node.metadata.uid
    coord = client.CoordinationV1Api(api)
    lease = coord.create_namespaced_lease(
        "kube-node-lease",
        client.V1Lease(
            metadata=client.V1ObjectMeta(name="agent-node"),
            spec=client.V1LeaseSpec(holder_identity="agent-node", lease_duration_seconds=40),
        ),
    )
    lease.spec.renew_time = lease.metadata.creation_timestamp
    renewed = coord.replace_namespaced_lease("agent-node", "kube-node-lease", lease)
    assert int(renewed.metadata.resource_version) > int(lease.metadata.resource_version)
    ev1 = client.EventsV1Api(api)
    ev1.create_namespaced_event(
        "default",
        client.EventsV1Event(
            metadata=client.V1ObjectMeta(name="agent-node.1"),
            event_time=lease.metadata.creation_timestamp,
            regarding=client.V1ObjectReference(kind="Node", name="agent-node"),
            reason="Starting",
            note="Starting kubelet.",
            type="Normal",
            action="Start",
            reporting_controller="kubelet",
            reporting_instance="agent-node",
        ),
    )
    core = v1.read_namespaced_event("agent-node.1", "default")
    assert (
        core.involved_object.name == "agent-node"
        and core.message == "Starting kubelet."
        and core.reporting_component == "kubelet"
    )
    v1.patch_namespaced_event("agent-node.1", "default", {"count": 2})
    assert ev1.read_namespaced_event("agent-node.1", "default").deprecated_count == 2


def test_bad_input(apiserver: ApiServer, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    status, body = raw(apiserver, "POST", path, "{not json")
    assert status == 400 and body["reason"] == "BadRequest"
    status, body = raw(apiserver, "POST", path, "a: [", content_type="application/yaml")
    assert status == 400 and "yaml" in body["message"].lower()
    status, body = raw(
        apiserver, "POST", path, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}
    )
    assert status == 400 and "does not match the expected kind" in body["message"]
    status, body = raw(
        apiserver,
        "POST",
        path,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "big"},
            "data": {"k": "x" * (1600 * 1024)},
        },
    )
    # Under the 3 MiB body limit, so decoded and validated: a ConfigMap holds at most 1 MiB (upstream's
    # ValidateConfigMap, core.MaxSecretSize).
    assert status == 422, body
    assert "Too long: may not be more than 1048576 bytes" in body["message"], body["message"]
    status, body = raw(
        apiserver,
        "POST",
        path,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "bogus": 1, "data": {"k": "v"}},
        query=[("fieldValidation", "Strict")],
    )
    assert status == 400 and 'unknown field "bogus"' in body["message"]
    # A value of the wrong type is a hard decoding error, which upstream reports before unknown fields.
    status, body = raw(
        apiserver,
        "POST",
        path,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "s"},
            "bogus": 1,
            "data": {"k": "v", "x": 1},
        },
        query=[("fieldValidation", "Strict")],
    )
    assert status == 400 and body["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: '
        "json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
    )
    # Without Strict, unknown fields are dropped (and reported in a Warning header), never stored.
    status, body = raw(
        apiserver,
        "POST",
        path,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}, "bogus": 1},
    )
    assert status == 201 and "bogus" not in body
    raw(apiserver, "DELETE", f"{path}/w")
    # Nothing of the rejected requests was stored.
    status, body = raw(apiserver, "GET", path)
    assert status == 200 and body["items"] == []


def test_authentication(apiserver: ApiServer, tmp_path: Path) -> None:
    """No credentials: system:anonymous (--anonymous-auth defaults to true, as kube-apiserver's), whom RBAC
    lets read health and version only; a bearer token that fails is a 401, never anonymous."""
    context = ssl.create_default_context(cafile=str(apiserver.ca_cert))
    for path, message in [
        (
            "/api/v1/namespaces",
            'namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" '
            'in API group "" at the cluster scope',
        ),
        ("/api", 'forbidden: User "system:anonymous" cannot get path "/api"'),
    ]:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{apiserver.url}{path}", context=context)
        body = json.loads(err.value.read())
        assert (err.value.code, body["reason"], body["message"]) == (403, "Forbidden", message)
    for path in ("/readyz", "/version"):
        with urllib.request.urlopen(f"{apiserver.url}{path}", context=context) as resp:
            assert resp.status == 200
    bad = urllib.request.Request(f"{apiserver.url}/version", headers={"Authorization": "Bearer not-a-token"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(bad, context=context)
    assert err.value.code == 401 and json.loads(err.value.read())["reason"] == "Unauthorized"


def test_without_anonymous_auth_no_credentials_is_a_401(tmp_path: Path) -> None:
    with ApiServer(tmp_path / "noanon", extra_args=["--anonymous-auth=false"]) as server:
        context = ssl.create_default_context(cafile=str(server.ca_cert))
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{server.url}/api/v1/namespaces", context=context)
        assert err.value.code == 401 and json.loads(err.value.read())["reason"] == "Unauthorized"
        with urllib.request.urlopen(f"{server.url}/readyz", context=context) as resp:
            assert resp.read() == b"ok"


def test_token_file_authentication(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('s3cret-token,alice,1001,"devs,ops"\n')
    with ApiServer(tmp_path / "tok", extra_args=["--token-auth-file", str(tokens)]) as server:
        context = ssl.create_default_context(cafile=str(server.ca_cert))
        request = urllib.request.Request(
            f"{server.url}/api/v1/namespaces", headers={"Authorization": "Bearer s3cret-token"}
        )
        # Authenticated, but RBAC grants alice nothing beyond what every user holds.
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(request, context=context)
        assert denied.value.code == 403
        assert json.loads(denied.value.read())["message"] == (
            'namespaces is forbidden: User "alice" cannot list resource "namespaces" in API group "" at the cluster scope'
        )
        whoami = urllib.request.Request(
            f"{server.url}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            method="POST",
            data=b'{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}',
            headers={"Authorization": "Bearer s3cret-token", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(whoami, context=context) as resp:
            assert json.loads(resp.read())["status"]["userInfo"] == {
                "username": "alice",
                "uid": "1001",
                "groups": ["devs", "ops", "system:authenticated"],
            }
        bad = urllib.request.Request(
            f"{server.url}/api/v1/namespaces", headers={"Authorization": "Bearer wrong"}
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad, context=context)
        assert err.value.code == 401
        assert "s3cret-token" not in (server.data_dir / "apiserver.log").read_text()


def test_kubernetes_service_points_at_the_server(apiserver: ApiServer, v1: client.CoreV1Api) -> None:
    svc = v1.read_namespaced_service("kubernetes", "default")
    assert svc.spec.cluster_ip == "10.96.0.1" and svc.spec.ports[0].port == 443
    ep = v1.read_namespaced_endpoints("kubernetes", "default")
    assert ep.subsets[0].addresses[0].ip == "127.0.0.1" and ep.subsets[0].ports[0].port == apiserver.port


def test_rig_issues_kubeconfigs_for_other_identities(apiserver: ApiServer, tmp_path: Path) -> None:
    path = apiserver.client_kubeconfig("system:node:n1", ("system:nodes",), tmp_path / "kubelet.kubeconfig")
    with api_client(path) as api:
        # A node may read services (system:node's rules), not namespaces.
        assert client.CoreV1Api(api).list_service_for_all_namespaces().items
        with pytest.raises(ApiException) as denied:
            client.CoreV1Api(api).list_namespace()
        assert denied.value.status == 403
        review = client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview())
        assert review.status.user_info.username == "system:node:n1"
        assert review.status.user_info.groups == ["system:nodes", "system:authenticated"]
    assert (tmp_path / "system_node_n1.key").stat().st_mode & 0o077 == 0


def test_dry_run_deletecollection_and_events_v1_views(
    api: client.ApiClient, v1: client.CoreV1Api, namespace: str
) -> None:
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dry"))
    created = v1.create_namespaced_config_map(namespace, cm, dry_run="All")
    assert created.metadata.uid
    with pytest.raises(ApiException):
        v1.read_namespaced_config_map("dry", namespace)
    for i in range(4):
        v1.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"c{i}", labels={"batch": "a" if i < 3 else "b"})
            ),
        )
    v1.delete_collection_namespaced_config_map(namespace, label_selector="batch=a")
    assert [c.metadata.name for c in v1.list_namespaced_config_map(namespace).items] == ["c3"]
    v1.delete_namespaced_config_map("c3", namespace, dry_run="All")
    assert v1.read_namespaced_config_map("c3", namespace).metadata.name == "c3"
    # A dry-run update answers with the object it would store, which is not stored.
    current = v1.read_namespaced_config_map("c3", namespace)
    current.data = {"k": "dry"}
    answer = v1.replace_namespaced_config_map("c3", namespace, current, dry_run="All")
    assert answer.data == {"k": "dry"} and v1.read_namespaced_config_map("c3", namespace).data is None
    # events.k8s.io/v1 is a view of core events: selectors and watches use its field names.
    ev1 = client.EventsV1Api(api)
    stamp = v1.read_namespaced_config_map("c3", namespace).metadata.creation_timestamp
    for name, target in (("e1", "c3"), ("e2", "other")):
        v1.create_namespaced_event(
            namespace,
            client.CoreV1Event(
                metadata=client.V1ObjectMeta(name=name),
                involved_object=client.V1ObjectReference(kind="ConfigMap", name=target),
                reason="Tested",
                message=f"about {target}",
                type="Normal",
                first_timestamp=stamp,
                last_timestamp=stamp,
            ),
        )
    listed = ev1.list_namespaced_event(namespace, field_selector="regarding.name=c3")
    assert [(e.metadata.name, e.note, e.regarding.name) for e in listed.items] == [("e1", "about c3", "c3")]
    events = []
    for event in watch.Watch().stream(ev1.list_namespaced_event, namespace, timeout_seconds=2):
        events.append((event["type"], event["object"].note))
    assert sorted(events) == [("ADDED", "about c3"), ("ADDED", "about other")]


def test_service_allocations_survive_updates_and_pod_tolerations_only_grow(
    v1: client.CoreV1Api, namespace: str
) -> None:
    svc = v1.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="s"),
            spec=client.V1ServiceSpec(
                type="NodePort", selector={"a": "b"}, ports=[client.V1ServicePort(port=80)]
            ),
        ),
    )
    ip, node_port = svc.spec.cluster_ip, svc.spec.ports[0].node_port
    assert ip and 30000 <= node_port <= 32767
    replaced = v1.replace_namespaced_service(
        "s",
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="s"),
            spec=client.V1ServiceSpec(
                type="NodePort", selector={"a": "c"}, ports=[client.V1ServicePort(port=80)]
            ),
        ),
    )
    assert replaced.spec.cluster_ip == ip and replaced.spec.ports[0].node_port == node_port
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_service("s", namespace, {"spec": {"clusterIP": "10.96.9.9"}})
    assert err.value.status == 422
    v1.create_namespaced_pod(namespace, pod("t"))
    extra = {"key": "example.com/x", "operator": "Exists", "effect": "NoSchedule"}
    v1.patch_namespaced_pod("t", namespace, [{"op": "add", "path": "/spec/tolerations/-", "value": extra}])
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_pod("t", namespace, [{"op": "remove", "path": "/spec/tolerations/0"}])
    assert err.value.status == 422


def test_service_names_are_dns1035_labels(v1: client.CoreV1Api, namespace: str) -> None:
    """ValidateServiceName: a Service's name must start with a letter (a pod's may start with a digit)."""
    spec = client.V1ServiceSpec(selector={"a": "b"}, ports=[client.V1ServicePort(port=80)])
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_service(
            namespace, client.V1Service(metadata=client.V1ObjectMeta(name="1web"), spec=spec)
        )
    assert err.value.status == 422
    body = json.loads(err.value.body)
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "1web": a DNS-1035 label must consist of lower case alphanumeric characters '
            "or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  "
            "or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
            "field": "metadata.name",
        }
    ]
    made = v1.create_namespaced_service(
        namespace, client.V1Service(metadata=client.V1ObjectMeta(name="web1"), spec=spec)
    )
    assert made.metadata.name == "web1"


def test_metadata_only_views(apiserver: ApiServer, v1: client.CoreV1Api, namespace: str) -> None:
    v1.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="m", labels={"k": "v"}), data={"big": "x" * 1000}
        ),
    )
    accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
    context = ssl.create_default_context(cafile=str(apiserver.ca_cert))
    context.load_cert_chain(
        apiserver.data_dir / "pki" / "admin.crt", apiserver.data_dir / "pki" / "admin.key"
    )
    request = urllib.request.Request(
        f"{apiserver.url}/api/v1/namespaces/{namespace}/configmaps", headers={"Accept": accept}
    )
    with urllib.request.urlopen(request, context=context) as resp:
        body = json.loads(resp.read())
    assert body["kind"] == "PartialObjectMetadataList"
    assert body["items"][0]["kind"] == "PartialObjectMetadata" and body["items"][0]["metadata"]["labels"] == {
        "k": "v"
    }
    assert "data" not in body["items"][0]


def _metric(server: ApiServer, name: str) -> float:
    with urlopen_admin(server, "GET", "/metrics") as resp:
        text = resp.read().decode()
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(name)))


def test_idle_watch_of_a_departed_client_is_released(tmp_path: Path) -> None:
    with ApiServer(tmp_path / "w") as server:  # its own server: no other test's watchers in the count
        assert _metric(server, "apiserver_registered_watchers") == 0
        context = ssl.create_default_context(cafile=str(server.ca_cert))
        context.load_cert_chain(server.data_dir / "pki" / "admin.crt", server.data_dir / "pki" / "admin.key")
        request = urllib.request.Request(
            f"{server.url}/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=600"
        )
        resp = urllib.request.urlopen(request, context=context, timeout=30)
        deadline = time.monotonic() + 10
        while _metric(server, "apiserver_registered_watchers") == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _metric(server, "apiserver_registered_watchers") == 1
        assert _metric(server, 'apiserver_storage_objects{resource="namespaces"}') == 4
        resp.close()  # the client goes away without a word; no event will ever come for this watch
        deadline = time.monotonic() + 20
        while _metric(server, "apiserver_registered_watchers") > 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _metric(server, "apiserver_registered_watchers") == 0


def test_pod_log_is_streamed_from_the_node_agent(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    """pods/log: the server finds the node's kubelet endpoint, presents its kubelet-client certificate
    (signed by the cluster CA) and passes the PodLogOptions and the answer through."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from controlplane.apiserver.certs import ensure_pki

    seen: list[tuple[str, str]] = []

    class Kubelet(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            peer = self.connection.getpeercert() or {}
            subject = dict(x[0] for x in peer.get("subject", ()))
            seen.append((self.path, subject.get("commonName", "")))
            if "previous=true" in self.path:
                body = json.dumps(
                    {
                        "kind": "Status",
                        "status": "Failure",
                        "reason": "BadRequest",
                        "code": 400,
                        "message": 'previous terminated container "c" in pod "logged" not found',
                    }
                ).encode()
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
            else:
                body = b"one\ntwo\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    pki = ensure_pki(apiserver.data_dir)  # the kubelet trusts the cluster CA, as the stack's agent does
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca_cert))
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.load_cert_chain(pki.serving_cert, pki.serving_key)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Kubelet)
    httpd.socket = server_ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    node_name = f"logs-{namespace}"
    try:
        v1.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=node_name)))
        v1.patch_node_status(
            node_name,
            {
                "status": {
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": httpd.server_address[1]}},
                }
            },
        )
        v1.create_namespaced_pod(namespace, pod("logged", node_name))
        assert v1.read_namespaced_pod_log("logged", namespace, tail_lines=2, timestamps=True) == "one\ntwo\n"
        path, cn = seen[-1]
        assert path.startswith(f"/containerLogs/{namespace}/logged/c?")
        assert "tailLines=2" in path and "timestamps=true" in path
        assert cn == "kube-apiserver-kubelet-client"
        with pytest.raises(ApiException) as err:
            v1.read_namespaced_pod_log("logged", namespace, previous=True)
        assert err.value.status == 400 and "previous terminated container" in err.value.body
        v1.create_namespaced_pod(namespace, pod("unbound"))
        with pytest.raises(ApiException) as err:
            v1.read_namespaced_pod_log("unbound", namespace)
        assert err.value.status == 400 and "pod unbound does not have a host assigned" in err.value.body
        httpd.shutdown()
        httpd.server_close()
        with pytest.raises(ApiException) as err:
            v1.read_namespaced_pod_log("logged", namespace)
        assert err.value.status == 500 and "/containerLogs/" in err.value.body
    finally:
        httpd.shutdown()
        v1.delete_node(node_name)
