"""LimitRange served and enforced as upstream: SetDefaults_LimitRangeItem, ValidateLimitRange's 422s,
and the LimitRanger admission plugin (container defaults and their annotation, min/max/ratio per
Container and per Pod, storage bounds per PersistentVolumeClaim) with upstream's 403 texts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.conftest import Kubectl, message

Obj = dict[str, Any]


def limits(v1: client.CoreV1Api, ns: str, *items: Obj, name: str = "lr") -> client.V1LimitRange:
    return v1.create_namespaced_limit_range(ns, {"metadata": {"name": name}, "spec": {"limits": list(items)}})


def pod(name: str, resources: Obj | None = None, init: Obj | None = None) -> Obj:
    container: Obj = {"name": "c", "image": "busybox"}
    if resources is not None:
        container["resources"] = resources
    spec: Obj = {"containers": [container]}
    if init is not None:
        spec["initContainers"] = [{"name": "i", "image": "busybox", "resources": init}]
    return {"metadata": {"name": name}, "spec": spec}


def test_defaults_of_container_items(v1: client.CoreV1Api, namespace: str) -> None:
    lr = limits(v1, namespace, {"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"}})
    item = lr.spec.limits[0]
    assert item.default == {"cpu": "2"}  # the max
    assert item.default_request == {"cpu": "2", "memory": "64Mi"}  # the default limit, else the min


def test_container_defaults_fill_what_a_pod_leaves_out(v1: client.CoreV1Api, namespace: str) -> None:
    limits(
        v1,
        namespace,
        {
            "type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
        },
    )
    created = v1.create_namespaced_pod(namespace, pod("p", {"limits": {"memory": "200Mi"}}, init={}))
    c = created.spec.containers[0].resources
    assert c.limits == {"cpu": "500m", "memory": "200Mi"}
    # requests.memory came from the pod's own limit (API defaulting), cpu from the LimitRange
    assert c.requests == {"cpu": "100m", "memory": "200Mi"}
    assert created.spec.init_containers[0].resources.limits == {"cpu": "500m", "memory": "256Mi"}
    assert created.metadata.annotations["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu request for container c; cpu limit for container c; "
        "cpu, memory request for init container i; cpu, memory limit for init container i"
    )


def test_container_bounds(v1: client.CoreV1Api, namespace: str, kubectl: Kubectl) -> None:
    limits(
        v1,
        namespace,
        {
            "type": "Container",
            "max": {"cpu": "1"},
            "min": {"cpu": "100m"},
            "maxLimitRequestRatio": {"cpu": "4"},
        },
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("big", {"limits": {"cpu": "2"}, "requests": {"cpu": "1"}}))
    assert (
        message(err, 403) == 'pods "big" is forbidden: maximum cpu usage per Container is 1, but limit is 2'
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(
            namespace, pod("small", {"requests": {"cpu": "50m"}, "limits": {"cpu": "150m"}})
        )
    assert (
        message(err, 403)
        == 'pods "small" is forbidden: minimum cpu usage per Container is 100m, but request is 50m'
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(
            namespace, pod("ratio", {"requests": {"cpu": "100m"}, "limits": {"cpu": "800m"}})
        )
    assert message(err, 403) == (
        'pods "ratio" is forbidden: cpu max limit to request ratio per Container is 4, but provided ratio is 8.000000'
    )
    # Defaults apply first (default = max 1, defaultRequest = 1): a bare pod fits.
    assert v1.create_namespaced_pod(namespace, pod("bare")).spec.containers[0].resources.limits == {
        "cpu": "1"
    }
    body = json.dumps({"apiVersion": "v1", "kind": "Pod", **pod("k", {"limits": {"cpu": "3"}})})
    proc = kubectl.run("-n", namespace, "create", "-f", "-", input=body, check=False)
    assert proc.returncode == 1
    assert 'pods "k" is forbidden: maximum cpu usage per Container is 1, but limit is 3' in proc.stderr


def test_pod_bounds(v1: client.CoreV1Api, namespace: str) -> None:
    limits(v1, namespace, {"type": "Pod", "max": {"memory": "1Gi"}, "min": {"cpu": "1"}})
    two = pod("two", {"limits": {"memory": "600Mi"}})
    two["spec"]["containers"].append(
        {"name": "d", "image": "busybox", "resources": {"limits": {"memory": "600Mi"}}}
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, two)
    # Every bound that fails is reported, as upstream's aggregate.
    assert message(err, 403) == (
        'pods "two" is forbidden: [minimum cpu usage per Pod is 1.  No request is specified, '
        "maximum memory usage per Pod is 1Gi, but limit is 1200Mi]"
    )
    v1.create_namespaced_pod(namespace, pod("one", {"limits": {"memory": "600Mi", "cpu": "1"}}))


def test_claim_bounds(v1: client.CoreV1Api, namespace: str) -> None:
    limits(
        v1, namespace, {"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "5Gi"}}
    )

    def claim(name: str, size: str) -> Obj:
        return {
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
        }

    with pytest.raises(ApiException) as err:
        v1.create_namespaced_persistent_volume_claim(namespace, claim("tiny", "500Mi"))
    assert (
        message(err, 403)
        == 'persistentvolumeclaims "tiny" is forbidden: minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi'
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_persistent_volume_claim(namespace, claim("huge", "10Gi"))
    assert (
        message(err, 403)
        == 'persistentvolumeclaims "huge" is forbidden: maximum storage usage per PersistentVolumeClaim is 5Gi, but request is 10Gi'
    )
    v1.create_namespaced_persistent_volume_claim(namespace, claim("fine", "2Gi"))


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (
            {"type": "Container", "min": {"cpu": "2"}, "max": {"cpu": "1"}},
            'spec.limits[0].min[cpu]: Invalid value: "2": min value 2 is greater than max value 1',
        ),
        (
            {"type": "Container", "default": {"cpu": "2"}, "defaultRequest": {"cpu": "3"}},
            'spec.limits[0].defaultRequest[cpu]: Invalid value: "3": default request value 3 is greater than default limit value 2',
        ),
        (
            {"type": "Container", "maxLimitRequestRatio": {"cpu": "500m"}},
            'spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: "500m": ratio 500m is less than 1',
        ),
        (
            {"type": "Pod", "default": {"cpu": "1"}},
            "spec.limits[0].default: Forbidden: may not be specified when `type` is 'Pod'",
        ),
        (
            {"type": "Node", "max": {"cpu": "1"}},
            'spec.limits[0].type: Invalid value: "Node": must be a standard limit type or fully qualified',
        ),
        (
            {"type": "PersistentVolumeClaim", "max": {"cpu": "1"}},
            "spec.limits[0].limits: Required value: either minimum or maximum storage value is required, but neither was provided",
        ),
        (
            {"type": "Container", "max": {"pods": "1"}},
            'spec.limits[0].max[pods]: Invalid value: "pods": must be a standard resource for containers',
        ),
    ],
)
def test_validation(v1: client.CoreV1Api, namespace: str, item: Obj, expected: str) -> None:
    with pytest.raises(ApiException) as err:
        limits(v1, namespace, item, name="bad")
    text = message(err, 422)
    assert text.startswith('LimitRange "bad" is invalid: '), text
    assert expected in text


def test_duplicate_types(v1: client.CoreV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        limits(
            v1,
            namespace,
            {"type": "Pod", "max": {"cpu": "1"}},
            {"type": "Pod", "max": {"cpu": "2"}},
            name="bad",
        )
    assert 'spec.limits[1].type: Duplicate value: "Pod"' in message(err, 422)


def test_kubectl_describe_limitrange(v1: client.CoreV1Api, namespace: str, kubectl: Kubectl) -> None:
    limits(v1, namespace, {"type": "Container", "max": {"cpu": "1"}, "min": {"cpu": "100m"}})
    rows = [line.split() for line in kubectl("-n", namespace, "describe", "limits", "lr").splitlines()]
    assert ["Container", "cpu", "100m", "1", "1", "1", "-"] in rows
    assert kubectl("-n", namespace, "get", "limits").split()[:3] == ["NAME", "CREATED", "AT"]
