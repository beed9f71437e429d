"""The kinds added as one module each (PodTemplate, ControllerRevision, PriorityClass, RuntimeClass),
through the official client and kubectl, against a server of their own (a globalDefault PriorityClass
would change every other test's pods)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.conftest import KUBECTL, Kubectl

pytestmark = pytest.mark.integration

MiB = 2**20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("kinds")) as s:
        yield s


@pytest.fixture(scope="module")
def api(server: ApiServer) -> Iterator[client.ApiClient]:
    with server.api_client() as a:
        yield a


@pytest.fixture(scope="module")
def kubectl(server: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    return Kubectl(server.kubeconfig, tmp_path_factory.mktemp("home"))


def _status(err: pytest.ExceptionInfo[ApiException]) -> dict:
    return json.loads(err.value.body)


def _pod(name: str, **spec: object) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")], **spec),
    )


# --- PodTemplate -----------------------------------------------------------------------------------


def test_pod_templates_are_defaulted_validated_and_printed(api: client.ApiClient, kubectl: Kubectl) -> None:
    v1 = client.CoreV1Api(api)
    template = client.V1PodTemplate(
        metadata=client.V1ObjectMeta(name="web"),
        template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"app": "web", "tier": "a"}),
            spec=client.V1PodSpec(
                containers=[
                    client.V1Container(name="c", image="busybox:1.36"),
                    client.V1Container(name="d", image="nginx"),
                ]
            ),
        ),
    )
    created = v1.create_namespaced_pod_template("default", template)
    spec = created.template.spec
    assert spec.restart_policy == "Always" and spec.dns_policy == "ClusterFirst"
    assert [c.image_pull_policy for c in spec.containers] == ["IfNotPresent", "Always"]
    assert [t.metadata.name for t in v1.list_namespaced_pod_template("default").items] == ["web"]
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod_template(
            "default",
            client.V1PodTemplate(
                metadata=client.V1ObjectMeta(name="bad"),
                template=client.V1PodTemplateSpec(
                    spec=client.V1PodSpec(containers=[client.V1Container(name="c")])
                ),
            ),
        )
    assert err.value.status == 422
    assert (
        _status(err)["message"]
        == 'PodTemplate "bad" is invalid: template.spec.containers[0].image: Required value'
    )
    table = kubectl("get", "podtemplates", "-n", "default").splitlines()
    assert table[0].split() == ["NAME", "CONTAINERS", "IMAGES", "POD", "LABELS"]
    assert table[1].split() == ["web", "c,d", "busybox:1.36,nginx", "app=web,tier=a"]
    v1.delete_namespaced_pod_template("web", "default")


# --- ControllerRevision ----------------------------------------------------------------------------


def test_controller_revisions_keep_their_data(api: client.ApiClient, kubectl: Kubectl) -> None:
    apps = client.AppsV1Api(api)
    owner = client.V1OwnerReference(
        api_version="apps/v1", kind="StatefulSet", name="db", uid="u-1", controller=True
    )
    revision = client.V1ControllerRevision(
        metadata=client.V1ObjectMeta(name="db-1", owner_references=[owner]),
        revision=3,
        data={"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}},
    )
    created = apps.create_namespaced_controller_revision("default", revision)
    assert (
        created.revision == 3
        and created.data["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox"
    )
    created.data = {"changed": True}
    with pytest.raises(ApiException) as err:
        apps.replace_namespaced_controller_revision("db-1", "default", created)
    assert err.value.status == 422 and _status(err)["details"]["causes"][0]["field"] == "data"
    assert "field is immutable" in _status(err)["message"]
    # (the Python client refuses a revision without data before sending it; kubectl leaves it to the server)
    empty = kubectl.run(
        "create",
        "-n",
        "default",
        "-f",
        "-",
        check=False,
        input="apiVersion: apps/v1\nkind: ControllerRevision\nmetadata: {name: empty}\nrevision: 1\n",
    )
    assert empty.returncode != 0
    assert (
        'The ControllerRevision "empty" is invalid: data: Required value: data is mandatory' in empty.stderr
    )
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_controller_revision(
            "default",
            client.V1ControllerRevision(metadata=client.V1ObjectMeta(name="neg"), revision=-1, data={}),
        )
    assert (
        _status(err)["message"]
        == 'ControllerRevision.apps "neg" is invalid: revision: Invalid value: -1: must be greater than or equal to 0'
    )
    table = kubectl("get", "controllerrevisions", "-n", "default").splitlines()
    assert table[0].split() == ["NAME", "CONTROLLER", "REVISION", "AGE"]
    assert table[1].split()[:3] == ["db-1", "statefulset.apps/db", "3"]


# --- PriorityClass ---------------------------------------------------------------------------------


def test_system_priority_classes_exist_and_stay(api: client.ApiClient, kubectl: Kubectl) -> None:
    scheduling = client.SchedulingV1Api(api)
    classes = {c.metadata.name: c for c in scheduling.list_priority_class().items}
    assert classes["system-node-critical"].value == 2000001000
    assert classes["system-cluster-critical"].value == 2000000000
    assert classes["system-node-critical"].preemption_policy == "PreemptLowerPriority"
    with pytest.raises(ApiException) as err:
        scheduling.delete_priority_class("system-node-critical")
    assert err.value.status == 403 and _status(err)["message"] == (
        'priorityclasses.scheduling.k8s.io "system-node-critical" is forbidden: this is a system priority class and cannot be deleted'
    )
    rows = kubectl("get", "priorityclass").splitlines()
    assert rows[0].split() == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    row = next(r.split() for r in rows if r.startswith("system-node-critical"))
    assert row[:3] == ["system-node-critical", "2000001000", "false"] and row[-1] == "PreemptLowerPriority"
    assert kubectl("get", "pc", "system-cluster-critical", "-o", "jsonpath={.value}") == "2000000000"


def test_priority_class_validation(api: client.ApiClient) -> None:
    scheduling = client.SchedulingV1Api(api)
    cases = [
        (
            client.V1PriorityClass(metadata=client.V1ObjectMeta(name="huge"), value=1_000_000_001),
            'PriorityClass.scheduling.k8s.io "huge" is invalid: value: Forbidden: maximum allowed value of a user defined priority is 1000000000',
        ),
        (
            client.V1PriorityClass(metadata=client.V1ObjectMeta(name="system-mine"), value=5),
            'PriorityClass.scheduling.k8s.io "system-mine" is invalid: metadata.name: Forbidden: priority class names with '
            "'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class",
        ),
        (
            client.V1PriorityClass(
                metadata=client.V1ObjectMeta(name="odd"), value=5, preemption_policy="Sometimes"
            ),
            'PriorityClass.scheduling.k8s.io "odd" is invalid: preemptionPolicy: Unsupported value: "Sometimes": '
            'supported values: "PreemptLowerPriority", "Never"',
        ),
    ]
    for body, message in cases:
        with pytest.raises(ApiException) as err:
            scheduling.create_priority_class(body)
        assert err.value.status == 422 and _status(err)["message"] == message
    scheduling.create_priority_class(
        client.V1PriorityClass(metadata=client.V1ObjectMeta(name="fixed"), value=10)
    )
    with pytest.raises(ApiException) as err:
        scheduling.patch_priority_class("fixed", {"value": 11})
    assert (
        _status(err)["message"]
        == 'PriorityClass.scheduling.k8s.io "fixed" is invalid: value: Forbidden: may not be changed in an update.'
    )
    scheduling.delete_priority_class("fixed")


def test_priority_admission(api: client.ApiClient) -> None:
    v1, scheduling = client.CoreV1Api(api), client.SchedulingV1Api(api)
    scheduling.create_priority_class(
        client.V1PriorityClass(
            metadata=client.V1ObjectMeta(name="high"), value=1000, preemption_policy="Never"
        )
    )
    try:
        pod = v1.create_namespaced_pod("default", _pod("classed", priority_class_name="high"))
        assert (pod.spec.priority, pod.spec.preemption_policy) == (1000, "Never")
        plain = v1.create_namespaced_pod("default", _pod("plain"))
        assert (plain.spec.priority, plain.spec.preemption_policy, plain.spec.priority_class_name) == (
            0,
            "PreemptLowerPriority",
            None,
        )
        critical = v1.create_namespaced_pod(
            "default", _pod("critical", priority_class_name="system-node-critical")
        )
        assert critical.spec.priority == 2000001000
        with pytest.raises(ApiException) as err:
            v1.create_namespaced_pod("default", _pod("unknown", priority_class_name="nope"))
        assert err.value.status == 403
        assert (
            _status(err)["message"]
            == 'pods "unknown" is forbidden: no PriorityClass with name nope was found'
        )
        with pytest.raises(ApiException) as err:
            v1.create_namespaced_pod("default", _pod("chooser", priority_class_name="high", priority=7))
        assert err.value.status == 403 and _status(err)["message"] == (
            'pods "chooser" is forbidden: the integer value of priority (7) must not be provided in pod spec; '
            "priority admission controller computed 1000 from the given PriorityClass name"
        )
        # A replace that leaves the priority out keeps it (the plugin set it on create).
        pod.spec.priority = None
        pod.metadata.labels = {"replaced": "yes"}
        assert v1.replace_namespaced_pod("classed", "default", pod).spec.priority == 1000
        # The globalDefault class applies to pods that name none; only one may be the default.
        scheduling.create_priority_class(
            client.V1PriorityClass(
                metadata=client.V1ObjectMeta(name="everyone"), value=50, global_default=True
            )
        )
        try:
            defaulted = v1.create_namespaced_pod("default", _pod("defaulted"))
            assert (defaulted.spec.priority_class_name, defaulted.spec.priority) == ("everyone", 50)
            with pytest.raises(ApiException) as err:
                scheduling.create_priority_class(
                    client.V1PriorityClass(
                        metadata=client.V1ObjectMeta(name="second"), value=60, global_default=True
                    )
                )
            assert err.value.status == 403 and _status(err)["message"] == (
                'priorityclasses.scheduling.k8s.io "second" is forbidden: PriorityClass everyone is already marked '
                "as default. Only one default can exist"
            )
        finally:
            scheduling.delete_priority_class("everyone")
    finally:
        scheduling.delete_priority_class("high")
        v1.delete_collection_namespaced_pod("default")


# --- RuntimeClass ----------------------------------------------------------------------------------


def test_runtime_classes(api: client.ApiClient, kubectl: Kubectl) -> None:
    node = client.NodeV1Api(api)
    created = node.create_runtime_class(
        client.V1RuntimeClass(
            metadata=client.V1ObjectMeta(name="gvisor"),
            handler="runsc",
            overhead=client.V1Overhead(pod_fixed={"cpu": "0.25", "memory": "1.5Gi"}),
        )
    )
    assert created.handler == "runsc" and created.overhead.pod_fixed == {"cpu": "250m", "memory": "1536Mi"}
    for handler, message in [
        (
            "",
            'RuntimeClass.node.k8s.io "bad" is invalid: handler: Invalid value: "": a lowercase RFC 1123 label',
        ),
        (
            "Run_SC",
            'RuntimeClass.node.k8s.io "bad" is invalid: handler: Invalid value: "Run_SC": a lowercase RFC 1123 label',
        ),
    ]:
        with pytest.raises(ApiException) as err:
            node.create_runtime_class(
                client.V1RuntimeClass(metadata=client.V1ObjectMeta(name="bad"), handler=handler)
            )
        assert err.value.status == 422 and _status(err)["message"].startswith(message)
    with pytest.raises(ApiException) as err:
        node.create_runtime_class(
            client.V1RuntimeClass(
                metadata=client.V1ObjectMeta(name="neg"),
                handler="h",
                overhead=client.V1Overhead(pod_fixed={"cpu": "-1"}),
            )
        )
    assert (
        _status(err)["message"]
        == 'RuntimeClass.node.k8s.io "neg" is invalid: overhead.limits[cpu]: Invalid value: "-1": must be greater than or equal to 0'
    )
    with pytest.raises(ApiException) as err:
        node.patch_runtime_class("gvisor", {"handler": "kata"})
    assert (
        _status(err)["message"]
        == 'RuntimeClass.node.k8s.io "gvisor" is invalid: handler: Invalid value: "kata": field is immutable'
    )
    rows = kubectl("get", "runtimeclass").splitlines()
    assert rows[0].split() == ["NAME", "HANDLER", "AGE"] and rows[1].split()[:2] == ["gvisor", "runsc"]


def test_runtime_class_admission(api: client.ApiClient) -> None:
    """Upstream's RuntimeClass plugin: a missing class refuses the pod, the class's overhead and
    scheduling land on it, and a conflicting or unasked-for overhead is refused."""
    node, v1 = client.NodeV1Api(api), client.CoreV1Api(api)
    node.create_runtime_class(
        {
            "metadata": {"name": "sandboxed"},
            "handler": "runc",
            "overhead": {"podFixed": {"cpu": "100m", "memory": "64Mi"}},
            "scheduling": {
                "nodeSelector": {"sandbox": "yes"},
                "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
            },
        }
    )
    try:
        with pytest.raises(ApiException) as err:
            v1.create_namespaced_pod("default", _pod("nocls", runtime_class_name="missing"))
        assert err.value.status == 403
        assert (
            _status(err)["message"]
            == 'pods "nocls" is forbidden: pod rejected: RuntimeClass "missing" not found'
        )

        pod = v1.create_namespaced_pod("default", _pod("cls", runtime_class_name="sandboxed"))
        assert pod.spec.overhead == {"cpu": "100m", "memory": "64Mi"}
        assert pod.spec.node_selector == {"sandbox": "yes"}
        assert [(t.key, t.operator, t.effect) for t in pod.spec.tolerations or []][-1] == (
            "sandbox",
            "Exists",
            "NoSchedule",
        )

        with pytest.raises(ApiException) as err:
            v1.create_namespaced_pod(
                "default", _pod("clash", runtime_class_name="sandboxed", node_selector={"sandbox": "no"})
            )
        assert _status(err)["message"] == (
            'pods "clash" is forbidden: conflict: runtimeClass.scheduling.nodeSelector[sandbox] = yes; '
            "pod.spec.nodeSelector[sandbox] = no"
        )
        with pytest.raises(ApiException) as err:
            v1.create_namespaced_pod(
                "default", _pod("odd", runtime_class_name="sandboxed", overhead={"cpu": "1"})
            )
        assert _status(err)["message"] == (
            "pods \"odd\" is forbidden: pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
        )
        with pytest.raises(ApiException) as err:
            v1.create_namespaced_pod("default", _pod("bare", overhead={"cpu": "1"}))
        assert _status(err)["message"] == (
            'pods "bare" is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead'
        )
    finally:
        node.delete_runtime_class("sandboxed")
        v1.delete_collection_namespaced_pod("default")


# --- through kubectl: discovery, OpenAPI, apply --------------------------------------------------

MANIFEST = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: batch}
value: 100
description: for batch jobs
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: crun}
handler: crun
---
apiVersion: v1
kind: PodTemplate
metadata: {name: tpl, namespace: default}
template:
  metadata: {labels: {app: tpl}}
  spec:
    containers: [{name: c, image: busybox:1.36, resources: {limits: {cpu: "0.5", memory: 1.5Gi}}}]
---
apiVersion: apps/v1
kind: ControllerRevision
metadata: {name: tpl-1, namespace: default}
revision: 1
data: {any: [thing, 1]}
"""


def test_kubectl_discovers_explains_and_applies_the_new_kinds(kubectl: Kubectl) -> None:
    rows = {tuple(line.split()) for line in kubectl("api-resources", "--no-headers").splitlines()}
    for expected in [
        ("podtemplates", "v1", "true", "PodTemplate"),
        ("controllerrevisions", "apps/v1", "true", "ControllerRevision"),
        ("priorityclasses", "pc", "scheduling.k8s.io/v1", "false", "PriorityClass"),
        ("runtimeclasses", "node.k8s.io/v1", "false", "RuntimeClass"),
    ]:
        assert expected in rows
    assert "globalDefault specifies whether this PriorityClass" in kubectl(
        "explain", "priorityclass.globalDefault"
    )
    assert "handler specifies the underlying runtime" in kubectl("explain", "runtimeclass.handler")
    out = kubectl("apply", "-f", "-", input=MANIFEST)
    for name in (
        "priorityclass.scheduling.k8s.io/batch",
        "runtimeclass.node.k8s.io/crun",
        "podtemplate/tpl",
        "controllerrevision.apps/tpl-1",
    ):
        assert f"{name} created" in out
    template = yaml.safe_load(kubectl("get", "podtemplate", "tpl", "-n", "default", "-o", "yaml"))
    again = kubectl("apply", "-f", "-", input=MANIFEST)
    # kubectl's patch says cpu "0.5" where the server stores "500m" (so kubectl prints "configured", as
    # against a genuine cluster); the server finds nothing to change and writes nothing.
    assert again.count("unchanged") == 3 and "podtemplate/tpl configured" in again
    rv = template["metadata"]["resourceVersion"]
    assert (
        kubectl("get", "podtemplate", "tpl", "-n", "default", "-o", "jsonpath={.metadata.resourceVersion}")
        == rv
    )
    # Stored in canonical form, as a genuine cluster shows them.
    assert template["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "500m",
        "memory": "1536Mi",
    }
    assert template["template"]["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "500m",
        "memory": "1536Mi",
    }
    bad = kubectl.run(
        "apply",
        "-f",
        "-",
        check=False,
        input=MANIFEST.split("---")[0].replace("value: 100", "value: 100\nbogus: 1"),
    )
    assert bad.returncode != 0 and 'unknown field "bogus"' in bad.stderr
    for kind, name in (
        ("pc", "batch"),
        ("runtimeclass", "crun"),
        ("podtemplate", "tpl"),
        ("controllerrevision", "tpl-1"),
    ):
        kubectl("delete", kind, name, "-n", "default")


def test_kubectl_create_priorityclass_sends_protobuf(kubectl: Kubectl) -> None:
    """kubectl's generator posts the PriorityClass as protobuf; every field arrives."""
    kubectl(
        "create",
        "priorityclass",
        "imperative",
        "--value=1000",
        "--description=made by kubectl",
        "--preemption-policy=Never",
    )
    made = json.loads(kubectl("get", "priorityclass", "imperative", "-o", "json"))
    assert (
        made["value"],
        made["description"],
        made["preemptionPolicy"],
        made.get("globalDefault", False),
    ) == (1000, "made by kubectl", "Never", False)
    kubectl("delete", "priorityclass", "imperative")
