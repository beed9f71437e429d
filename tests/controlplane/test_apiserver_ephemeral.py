"""pods/ephemeralcontainers (upstream's podEphemeralContainersStrategy): `kubectl debug` adds an
ephemeral container through it; it changes spec.ephemeralContainers only, and existing ones stay as
they were."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.integration


def _pod(v1: client.CoreV1Api, name: str) -> client.V1Pod:
    body = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
    )
    return v1.create_namespaced_pod("default", body)


def test_kubectl_debug_adds_an_ephemeral_container(apiserver, kubectl):
    with apiserver.api_client() as api:
        v1 = client.CoreV1Api(api)
        name = f"debug-{uuid.uuid4().hex[:6]}"
        _pod(v1, name)
        kubectl("debug", name, "--image=busybox", "--container=dbg", "--", "true")
        pod = v1.read_namespaced_pod(name, "default")
        [eph] = pod.spec.ephemeral_containers
        assert (eph.name, eph.image, eph.command) == ("dbg", "busybox", ["true"])
        assert eph.termination_message_policy == "File" and pod.spec.containers[0].name == "c"
        # Through the subresource, nothing else of the pod changes, and the container stays as it is.
        changed = {
            "spec": {"ephemeralContainers": [{"name": "dbg", "image": "busybox:other", "command": ["true"]}]}
        }
        with pytest.raises(ApiException) as err:
            v1.patch_namespaced_pod_ephemeralcontainers(name, "default", changed)
        assert err.value.status == 422
        causes = json.loads(err.value.body)["details"]["causes"]
        assert causes[0]["field"] == "spec.ephemeralContainers"
        assert 'existing ephemeral containers "dbg" may not be changed' in causes[0]["message"]
        dup = {
            "spec": {
                "ephemeralContainers": [
                    {
                        "name": "dbg",
                        "image": "busybox",
                        "command": ["true"],
                        "terminationMessagePolicy": "File",
                        "imagePullPolicy": "Always",
                    },
                    {"name": "c", "image": "busybox"},
                ]
            }
        }
        with pytest.raises(ApiException) as err:
            v1.patch_namespaced_pod_ephemeralcontainers(name, "default", dup)
        assert err.value.status == 422
        got = v1.read_namespaced_pod_ephemeralcontainers(name, "default")
        assert [c.name for c in got.spec.ephemeral_containers] == ["dbg"]


def test_a_pod_update_keeps_its_ephemeral_containers(apiserver):
    with apiserver.api_client() as api:
        v1 = client.CoreV1Api(api)
        name = f"keep-{uuid.uuid4().hex[:6]}"
        _pod(v1, name)
        v1.patch_namespaced_pod_ephemeralcontainers(
            name, "default", {"spec": {"ephemeralContainers": [{"name": "dbg", "image": "busybox"}]}}
        )
        pod = v1.read_namespaced_pod(name, "default")
        pod.spec.ephemeral_containers = None
        pod.metadata.labels = {"touched": "yes"}
        v1.replace_namespaced_pod(name, "default", pod)
        again = v1.read_namespaced_pod(name, "default")
        assert again.metadata.labels == {"touched": "yes"}
        assert [c.name for c in again.spec.ephemeral_containers] == ["dbg"]
