"""kubectl 1.32, unchanged, against the real server started as a subprocess."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

pytestmark = pytest.mark.integration

MANIFEST = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
data:
  greeting: hello
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
    - name: web
      image: busybox:1.36
      env: [{name: A, value: "1"}]
      ports: [{containerPort: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: api, image: busybox:1.36}]
---
apiVersion: v1
kind: Service
metadata:
  name: api
spec:
  selector: {app: api}
  ports: [{port: 80, targetPort: 8080}]
"""


def test_api_resources_match_upstream(kubectl) -> None:
    out = kubectl("api-resources", "--no-headers")
    rows = {tuple(line.split()) for line in out.splitlines()}
    for expected in [
        ("pods", "po", "v1", "true", "Pod"),
        ("nodes", "no", "v1", "false", "Node"),
        ("namespaces", "ns", "v1", "false", "Namespace"),
        ("configmaps", "cm", "v1", "true", "ConfigMap"),
        ("secrets", "v1", "true", "Secret"),
        ("serviceaccounts", "sa", "v1", "true", "ServiceAccount"),
        ("services", "svc", "v1", "true", "Service"),
        ("endpoints", "ep", "v1", "true", "Endpoints"),
        ("events", "ev", "v1", "true", "Event"),
        ("leases", "coordination.k8s.io/v1", "true", "Lease"),
        ("events", "ev", "events.k8s.io/v1", "true", "Event"),
        ("deployments", "deploy", "apps/v1", "true", "Deployment"),
        ("replicasets", "rs", "apps/v1", "true", "ReplicaSet"),
    ]:
        assert expected in rows, f"{expected} missing from:\n{out}"
    assert "kubernetes-admin" in kubectl("auth", "whoami")
    assert "Restart policy for all containers within the pod" in kubectl("explain", "pod.spec.restartPolicy")
    assert set(kubectl("get", "ns", "-o", "name").split()) >= {
        "namespace/default",
        "namespace/kube-system",
        "namespace/kube-public",
        "namespace/kube-node-lease",
    }


def test_apply_twice_second_is_noop_and_validates(kubectl, namespace: str) -> None:
    first = kubectl("apply", "-n", namespace, "-f", "-", input=MANIFEST)
    assert "pod/web created" in first and "deployment.apps/api created" in first
    rv_before = json.loads(kubectl("get", "-n", namespace, "pod", "web", "-o", "json"))["metadata"][
        "resourceVersion"
    ]
    second = kubectl("apply", "-n", namespace, "-f", "-", input=MANIFEST)
    assert second.count("unchanged") == 4, second
    rv_after = json.loads(kubectl("get", "-n", namespace, "pod", "web", "-o", "json"))["metadata"][
        "resourceVersion"
    ]
    assert rv_before == rv_after
    # A changed manifest is applied as a strategic merge patch built by kubectl.
    changed = kubectl(
        "apply", "-n", namespace, "-f", "-", input=MANIFEST.replace("replicas: 2", "replicas: 3")
    )
    assert "deployment.apps/api configured" in changed
    deploy = json.loads(kubectl("get", "-n", namespace, "deploy", "api", "-o", "json"))
    assert deploy["spec"]["replicas"] == 3 and deploy["metadata"]["generation"] == 2
    # Validation happens on the server: an unknown field is an error naming it (no --validate=false).
    bad = kubectl.run(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        check=False,
        input=MANIFEST.split("---")[0].replace("\ndata:", "\nbogusField: 1\ndata:"),
    )
    assert bad.returncode != 0 and 'unknown field "bogusField"' in bad.stderr


def test_get_table_wide_yaml(kubectl, namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=MANIFEST)
    table = kubectl("get", "-n", namespace, "pods")
    header, row = table.splitlines()[:2]
    assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert row.split()[:4] == ["web", "0/1", "Pending", "0"]
    wide = kubectl("get", "-n", namespace, "pods", "-o", "wide").splitlines()[0]
    assert wide.split() == [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED",
        "NODE",
        "READINESS",
        "GATES",
    ]
    deploy = kubectl("get", "-n", namespace, "deploy", "-o", "wide").splitlines()
    assert deploy[0].split() == [
        "NAME",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "AGE",
        "CONTAINERS",
        "IMAGES",
        "SELECTOR",
    ]
    assert deploy[1].split()[5:] == ["api", "busybox:1.36", "app=api"]
    svc = kubectl("get", "-n", namespace, "svc").splitlines()
    assert svc[0].split() == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    assert svc[1].split()[1] == "ClusterIP" and svc[1].split()[4] == "80/TCP"
    assert kubectl("get", "-n", namespace, "cm", "web-config").splitlines()[0].split() == [
        "NAME",
        "DATA",
        "AGE",
    ]
    assert kubectl("get", "ns", namespace).splitlines()[1].split()[:2] == [namespace, "Active"]
    pod = yaml.safe_load(kubectl("get", "-n", namespace, "pod", "web", "-o", "yaml"))
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert pod["spec"]["restartPolicy"] == "Always" and pod["status"]["phase"] == "Pending"
    assert pod["metadata"]["uid"] and pod["metadata"]["creationTimestamp"]


def test_get_watch_sees_changes(kubectl, namespace: str) -> None:
    kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: watched}\ndata: {a: '1'}\n",
    )
    proc = kubectl.popen(
        "get",
        "-n",
        namespace,
        "cm",
        "watched",
        "-w",
        "--request-timeout=40s",
        "-o",
        'jsonpath={.data.a}{"\\n"}',
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while "1" not in lines and time.monotonic() < deadline:
            time.sleep(0.05)
        kubectl("patch", "-n", namespace, "cm", "watched", "--type=merge", "-p", '{"data":{"a":"2"}}')
        while "2" not in lines and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    assert lines[:2] == ["1", "2"], lines


def test_patch_label_annotate_all_types(kubectl, namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=MANIFEST)
    kubectl(
        "patch",
        "-n",
        namespace,
        "pod",
        "web",
        "-p",
        '{"spec":{"containers":[{"name":"web","image":"busybox:1.37"}]}}',
    )
    kubectl(
        "patch",
        "-n",
        namespace,
        "pod",
        "web",
        "--type=merge",
        "-p",
        '{"metadata":{"labels":{"tier":"front"}}}',
    )
    kubectl(
        "patch",
        "-n",
        namespace,
        "pod",
        "web",
        "--type=json",
        "-p",
        '[{"op":"add","path":"/metadata/annotations/note","value":"x"}]',
    )
    kubectl(
        "apply",
        "--server-side",
        "--field-manager=tester",
        "-n",
        namespace,
        "-f",
        "-",
        input=("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  k: v\n"),
    )
    kubectl("label", "-n", namespace, "pod", "web", "env=prod")
    kubectl("annotate", "-n", namespace, "pod", "web", "owner=me")
    pod = json.loads(kubectl("get", "-n", namespace, "pod", "web", "-o", "json"))
    container = pod["spec"]["containers"][0]
    assert container["image"] == "busybox:1.37"
    assert container["env"] == [{"name": "A", "value": "1"}], "strategic merge kept the other fields"
    assert pod["metadata"]["labels"] == {"app": "web", "tier": "front", "env": "prod"}
    assert pod["metadata"]["annotations"]["note"] == "x" and pod["metadata"]["annotations"]["owner"] == "me"
    cm = json.loads(kubectl("get", "-n", namespace, "cm", "ssa", "-o", "json", "--show-managed-fields"))
    assert cm["data"] == {"k": "v"}
    assert cm["metadata"]["managedFields"][0]["manager"] == "tester"
    # The pod spec is immutable apart from the fields upstream allows.
    bad = kubectl.run(
        "patch",
        "-n",
        namespace,
        "pod",
        "web",
        "--type=merge",
        "-p",
        '{"spec":{"restartPolicy":"Never"}}',
        check=False,
    )
    assert bad.returncode != 0 and "pod updates may not change fields" in bad.stderr


def test_validation_error_names_the_field(kubectl, namespace: str) -> None:
    bad = kubectl.run(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        check=False,
        input=("apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  containers: [{name: c}]\n"),
    )
    assert bad.returncode != 0
    assert 'The Pod "bad" is invalid: spec.containers[0].image: Required value' in bad.stderr


def test_scale_deployment(kubectl, namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=MANIFEST)
    assert "deployment.apps/api scaled" in kubectl(
        "scale", "-n", namespace, "deployment", "api", "--replicas=5"
    )
    deploy = json.loads(kubectl("get", "-n", namespace, "deploy", "api", "-o", "json"))
    assert deploy["spec"]["replicas"] == 5 and deploy["metadata"]["generation"] == 2


def test_describe_pod_shows_events(kubectl, v1: client.CoreV1Api, namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=MANIFEST)
    pod = v1.read_namespaced_pod("web", namespace)
    v1.create_namespaced_event(
        namespace,
        client.CoreV1Event(
            metadata=client.V1ObjectMeta(name="web.1"),
            involved_object=client.V1ObjectReference(
                kind="Pod", name="web", namespace=namespace, uid=pod.metadata.uid, api_version="v1"
            ),
            reason="Scheduled",
            message="Successfully assigned to node1",
            type="Normal",
            count=1,
            first_timestamp=pod.metadata.creation_timestamp,
            last_timestamp=pod.metadata.creation_timestamp,
            source=client.V1EventSource(component="default-scheduler"),
        ),
    )
    out = kubectl("describe", "-n", namespace, "pod", "web")
    assert "Events:" in out
    events_part = out.split("Events:", 1)[1]
    assert (
        "Scheduled" in events_part
        and "Successfully assigned to node1" in events_part
        and "default-scheduler" in events_part
    )
    events = kubectl("get", "-n", namespace, "events")
    assert events.splitlines()[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert "pod/web" in events


def test_delete_pod_waits_for_graceful_deletion(
    kubectl, v1: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=MANIFEST)
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name="web"), target=client.V1ObjectReference(kind="Node", name="node-1")
    )
    v1.create_namespaced_binding(namespace, body, _preload_content=False)
    proc = kubectl.popen("delete", "-n", namespace, "pod", "web", "--timeout=60s")
    deadline = time.monotonic() + 30
    pod = v1.read_namespaced_pod("web", namespace)
    while pod.metadata.deletion_timestamp is None and time.monotonic() < deadline:
        time.sleep(0.05)
        pod = v1.read_namespaced_pod("web", namespace)
    assert pod.metadata.deletion_grace_period_seconds == 30
    time.sleep(0.5)
    assert proc.poll() is None, "kubectl delete must wait while the kubelet has not finished"
    # The kubelet finishes: grace 0 with a UID precondition.
    v1.delete_namespaced_pod(
        "web",
        namespace,
        body=client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=pod.metadata.uid)
        ),
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert 'pod "web" deleted' in out
    # Unbound pods and other kinds go at once.
    kubectl("delete", "-n", namespace, "deploy", "api", "--timeout=10s")
    assert kubectl.run("get", "-n", namespace, "deploy", "api", check=False).returncode != 0


def test_imperative_create_sends_protobuf(kubectl, namespace: str) -> None:
    """kubectl's generators post protobuf bodies; the server decodes those kinds."""
    kubectl("create", "configmap", "-n", namespace, "c1", "--from-literal=a=1", "--from-literal=b=two")
    kubectl("create", "secret", "generic", "-n", namespace, "s1", "--from-literal=pw=hunter2")
    kubectl("create", "serviceaccount", "-n", namespace, "sa1")
    kubectl(
        "create",
        "deployment",
        "-n",
        namespace,
        "d1",
        "--image=busybox:1.36",
        "--replicas=3",
        "--port=80",
        "--",
        "sleep",
        "10",
    )
    kubectl("create", "namespace", f"{namespace}-extra")
    assert json.loads(kubectl("get", "cm", "-n", namespace, "c1", "-o", "json"))["data"] == {
        "a": "1",
        "b": "two",
    }
    secret = json.loads(kubectl("get", "secret", "-n", namespace, "s1", "-o", "json"))
    assert secret["type"] == "Opaque" and secret["data"] == {"pw": "aHVudGVyMg=="}
    deploy = json.loads(kubectl("get", "deploy", "-n", namespace, "d1", "-o", "json"))
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert deploy["spec"]["replicas"] == 3 and deploy["spec"]["selector"] == {"matchLabels": {"app": "d1"}}
    assert container["command"] == ["sleep", "10"] and container["image"] == "busybox:1.36"
    assert container["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert kubectl("get", "ns", f"{namespace}-extra", "-o", "name").strip() == f"namespace/{namespace}-extra"
    kubectl("get", "sa", "-n", namespace, "sa1")


def test_server_side_apply_conflicts_and_force(kubectl, namespace: str) -> None:
    manifest = MANIFEST.split("---")[2]
    assert "serverside-applied" in kubectl(
        "apply", "--server-side", "-n", namespace, "-f", "-", input=manifest
    )
    kubectl("scale", "-n", namespace, "deploy", "api", "--replicas=5")
    conflict = kubectl.run("apply", "--server-side", "-n", namespace, "-f", "-", input=manifest, check=False)
    assert conflict.returncode != 0
    assert (
        'Apply failed with 1 conflict: conflict with "kubectl" using apps/v1: .spec.replicas'
        in conflict.stderr
    )
    kubectl("apply", "--server-side", "--force-conflicts", "-n", namespace, "-f", "-", input=manifest)
    deploy = json.loads(
        kubectl("get", "-n", namespace, "deploy", "api", "-o", "json", "--show-managed-fields")
    )
    assert deploy["spec"]["replicas"] == 2
    owners = {(m["manager"], m["operation"]): m["fieldsV1"] for m in deploy["metadata"]["managedFields"]}
    assert "f:replicas" in owners[("kubectl", "Apply")]["f:spec"]
    assert "f:replicas" not in owners.get(("kubectl", "Update"), {}).get("f:spec", {})
    # A label the manager stops applying is removed, as nobody else owns it.
    labelled = manifest.replace(
        "metadata:\n  name: api\n", "metadata:\n  name: api\n  labels: {team: a, tier: b}\n"
    )
    kubectl("apply", "--server-side", "-n", namespace, "-f", "-", input=labelled)
    kubectl("apply", "--server-side", "-n", namespace, "-f", "-", input=labelled.replace(", tier: b", ""))
    deploy = json.loads(kubectl("get", "-n", namespace, "deploy", "api", "-o", "json"))
    assert deploy["metadata"]["labels"] == {"team": "a"}


def test_create_and_expose_services(kubectl, namespace: str) -> None:
    kubectl("create", "service", "clusterip", "-n", namespace, "s1", "--tcp=80:8080", "--tcp=443:https")
    spec = json.loads(kubectl("get", "svc", "-n", namespace, "s1", "-o", "json"))["spec"]
    assert spec["ports"] == [
        {"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080},
        {"name": "443-https", "port": 443, "protocol": "TCP", "targetPort": "https"},
    ]
    assert spec["clusterIP"].startswith("10.96.") and spec["selector"] == {"app": "s1"}
    kubectl("create", "deployment", "-n", namespace, "web", "--image=busybox", "--port=8080")
    kubectl(
        "expose",
        "deployment",
        "-n",
        namespace,
        "web",
        "--port=80",
        "--target-port=8080",
        "--type=NodePort",
        "--name=web-np",
    )
    row = kubectl("get", "svc", "-n", namespace, "web-np", "--no-headers").split()
    assert row[1] == "NodePort" and row[4].startswith("80:3") and row[4].endswith("/TCP")


APPLY_V1 = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {a: "1", b: "2"}}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: busybox:1.36
        env: [{name: A, value: "1"}, {name: B, value: "2"}]
        ports: [{containerPort: 80}, {containerPort: 81}]
      - name: side
        image: busybox:1.36
"""

APPLY_V2 = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {a: "1"}}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: side
        image: busybox:1.37
      - name: web
        image: busybox:1.36
        env: [{name: B, value: "3"}]
        ports: [{containerPort: 81}]
"""


def test_client_side_apply_removes_and_reorders_list_items(kubectl, namespace: str) -> None:
    """kubectl's three-way patch ($patch: delete, $setElementOrder, null labels) applied by the server."""
    kubectl("apply", "-n", namespace, "-f", "-", input=APPLY_V1)
    kubectl("apply", "-n", namespace, "-f", "-", input=APPLY_V2)
    deploy = json.loads(kubectl("get", "-n", namespace, "deploy", "web", "-o", "json"))
    containers = deploy["spec"]["template"]["spec"]["containers"]
    assert deploy["metadata"]["labels"] == {"a": "1"}
    assert [(c["name"], c["image"]) for c in containers] == [
        ("side", "busybox:1.37"),
        ("web", "busybox:1.36"),
    ]
    assert containers[1]["env"] == [{"name": "B", "value": "3"}]
    assert [p["containerPort"] for p in containers[1]["ports"]] == [81]
