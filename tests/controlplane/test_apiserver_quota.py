"""ResourceQuota served and enforced as upstream: ValidateResourceQuota's 422s, the status subresource,
`kubectl get|describe quota`, and the ResourceQuota admission plugin's charges and refusals (pods, cpu
and memory, scopes, object counts, services, claims, dry runs, concurrent creates). The test plays the
resource-quota controller (it writes the first status, as the controller would for an empty namespace);
tests/controllers/test_resourcequota_integration.py runs the real one."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.concurrentcreates import create_at_once
from tests.controlplane.conftest import Kubectl, message

Obj = dict[str, Any]


def make_quota(v1: client.CoreV1Api, ns: str, hard: dict[str, str], name: str = "q", **spec: Any) -> Obj:
    """A quota, and the status the controller writes for it in a namespace holding nothing it counts."""
    body = {"metadata": {"name": name}, "spec": {"hard": hard, **spec}}
    created = v1.create_namespaced_resource_quota(ns, body)
    assert created.status is None or not created.status.used
    zero = {k: "0" for k in hard}
    status = {"metadata": {"name": name, "resourceVersion": created.metadata.resource_version},
              "status": {"hard": hard, "used": zero}}  # fmt: skip
    v1.replace_namespaced_resource_quota_status(name, ns, status)
    return status


def used(v1: client.CoreV1Api, ns: str, name: str = "q") -> dict[str, str]:
    return dict(v1.read_namespaced_resource_quota(name, ns).status.used or {})


def pod(name: str, resources: dict[str, Any] | None = None, **spec: Any) -> Obj:
    container: Obj = {"name": "c", "image": "busybox"}
    if resources is not None:
        container["resources"] = resources
    return {"metadata": {"name": name}, "spec": {"containers": [container], **spec}}


# --- the kind ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"hard": {"foo": "1"}},
            'spec.hard[foo]: Invalid value: "foo": must be a standard resource type or fully qualified',
        ),
        (
            {"hard": {"storage": "1"}},
            'spec.hard[storage]: Invalid value: "storage": must be a standard resource for quota',
        ),
        (
            {"hard": {"pods": "-1"}},
            'spec.hard[pods]: Invalid value: "-1": must be greater than or equal to 0',
        ),
        ({"hard": {"pods": "1500m"}}, 'spec.hard[pods]: Invalid value: "1500m": must be an integer'),
        (
            {"hard": {"pods": "1"}, "scopes": ["Terminating", "NotTerminating"]},
            'spec.scopes: Invalid value: ["Terminating","NotTerminating"]: conflicting scopes',
        ),
        (
            {"hard": {"cpu": "1"}, "scopes": ["BestEffort"]},
            'spec.scopes: Invalid value: ["BestEffort"]: unsupported scope applied to resource',
        ),
        (
            {"hard": {"pods": "1"}, "scopes": ["Sometimes"]},
            'spec.scopes: Invalid value: ["Sometimes"]: unsupported scope',
        ),
        (
            {
                "hard": {"pods": "1"},
                "scopeSelector": {
                    "matchExpressions": [{"scopeName": "Terminating", "operator": "In", "values": ["x"]}]
                },
            },
            "spec.scopeSelector.matchExpressions.operator: Invalid value: \"In\": must be 'Exist' only operator",
        ),
        (
            {
                "hard": {"pods": "1"},
                "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In"}]},
            },
            "spec.scopeSelector.matchExpressions.values: Required value: must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
        ),
    ],
)
def test_validation(v1: client.CoreV1Api, namespace: str, spec: Obj, expected: str) -> None:
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_resource_quota(namespace, {"metadata": {"name": "bad"}, "spec": spec})
    text = message(err, 422)
    assert text.startswith('ResourceQuota "bad" is invalid: '), text
    assert expected in text


def test_status_is_the_controllers_and_scopes_are_immutable(v1: client.CoreV1Api, namespace: str) -> None:
    body = {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "2"}, "scopes": ["NotTerminating"]},
            "status": {"hard": {"pods": "9"}, "used": {"pods": "0"}}}  # fmt: skip
    status = v1.create_namespaced_resource_quota(namespace, body).status
    assert status is not None and (status.hard, status.used) == (None, None)  # reset: `"status":{}`
    # A spec update keeps the status; a status update keeps the spec.
    make = v1.read_namespaced_resource_quota("q", namespace)
    make.status = client.V1ResourceQuotaStatus(hard={"pods": "2"}, used={"pods": "0"})
    v1.replace_namespaced_resource_quota_status("q", namespace, make)
    patched = v1.patch_namespaced_resource_quota(
        "q", namespace, {"spec": {"hard": {"pods": "3"}}, "status": {"used": {"pods": "7"}}}
    )
    assert patched.spec.hard == {"pods": "3"} and patched.status.used == {"pods": "0"}
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_resource_quota("q", namespace, {"spec": {"scopes": ["Terminating"]}})
    assert 'spec.scopes: Invalid value: ["Terminating"]: field is immutable' in message(err, 422)


# --- pods -------------------------------------------------------------------------------------------


def test_third_pod_refused_with_upstreams_message(
    v1: client.CoreV1Api, namespace: str, kubectl: Kubectl
) -> None:
    make_quota(v1, namespace, {"pods": "2"})
    v1.create_namespaced_pod(namespace, pod("p1"))
    v1.create_namespaced_pod(namespace, pod("p2"))
    assert used(v1, namespace) == {"pods": "2"}
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("p3"))
    assert (
        message(err, 403)
        == 'pods "p3" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2'
    )
    assert json.loads(err.value.body)["reason"] == "Forbidden"
    proc = kubectl.run(
        "-n",
        namespace,
        "create",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "Pod", **pod("p4")}),
        check=False,
    )
    assert proc.returncode == 1
    assert (
        'pods "p4" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2'
        in proc.stderr
    )
    assert used(v1, namespace) == {"pods": "2"}  # refusals cost nothing


def test_status_unknown_refuses(v1: client.CoreV1Api, namespace: str) -> None:
    created = v1.create_namespaced_resource_quota(
        namespace, {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "5"}}}
    )
    # No status yet: the quota limits nothing (upstream matches on status.hard).
    v1.create_namespaced_pod(namespace, pod("free"))
    v1.replace_namespaced_resource_quota_status(
        "q",
        namespace,
        {
            "metadata": {"name": "q", "resourceVersion": created.metadata.resource_version},
            "status": {"hard": {"pods": "5"}},
        },
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("p"))
    assert message(err, 403) == 'pods "p" is forbidden: status unknown for quota: q, resources: pods'


def test_compute_quotas_need_declared_resources(v1: client.CoreV1Api, namespace: str) -> None:
    make_quota(v1, namespace, {"requests.cpu": "1", "limits.memory": "1Gi", "requests.memory": "1Gi"})
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("bare"))
    assert message(err, 403) == (
        'pods "bare" is forbidden: failed quota: q: must specify limits.memory for: c; requests.cpu for: c; requests.memory for: c'
    )
    sized = {"requests": {"cpu": "600m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    v1.create_namespaced_pod(namespace, pod("a", sized))
    assert used(v1, namespace) == {
        "requests.cpu": "600m",
        "requests.memory": "256Mi",
        "limits.memory": "512Mi",
    }
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("b", sized))
    assert message(err, 403) == (
        'pods "b" is forbidden: exceeded quota: q, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1'
    )
    small = {"requests": {"cpu": "400m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    v1.create_namespaced_pod(namespace, pod("c", small))
    assert used(v1, namespace) == {"requests.cpu": "1", "requests.memory": "512Mi", "limits.memory": "1Gi"}


def test_scopes_choose_the_pods_they_count(v1: client.CoreV1Api, namespace: str) -> None:
    make_quota(v1, namespace, {"pods": "1"}, name="best-effort", scopes=["BestEffort"])
    make_quota(v1, namespace, {"pods": "1"}, name="terminating", scopes=["Terminating"])
    v1.create_namespaced_pod(namespace, pod("be1"))
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("be2"))
    assert "exceeded quota: best-effort, requested: pods=1, used: pods=1, limited: pods=1" in message(
        err, 403
    )
    burstable = {"requests": {"cpu": "100m"}}
    v1.create_namespaced_pod(namespace, pod("b1", burstable))
    v1.create_namespaced_pod(namespace, pod("b2", burstable))  # neither scope counts these
    v1.create_namespaced_pod(namespace, pod("t1", burstable, activeDeadlineSeconds=60))
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("t2", burstable, activeDeadlineSeconds=60))
    assert "exceeded quota: terminating," in message(err, 403)
    assert used(v1, namespace, "best-effort") == {"pods": "1"} and used(v1, namespace, "terminating") == {
        "pods": "1"
    }


def test_priority_class_scope_selector(v1: client.CoreV1Api, api: client.ApiClient, namespace: str) -> None:
    sched = client.SchedulingV1Api(api)
    name = f"pc-{namespace}"
    sched.create_priority_class({"metadata": {"name": name}, "value": 100})
    try:
        selector = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": [name]}]}
        make_quota(v1, namespace, {"pods": "1"}, scopeSelector=selector)
        v1.create_namespaced_pod(namespace, pod("hi1", priorityClassName=name))
        with pytest.raises(ApiException) as err:
            v1.create_namespaced_pod(namespace, pod("hi2", priorityClassName=name))
        assert "exceeded quota: q," in message(err, 403)
        v1.create_namespaced_pod(namespace, pod("plain"))
    finally:
        sched.delete_priority_class(name)


def test_dry_run_is_checked_not_charged(v1: client.CoreV1Api, namespace: str) -> None:
    make_quota(v1, namespace, {"pods": "1"})
    v1.create_namespaced_pod(namespace, pod("d"), dry_run="All")
    assert used(v1, namespace) == {"pods": "0"}
    v1.create_namespaced_pod(namespace, pod("real"))
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("d2"), dry_run="All")
    assert "exceeded quota: q" in message(err, 403)


# --- other resources ---------------------------------------------------------------------------------


def test_object_counts(v1: client.CoreV1Api, api: client.ApiClient, namespace: str) -> None:
    make_quota(v1, namespace, {"configmaps": "1", "count/secrets": "1", "count/deployments.apps": "0"})
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "a"}})
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map(namespace, {"metadata": {"name": "b"}})
    assert (
        message(err, 403)
        == 'configmaps "b" is forbidden: exceeded quota: q, requested: configmaps=1, used: configmaps=1, limited: configmaps=1'
    )
    v1.create_namespaced_secret(namespace, {"metadata": {"name": "s1"}})
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_secret(namespace, {"metadata": {"name": "s2"}})
    assert "requested: count/secrets=1, used: count/secrets=1, limited: count/secrets=1" in message(err, 403)
    deployment = {
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }  # fmt: skip
    with pytest.raises(ApiException) as err:
        client.AppsV1Api(api).create_namespaced_deployment(namespace, deployment)
    assert message(err, 403) == (
        'deployments.apps "web" is forbidden: exceeded quota: q, requested: count/deployments.apps=1, '
        "used: count/deployments.apps=0, limited: count/deployments.apps=0"
    )
    assert used(v1, namespace) == {"configmaps": "1", "count/secrets": "1", "count/deployments.apps": "0"}


def test_services_and_node_ports(v1: client.CoreV1Api, namespace: str) -> None:
    make_quota(v1, namespace, {"services": "3", "services.nodeports": "1", "services.loadbalancers": "0"})

    def svc(name: str, kind: str, ports: int = 1) -> Obj:
        return {
            "metadata": {"name": name},
            "spec": {"type": kind, "ports": [{"port": 80 + i, "name": f"p{i}"} for i in range(ports)]},
        }

    v1.create_namespaced_service(namespace, svc("plain", "ClusterIP"))
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_service(namespace, svc("np2", "NodePort", ports=2))
    assert (
        "requested: services.nodeports=2, used: services.nodeports=0, limited: services.nodeports=1"
        in message(err, 403)
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_service(namespace, svc("lb", "LoadBalancer"))
    assert message(err, 403) == (
        'services "lb" is forbidden: exceeded quota: q, requested: services.loadbalancers=1, '
        "used: services.loadbalancers=0, limited: services.loadbalancers=0"
    )
    v1.create_namespaced_service(namespace, svc("np", "NodePort"))
    # An update that turns a ClusterIP Service into a NodePort one is charged too.
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_service("plain", namespace, {"spec": {"type": "NodePort"}})
    assert message(err, 403).startswith(
        'services "plain" is forbidden: exceeded quota: q, requested: services.nodeports=1'
    )
    assert used(v1, namespace) == {"services": "2", "services.nodeports": "1", "services.loadbalancers": "0"}


def test_claims_and_storage_classes(v1: client.CoreV1Api, namespace: str) -> None:
    gold = "gold.storageclass.storage.k8s.io/requests.storage"
    make_quota(v1, namespace, {"requests.storage": "3Gi", "persistentvolumeclaims": "5", gold: "1Gi"})

    def claim(name: str, size: str, cls: str) -> Obj:
        return {"metadata": {"name": name},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": cls, "resources": {"requests": {"storage": size}}}}  # fmt: skip

    v1.create_namespaced_persistent_volume_claim(namespace, claim("a", "2Gi", "silver"))
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_persistent_volume_claim(namespace, claim("b", "2Gi", "gold"))
    assert message(err, 403) == (
        f'persistentvolumeclaims "b" is forbidden: exceeded quota: q, requested: {gold}=2Gi,requests.storage=2Gi, '
        f"used: {gold}=0,requests.storage=2Gi, limited: {gold}=1Gi,requests.storage=3Gi"
    )
    v1.create_namespaced_persistent_volume_claim(namespace, claim("c", "1Gi", "gold"))
    assert used(v1, namespace) == {"requests.storage": "3Gi", "persistentvolumeclaims": "2", gold: "1Gi"}


# --- concurrency --------------------------------------------------------------------------------------


def test_parallel_creates_never_exceed_nor_drift(
    v1: client.CoreV1Api, apiserver: Any, namespace: str
) -> None:
    make_quota(v1, namespace, {"pods": "5", "requests.cpu": "10"})

    def create(i: int) -> int:
        with apiserver.api_client() as api_client:  # one connection each: truly parallel requests
            try:
                client.CoreV1Api(api_client).create_namespaced_pod(
                    namespace, pod(f"p{i}", {"requests": {"cpu": "100m"}})
                )
                return 201
            except ApiException as err:
                assert err.status == 403, err.body
                assert (
                    "exceeded quota: q, requested: pods=1, used: pods=5, limited: pods=5"
                    in json.loads(err.body)["message"]
                )
                return 403

    with ThreadPoolExecutor(20) as pool:
        codes = list(pool.map(create, range(20)))
    assert codes.count(201) == 5 and codes.count(403) == 15
    pods = v1.list_namespaced_pod(namespace).items
    assert len(pods) == 5
    assert used(v1, namespace) == {"pods": "5", "requests.cpu": "500m"}


def test_fifty_concurrent_creates_against_ten_admit_exactly_ten(
    v1: client.CoreV1Api, apiserver: Any, namespace: str
) -> None:
    """Each charge is a compare-and-swap of the quota's status.used at the revision it was read at: 50
    creates at once, each on its own connection, and exactly 10 get in, the other 40 refused with
    upstream's 403; the quota's used is exactly what was stored."""
    make_quota(v1, namespace, {"pods": "10"})
    codes = create_at_once(
        [apiserver.api_client() for _ in range(50)],
        lambda api, i: client.CoreV1Api(api).create_namespaced_pod(namespace, pod(f"f{i}")),
        "exceeded quota: q, requested: pods=1, used: pods=10, limited: pods=10",
    )
    assert codes.count(201) == 10 and codes.count(403) == 40, codes
    assert len(v1.list_namespaced_pod(namespace).items) == 10
    assert used(v1, namespace) == {"pods": "10"}


# --- kubectl -------------------------------------------------------------------------------------------


def test_kubectl_get_and_describe_quota(v1: client.CoreV1Api, namespace: str, kubectl: Kubectl) -> None:
    out = kubectl("-n", namespace, "create", "quota", "q", "--hard=pods=4,requests.cpu=2,limits.memory=1Gi")
    assert "resourcequota/q created" in out
    status = v1.read_namespaced_resource_quota("q", namespace)
    status.status = client.V1ResourceQuotaStatus(
        hard=status.spec.hard, used={"pods": "1", "requests.cpu": "500m", "limits.memory": "0"}
    )
    v1.replace_namespaced_resource_quota_status("q", namespace, status)
    lines = kubectl("-n", namespace, "get", "quota").splitlines()
    assert lines[0].split() == ["NAME", "AGE", "REQUEST", "LIMIT"]
    assert "pods: 1/4, requests.cpu: 500m/2" in lines[1] and "limits.memory: 0/1Gi" in lines[1]
    described = kubectl("-n", namespace, "describe", "quota", "q")
    rows = [line.split() for line in described.splitlines()]
    assert ["Resource", "Used", "Hard"] in rows
    assert (
        ["pods", "1", "4"] in rows
        and ["requests.cpu", "500m", "2"] in rows
        and ["limits.memory", "0", "1Gi"] in rows
    )


def test_extended_resources_and_ephemeral_storage(v1: client.CoreV1Api, namespace: str) -> None:
    make_quota(v1, namespace, {"requests.example.com/gpu": "1", "requests.ephemeral-storage": "1Gi"})
    gpu = {
        "requests": {"example.com/gpu": "1", "ephemeral-storage": "600Mi"},
        "limits": {"example.com/gpu": "1"},
    }
    v1.create_namespaced_pod(namespace, pod("g1", gpu))
    assert used(v1, namespace) == {"requests.example.com/gpu": "1", "requests.ephemeral-storage": "600Mi"}
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("g2", gpu))
    assert message(err, 403) == (
        'pods "g2" is forbidden: exceeded quota: q, requested: requests.ephemeral-storage=600Mi,requests.example.com/gpu=1, '
        "used: requests.ephemeral-storage=600Mi,requests.example.com/gpu=1, limited: requests.ephemeral-storage=1Gi,requests.example.com/gpu=1"
    )
    # Extended resources are not among those every container must declare.
    v1.create_namespaced_pod(namespace, pod("plain"))


def test_quotas_count_quotas_and_replication_controllers(v1: client.CoreV1Api, namespace: str) -> None:
    status = make_quota(v1, namespace, {"resourcequotas": "1", "replicationcontrollers": "0"})
    status["status"]["used"] = {"resourcequotas": "1", "replicationcontrollers": "0"}  # the quota itself
    status["metadata"]["resourceVersion"] = v1.read_namespaced_resource_quota(
        "q", namespace
    ).metadata.resource_version
    v1.replace_namespaced_resource_quota_status("q", namespace, status)
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_resource_quota(
            namespace, {"metadata": {"name": "q2"}, "spec": {"hard": {"pods": "1"}}}
        )
    assert message(err, 403) == (
        'resourcequotas "q2" is forbidden: exceeded quota: q, requested: resourcequotas=1, used: resourcequotas=1, limited: resourcequotas=1'
    )
    rc = {"metadata": {"name": "rc"},
          "spec": {"selector": {"a": "b"}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}  # fmt: skip
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_replication_controller(namespace, rc)
    assert (
        "requested: replicationcontrollers=1, used: replicationcontrollers=0, limited: replicationcontrollers=0"
        in message(err, 403)
    )
