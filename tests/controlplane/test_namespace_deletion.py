"""Namespace deletion against the real API server, as upstream's namespace controller does it: the
content is left alone for 5 s after the namespace is marked (namespaceDeletionGracePeriod), then swept;
a namespace that cannot be emptied carries upstream's five deletion conditions saying why."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from kubernetes import client

from e2e.waiting import gone, wait_for
from tests.controlplane.conftest import Kubectl
from tests.controlplane.test_apiserver_aggregator import _apiservice as apiservice

HOLD = "example.com/hold"


def fresh_namespace(v1: client.CoreV1Api) -> str:
    name = f"nsdel-{uuid.uuid4().hex[:8]}"
    v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def conditions(v1: client.CoreV1Api, name: str) -> dict[str, tuple[str, str, str]]:
    ns = v1.read_namespace(name)
    return {c.type: (c.status, c.reason, c.message) for c in ns.status.conditions or []}


def test_kubectl_delete_of_a_file_listing_its_namespace_first(kubectl: Kubectl, tmp_path: Path) -> None:
    name = f"nsdel-{uuid.uuid4().hex[:8]}"
    manifest = tmp_path / "app.yaml"
    manifest.write_text(
        f"""apiVersion: v1
kind: Namespace
metadata:
  name: {name}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: {name}
data:
  a: "1"
---
apiVersion: v1
kind: Secret
metadata:
  name: token
  namespace: {name}
stringData:
  t: x
"""
    )
    kubectl("apply", "-f", str(manifest))
    out = kubectl.run("delete", "-f", str(manifest), check=False)
    # Upstream: the objects are still there for kubectl to delete one by one after the namespace.
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f'namespace "{name}" deleted',
        'configmap "settings" deleted',
        'secret "token" deleted',
    ]
    assert out.stderr == ""


def test_content_waits_out_the_grace_period(v1: client.CoreV1Api) -> None:
    name = fresh_namespace(v1)
    v1.create_namespaced_config_map(name, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")))
    v1.delete_namespace(name)
    marked = time.monotonic()
    assert v1.read_namespaced_config_map("c", name).metadata.deletion_timestamp is None
    wait_for(lambda: gone(lambda: v1.read_namespaced_config_map("c", name)), what="the content to go")
    swept = time.monotonic() - marked
    assert swept >= 5.0, f"content deleted {swept:.2f} s after the namespace, before the 5 s grace"
    wait_for(lambda: gone(lambda: v1.read_namespace(name)), what="the namespace to go")


def test_conditions_name_what_holds_a_terminating_namespace(v1: client.CoreV1Api) -> None:
    name = fresh_namespace(v1)
    v1.create_namespaced_config_map(
        name, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="held", finalizers=[HOLD]))
    )
    v1.delete_namespace(name)
    found = wait_for(
        lambda: (c := conditions(v1, name)).get("NamespaceContentRemaining", ("",))[0] == "True" and c,
        what="the content-remaining condition",
    )
    assert found == {
        "NamespaceDeletionDiscoveryFailure": (
            "False",
            "ResourcesDiscovered",
            "All resources successfully discovered",
        ),
        "NamespaceDeletionGroupVersionParsingFailure": (
            "False",
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed",
        ),
        "NamespaceDeletionContentFailure": (
            "False",
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization",
        ),
        "NamespaceContentRemaining": (
            "True",
            "SomeResourcesRemain",
            "Some resources are remaining: configmaps. has 1 resource instances",
        ),
        "NamespaceFinalizersRemaining": (
            "True",
            "SomeFinalizerRemain",
            f"Some finalizers are remaining: {HOLD} in 1 resource instances",
        ),
    }
    ns = v1.read_namespace(name)
    assert [c.type for c in ns.status.conditions] == list(found)  # upstream's order
    assert ns.status.phase == "Terminating"
    v1.patch_namespaced_config_map("held", name, {"metadata": {"finalizers": None}})
    wait_for(lambda: gone(lambda: v1.read_namespace(name)), what="the namespace to go once released")


def test_content_failure_when_pods_outlive_their_grace(v1: client.CoreV1Api) -> None:
    """A pod bound to a node whose kubelet never finishes it: after its grace period it is content
    upstream cannot explain, reported as a deletion failure."""
    name = fresh_namespace(v1)
    v1.create_namespaced_pod(
        name,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="stuck"),
            spec=client.V1PodSpec(
                node_name="no-kubelet",
                termination_grace_period_seconds=1,
                containers=[client.V1Container(name="c", image="busybox")],
            ),
        ),
    )
    v1.delete_namespace(name)
    found = wait_for(
        lambda: (c := conditions(v1, name)).get("NamespaceDeletionContentFailure", ("",))[0] == "True" and c,
        what="the content-failure condition",
    )
    assert found["NamespaceDeletionContentFailure"] == (
        "True",
        "ContentDeletionFailed",
        "Failed to delete all resource types, 1 remaining: unexpected items still remain in namespace: "
        f"{name} for gvr: /v1, Resource=pods",
    )
    assert found["NamespaceContentRemaining"] == (
        "True",
        "SomeResourcesRemain",
        "Some resources are remaining: pods. has 1 resource instances",
    )
    assert found["NamespaceFinalizersRemaining"] == (
        "False",
        "ContentRemoved",
        "All content successfully removed",
    )
    v1.delete_namespaced_pod("stuck", name, grace_period_seconds=0)
    wait_for(lambda: gone(lambda: v1.read_namespace(name)), what="the namespace to go once the pod is gone")


def test_an_unavailable_aggregated_api_keeps_the_namespace(
    api: client.ApiClient, v1: client.CoreV1Api
) -> None:
    """Discovery lists the group of an unavailable APIService Stale: upstream's namespace controller
    cannot know that group's content, reports the discovery failure and keeps the namespace."""
    group = f"g{uuid.uuid4().hex[:8]}.example.com"
    custom = client.CustomObjectsApi(api)
    # Its Service (default/api) does not exist: ServiceNotFound, never Available.
    custom.create_cluster_custom_object(
        "apiregistration.k8s.io",
        "v1",
        "apiservices",
        apiservice(group, "default", insecureSkipTLSVerify=True),
    )
    try:
        name = fresh_namespace(v1)
        v1.create_namespaced_config_map(name, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")))
        v1.delete_namespace(name)
        found = wait_for(
            lambda: (
                (c := conditions(v1, name)).get("NamespaceDeletionDiscoveryFailure", ("",))[0] == "True" and c
            ),
            what="the discovery-failure condition",
        )
        assert found["NamespaceDeletionDiscoveryFailure"] == (
            "True",
            "DiscoveryFailed",
            "Discovery failed for some groups, 1 failing: unable to retrieve the complete list of server APIs: "
            f"{group}/v1: stale GroupVersion discovery: {group}/v1",
        )
        # What could be deleted was; the namespace stays while the group's content cannot be known.
        assert found["NamespaceContentRemaining"] == (
            "False",
            "ContentRemoved",
            "All content successfully removed",
        )
        assert v1.list_namespaced_config_map(name).items == []
        assert v1.read_namespace(name).status.phase == "Terminating"
    finally:
        custom.delete_cluster_custom_object("apiregistration.k8s.io", "v1", "apiservices", f"v1.{group}")
    wait_for(lambda: gone(lambda: v1.read_namespace(name)), timeout=70, what="the namespace to go")
