"""The StatefulSet controller against the real API server, on its own identity (the test plays the
kubelet: it binds pods and reports them Running and Ready, or lets `playkubelet` do it): OrderedReady
creation one pod at a time behind readiness, stable identity (names, labels, hostname, subdomain),
reverse-ordinal scale-down, Parallel, RollingUpdate with a partition, OnDelete, ControllerRevisions,
claims made before their pods and kept or deleted by the retention policy, and a deleted pod coming back
with its name and its claim."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from pykubelet.rig.apiserver import ApiServer
from tests.controllers.conftest import eventually, mark_ready, running
from tests.controllers.playkubelet import kubelet

Obj = dict[str, Any]


def sts(name: str, replicas: int = 3, image: str = "busybox:1.36", **spec: Any) -> dict:
    body: dict = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
        },
    }
    body["spec"].update(spec)
    return body


CLAIM = {
    "metadata": {"name": "data"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
}


def st(apps: client.AppsV1Api, namespace: str, name: str) -> client.V1StatefulSetStatus:
    """The set's status (an empty one before the controller's first write)."""
    return apps.read_namespaced_stateful_set(name, namespace).status or client.V1StatefulSetStatus(replicas=0)


def pod_names(v1: client.CoreV1Api, namespace: str, live_only: bool = False) -> list[str]:
    pods = v1.list_namespaced_pod(namespace).items
    return sorted(p.metadata.name for p in pods if not (live_only and p.metadata.deletion_timestamp))


def read(v1: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod | None:
    try:
        return v1.read_namespaced_pod(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def claim(v1: client.CoreV1Api, namespace: str, name: str) -> client.V1PersistentVolumeClaim | None:
    try:
        return v1.read_namespaced_persistent_volume_claim(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def going(v1: client.CoreV1Api, namespace: str, name: str) -> bool:
    """The claim is gone, or deleted and held only by finalizers."""
    found = claim(v1, namespace, name)
    return found is None or found.metadata.deletion_timestamp is not None


def messages(v1: client.CoreV1Api, namespace: str, reason: str) -> list[str]:
    return [e.message for e in v1.list_namespaced_event(namespace).items if e.reason == reason]


@contextlib.asynccontextmanager
async def deletion_log(apiserver: ApiServer, namespace: str) -> AsyncIterator[list[tuple[str, str]]]:
    """(event, pod) in watch order: `terminating` at the first deletionTimestamp, `gone` at DELETED."""
    kube = KubeClient(load_kubeconfig(apiserver.kubeconfig), qps=0)
    seen: list[tuple[str, str]] = []
    marked: set[str] = set()
    listed = asyncio.Event()

    async def loop() -> None:
        path = f"/api/v1/namespaces/{namespace}/pods"
        rv = (await kube.get(path))["metadata"]["resourceVersion"]
        listed.set()
        async for event in kube.watch(path, {"resourceVersion": rv, "timeoutSeconds": 600}):
            pod = event["object"]
            name = pod["metadata"]["name"]
            if event["type"] == "DELETED":
                seen.append(("gone", name))
            elif pod["metadata"].get("deletionTimestamp") and pod["metadata"]["uid"] not in marked:
                marked.add(pod["metadata"]["uid"])
                seen.append(("terminating", name))

    task = asyncio.create_task(loop())
    await asyncio.wait_for(listed.wait(), 10)
    try:
        yield seen
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await kube.close()


async def test_ordered_ready_creation_and_identity(apiserver, v1, apps, namespace):
    async with running(apiserver, "statefulset"):
        apps.create_namespaced_stateful_set(namespace, sts("web"))
        web0 = await eventually(lambda: read(v1, namespace, "web-0"), what="web-0")
        labels = web0.metadata.labels
        assert labels["statefulset.kubernetes.io/pod-name"] == "web-0"
        assert labels["apps.kubernetes.io/pod-index"] == "0"
        assert (web0.spec.hostname, web0.spec.subdomain) == ("web-0", "web")
        owner = web0.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.controller) == ("StatefulSet", "web", True)
        # A sync that saw web-0 (status.replicas 1) and did not make web-1: it waits for web-0's readiness.
        await eventually(
            lambda: (st(apps, namespace, "web").replicas or 0) == 1,
            what="a sync counting web-0",
        )
        assert pod_names(v1, namespace) == ["web-0"]
        mark_ready(v1, web0)
        web1 = await eventually(lambda: read(v1, namespace, "web-1"), what="web-1")
        await eventually(
            lambda: st(apps, namespace, "web").replicas == 2,
            what="a sync counting web-1",
        )
        assert pod_names(v1, namespace) == ["web-0", "web-1"]
        mark_ready(v1, web1)
        web2 = await eventually(lambda: read(v1, namespace, "web-2"), what="web-2")
        mark_ready(v1, web2)
        status = await eventually(
            lambda: (s := st(apps, namespace, "web")).ready_replicas == 3 and s,
            what="3 ready",
        )
        assert status.replicas == 3 and status.available_replicas == 3
        assert status.current_revision == status.update_revision and status.current_revision.startswith(
            "web-"
        )
        assert status.current_replicas == 3 and status.updated_replicas == 3
        assert status.observed_generation == 1 and status.collision_count == 0
        revision = labels["controller-revision-hash"]
        assert revision == status.update_revision
        revisions = client.AppsV1Api(apps.api_client).list_namespaced_controller_revision(namespace).items
        assert [r.metadata.name for r in revisions] == [revision] and revisions[0].revision == 1
        assert web0.metadata.creation_timestamp <= web1.metadata.creation_timestamp
        assert web1.metadata.creation_timestamp <= web2.metadata.creation_timestamp
        created = await eventually(lambda: messages(v1, namespace, "SuccessfulCreate"), what="events")
        assert "create Pod web-0 in StatefulSet web successful" in created


async def test_scale_down_in_reverse_order(apiserver, v1, apps, namespace):
    async with (
        running(apiserver, "statefulset"),
        kubelet(apiserver, namespace, delay=0.1, stop_delay=0.5),
    ):
        apps.create_namespaced_stateful_set(namespace, sts("web", replicas=4))
        await eventually(
            lambda: st(apps, namespace, "web").ready_replicas == 4,
            timeout=30,
            what="4 ready",
        )
        async with deletion_log(apiserver, namespace) as log:
            apps.patch_namespaced_stateful_set_scale("web", namespace, {"spec": {"replicas": 1}})
            await eventually(lambda: pod_names(v1, namespace) == ["web-0"], timeout=30, what="web-0 alone")
            await eventually(lambda: len(log) >= 6, what="all deletions seen")
        assert log == [
            ("terminating", "web-3"),
            ("gone", "web-3"),
            ("terminating", "web-2"),
            ("gone", "web-2"),
            ("terminating", "web-1"),
            ("gone", "web-1"),
        ]
        deleted = messages(v1, namespace, "SuccessfulDelete")
        assert "delete Pod web-3 in StatefulSet web successful" in deleted


async def test_parallel_creates_without_waiting(apiserver, v1, apps, namespace):
    async with running(apiserver, "statefulset"):
        apps.create_namespaced_stateful_set(
            namespace, sts("par", replicas=3, podManagementPolicy="Parallel", ordinals={"start": 5})
        )
        names = await eventually(
            lambda: (n := pod_names(v1, namespace)) == ["par-5", "par-6", "par-7"] and n, what="3 pods"
        )
        assert names  # none of them Ready: Parallel does not wait
        apps.patch_namespaced_stateful_set_scale("par", namespace, {"spec": {"replicas": 1}})
        await eventually(
            lambda: pod_names(v1, namespace, live_only=True) == ["par-5"], what="parallel scale-down"
        )


async def test_rolling_update_with_partition(apiserver, v1, apps, namespace):
    async with (
        running(apiserver, "statefulset"),
        kubelet(apiserver, namespace, delay=0.1, stop_delay=0.2),
    ):
        apps.create_namespaced_stateful_set(
            namespace,
            sts("db", updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}),
        )
        first = await eventually(
            lambda: (s := st(apps, namespace, "db")).ready_replicas == 3 and s,
            timeout=30,
            what="3 ready",
        )
        old = first.current_revision

        def revisions() -> dict[str, str]:
            return {
                p.metadata.name: p.metadata.labels["controller-revision-hash"]
                for p in v1.list_namespaced_pod(namespace).items
                if not p.metadata.deletion_timestamp
            }

        async with deletion_log(apiserver, namespace) as log:
            apps.patch_namespaced_stateful_set(
                "db",
                namespace,
                {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}}}},
            )
            status = await eventually(
                lambda: (
                    (s := st(apps, namespace, "db")).updated_replicas == 2 and s.ready_replicas == 3 and s
                ),
                timeout=30,
                what="partitioned rollout",
            )
        new = status.update_revision
        assert new != old and status.current_revision == old
        assert revisions() == {"db-0": old, "db-1": new, "db-2": new}
        assert [name for what, name in log if what == "terminating"] == ["db-2", "db-1"]
        pod0 = v1.read_namespaced_pod("db-0", namespace)
        assert pod0.spec.containers[0].image == "busybox:1.36"
        assert v1.read_namespaced_pod("db-1", namespace).spec.containers[0].image == "busybox:1.37"
        apps.patch_namespaced_stateful_set(
            "db", namespace, {"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}
        )
        done = await eventually(
            lambda: (s := st(apps, namespace, "db")).current_revision == new and s.ready_replicas == 3 and s,
            timeout=30,
            what="rollout complete",
        )
        assert done.current_replicas == 3 and done.updated_replicas == 3
        assert revisions() == {"db-0": new, "db-1": new, "db-2": new}
        history = apps.list_namespaced_controller_revision(namespace).items
        assert sorted((r.revision, r.metadata.name) for r in history) == [(1, old), (2, new)]


async def test_on_delete_waits_for_a_deleted_pod(apiserver, v1, apps, namespace):
    async with (
        running(apiserver, "statefulset"),
        kubelet(apiserver, namespace, delay=0.1, stop_delay=0.2),
    ):
        apps.create_namespaced_stateful_set(
            namespace, sts("od", replicas=2, updateStrategy={"type": "OnDelete"})
        )
        first = await eventually(
            lambda: (s := st(apps, namespace, "od")).ready_replicas == 2 and s,
            timeout=30,
            what="2 ready",
        )
        apps.patch_namespaced_stateful_set(
            "od",
            namespace,
            {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}}}},
        )
        status = await eventually(
            lambda: (s := st(apps, namespace, "od")).observed_generation == 2 and s,
            what="the new generation seen",
        )
        assert status.update_revision != first.current_revision
        assert status.current_revision == first.current_revision and status.updated_replicas in (None, 0)
        labels = {
            p.metadata.name: p.metadata.labels["controller-revision-hash"]
            for p in v1.list_namespaced_pod(namespace).items
        }
        assert labels == {"od-0": first.current_revision, "od-1": first.current_revision}
        old_uid = v1.read_namespaced_pod("od-1", namespace).metadata.uid
        v1.delete_namespaced_pod("od-1", namespace)
        back = await eventually(
            lambda: (p := read(v1, namespace, "od-1")) is not None and p.metadata.uid != old_uid and p,
            timeout=30,
            what="od-1 back",
        )
        assert back.metadata.labels["controller-revision-hash"] == status.update_revision
        assert back.spec.containers[0].image == "busybox:1.37"
        assert v1.read_namespaced_pod("od-0", namespace).spec.containers[0].image == "busybox:1.36"


async def test_claims_retained_and_a_pod_comes_back_with_its_claim(apiserver, v1, apps, namespace):
    async with (
        running(apiserver, "statefulset"),
        kubelet(apiserver, namespace, delay=0.1, stop_delay=0.2),
    ):
        apps.create_namespaced_stateful_set(namespace, sts("web", replicas=2, volumeClaimTemplates=[CLAIM]))
        await eventually(
            lambda: st(apps, namespace, "web").ready_replicas == 2,
            timeout=30,
            what="2 ready",
        )
        claims = {c.metadata.name: c for c in v1.list_namespaced_persistent_volume_claim(namespace).items}
        assert sorted(claims) == ["data-web-0", "data-web-1"]
        for ordinal in (0, 1):
            made = claims[f"data-web-{ordinal}"]
            assert made.metadata.labels == {"app": "web"}
            assert made.metadata.owner_references is None  # Retain/Retain: nothing owns them
            pod = v1.read_namespaced_pod(f"web-{ordinal}", namespace)
            volume = next(v for v in pod.spec.volumes if v.name == "data")
            assert volume.persistent_volume_claim.claim_name == f"data-web-{ordinal}"
            assert made.metadata.creation_timestamp <= pod.metadata.creation_timestamp
        created = messages(v1, namespace, "SuccessfulCreate")
        assert "create Claim data-web-0 Pod web-0 in StatefulSet web success" in created
        old = v1.read_namespaced_pod("web-0", namespace)
        v1.delete_namespaced_pod("web-0", namespace)
        back = await eventually(
            lambda: (
                (p := read(v1, namespace, "web-0")) is not None
                and p.metadata.uid != old.metadata.uid
                and p.status.phase == "Running"
                and p
            ),
            timeout=30,
            what="web-0 back",
        )
        volume = next(v for v in back.spec.volumes if v.name == "data")
        assert volume.persistent_volume_claim.claim_name == "data-web-0"
        assert claim(v1, namespace, "data-web-0").metadata.uid == claims["data-web-0"].metadata.uid
        apps.patch_namespaced_stateful_set_scale("web", namespace, {"spec": {"replicas": 1}})
        await eventually(lambda: pod_names(v1, namespace) == ["web-0"], timeout=30, what="scaled to 1")
        assert claim(v1, namespace, "data-web-1").metadata.uid == claims["data-web-1"].metadata.uid


async def test_claims_deleted_by_the_retention_policy(apiserver, v1, apps, namespace):
    async with (
        running(apiserver, "statefulset", "garbage-collector"),
        kubelet(apiserver, namespace, delay=0.1, stop_delay=0.2),
    ):
        made = apps.create_namespaced_stateful_set(
            namespace,
            sts(
                "db",
                replicas=2,
                volumeClaimTemplates=[CLAIM],
                persistentVolumeClaimRetentionPolicy={"whenDeleted": "Delete", "whenScaled": "Delete"},
            ),
        )
        await eventually(
            lambda: st(apps, namespace, "db").ready_replicas == 2,
            timeout=30,
            what="2 ready",
        )

        def owners(name: str) -> list[tuple[str, str, bool]]:
            found = claim(v1, namespace, name)
            refs = (found.metadata.owner_references or []) if found else []
            return [(r.kind, r.name, bool(r.controller)) for r in refs]

        await eventually(lambda: owners("data-db-1") == [("StatefulSet", "db", True)], what="set owns claims")
        assert owners("data-db-0") == [("StatefulSet", "db", True)]
        set_ref = claim(v1, namespace, "data-db-0").metadata.owner_references[0]
        assert set_ref.uid == made.metadata.uid
        kept = claim(v1, namespace, "data-db-0").metadata.uid
        apps.patch_namespaced_stateful_set_scale("db", namespace, {"spec": {"replicas": 1}})
        # whenScaled: Delete: the scaled-down pod's claim is handed to the pod, and the garbage collector
        # deletes it with the pod (the kubernetes.io/pvc-protection finalizer, which no controller here
        # lifts, may hold it marked).
        await eventually(lambda: going(v1, namespace, "data-db-1"), timeout=30, what="data-db-1 deleted")
        left = claim(v1, namespace, "data-db-0")
        assert left.metadata.uid == kept and left.metadata.deletion_timestamp is None
        apps.delete_namespaced_stateful_set("db", namespace)
        await eventually(lambda: going(v1, namespace, "data-db-0"), timeout=30, what="data-db-0 deleted")
