"""The Deployment controller with the ReplicaSet controller, in-process, against the real API server;
the tests play the kubelet (playkubelet): a rollout's bounds proven by a watch, Recreate, proportional
scaling mid-rollout, pause and resume, revision history, the progress deadline, hash collisions."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes import client

from controlplane.controllers.deployment.hashing import compute_hash
from e2e import manifests
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from tests.controllers.conftest import eventually, running
from tests.controllers.playkubelet import census, kubelet

Obj = dict[str, Any]


def deployment(name: str, replicas: int, image: str = "busybox:1", **spec: Any) -> Obj:
    return manifests.deployment(name, [{"name": "c", "image": image}], replicas, grace=None, **spec)


def rolling(surge: int | str, unavailable: int | str) -> Obj:
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}


def replica_sets(apps: client.AppsV1Api, ns: str) -> list[client.V1ReplicaSet]:
    return apps.list_namespaced_replica_set(ns).items


def condition(d: client.V1Deployment, type_: str) -> client.V1DeploymentCondition | None:
    return next((c for c in d.status.conditions or [] if c.type == type_), None)


def events(v1: client.CoreV1Api, ns: str, reason: str) -> list[str]:
    return [e.message for e in v1.list_namespaced_event(ns).items if e.reason == reason]


def set_image(apps: client.AppsV1Api, ns: str, name: str, image: str) -> None:
    apps.patch_namespaced_deployment(
        name, ns, {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}
    )


def rolled_out(apps: client.AppsV1Api, ns: str, name: str, replicas: int) -> client.V1Deployment | None:
    """kubectl rollout status's test: observed, all updated, no old pods, all available."""
    d = apps.read_namespaced_deployment(name, ns)
    s = d.status or client.V1DeploymentStatus()
    done = (
        (s.observed_generation or 0) >= d.metadata.generation
        and (s.updated_replicas or 0) == replicas
        and (s.replicas or 0) == replicas
        and (s.available_replicas or 0) == replicas
    )
    return d if done else None


async def test_walkthrough_one_replica_set_three_ready_pods(apiserver, v1, apps, namespace):
    async with running(apiserver, "replicaset", "deployment"), kubelet(apiserver, namespace):
        apps.create_namespaced_deployment(namespace, deployment("web", 3))
        d = await eventually(lambda: rolled_out(apps, namespace, "web", 3), what="3 available")
        [rs] = replica_sets(apps, namespace)
        pod_hash = rs.metadata.labels["pod-template-hash"]
        assert rs.metadata.name == f"web-{pod_hash}"
        assert rs.spec.selector.match_labels == {"app": "web", "pod-template-hash": pod_hash}
        assert rs.spec.template.metadata.labels == {"app": "web", "pod-template-hash": pod_hash}
        ref = rs.metadata.owner_references[0]
        assert (ref.kind, ref.name, ref.uid, ref.controller) == ("Deployment", "web", d.metadata.uid, True)
        assert rs.metadata.annotations == {
            "deployment.kubernetes.io/revision": "1",
            "deployment.kubernetes.io/desired-replicas": "3",
            "deployment.kubernetes.io/max-replicas": "4",
        }
        assert d.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
        pods = v1.list_namespaced_pod(namespace).items
        assert len(pods) == 3 and all(p.metadata.labels["pod-template-hash"] == pod_hash for p in pods)
        s = d.status
        assert (
            s.replicas,
            s.updated_replicas,
            s.ready_replicas,
            s.available_replicas,
            s.unavailable_replicas,
            s.observed_generation,
        ) == (3, 3, 3, 3, None, 1)
        available, progressing = condition(d, "Available"), condition(d, "Progressing")
        assert (available.status, available.reason, available.message) == (
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
        )
        d = await eventually(
            lambda: (
                (x := apps.read_namespaced_deployment("web", namespace))
                and condition(x, "Progressing").reason == "NewReplicaSetAvailable"
                and x
            )
        )
        progressing = condition(d, "Progressing")
        assert (progressing.status, progressing.message) == (
            "True",
            f'ReplicaSet "{rs.metadata.name}" has successfully progressed.',
        )
        assert events(v1, namespace, "ScalingReplicaSet") == [
            f"Scaled up replica set {rs.metadata.name} from 0 to 3"
        ]


async def test_rolling_update_keeps_within_surge_and_unavailable(apiserver, v1, apps, namespace):
    """10 replicas, maxSurge 3, maxUnavailable 2: a watch never sees more than 13 pods or fewer than
    8 Ready ones while v1 becomes v2."""
    async with running(apiserver, "replicaset", "deployment"), kubelet(apiserver, namespace, delay=0.05):
        apps.create_namespaced_deployment(namespace, deployment("web", 10, strategy=rolling(3, 2)))
        await eventually(lambda: rolled_out(apps, namespace, "web", 10), what="v1 rolled out")
        async with census(apiserver, namespace) as seen:
            seen.arm()
            set_image(apps, namespace, "web", "busybox:2")
            d = await eventually(
                lambda: (
                    (x := rolled_out(apps, namespace, "web", 10))
                    and x.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
                    and x
                ),
                what="v2 rolled out",
            )
            await eventually(lambda: seen.count == 10 and seen.ready == 10)
        assert seen.samples > 20
        assert seen.most_pods <= 13, seen.most_pods
        assert seen.least_ready is not None and seen.least_ready >= 8, seen.least_ready
        rss = {
            rs.metadata.annotations["deployment.kubernetes.io/revision"]: rs
            for rs in replica_sets(apps, namespace)
        }
        assert rss["1"].spec.replicas == 0 and rss["2"].spec.replicas == 10
        assert all(
            p.spec.containers[0].image == "busybox:2"
            for p in v1.list_namespaced_pod(namespace).items
            if not p.metadata.deletion_timestamp
        )
        assert d.status.updated_replicas == 10


def image_of(pod: Obj) -> str:
    return pod["spec"]["containers"][0]["image"]


def revisions(apps: client.AppsV1Api, ns: str) -> dict[str, client.V1ReplicaSet]:
    return {
        rs.metadata.annotations.get("deployment.kubernetes.io/revision"): rs for rs in replica_sets(apps, ns)
    }


async def test_recreate_stops_every_old_pod_before_a_new_one(apiserver, v1, apps, namespace):
    async with running(apiserver, "replicaset", "deployment"), kubelet(apiserver, namespace, stop_delay=0.3):
        apps.create_namespaced_deployment(namespace, deployment("web", 4, strategy={"type": "Recreate"}))
        await eventually(lambda: rolled_out(apps, namespace, "web", 4), what="v1 rolled out")
        async with census(apiserver, namespace) as seen:
            seen.arm()
            set_image(apps, namespace, "web", "busybox:2")
            await eventually(
                lambda: (
                    (x := rolled_out(apps, namespace, "web", 4))
                    and x.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
                ),
                what="v2 rolled out",
            )
            await eventually(lambda: seen.count == 4 and seen.ready == 4)
        assert seen.most_templates == 1  # never an old and a new pod at once, terminating ones included
        assert {r: x.spec.replicas for r, x in revisions(apps, namespace).items()} == {"1": 0, "2": 4}
        scaled = events(v1, namespace, "ScalingReplicaSet")
        new_name = revisions(apps, namespace)["2"].metadata.name
        old_name = revisions(apps, namespace)["1"].metadata.name
        assert scaled[-2:] == [
            f"Scaled down replica set {old_name} from 4 to 0",
            f"Scaled up replica set {new_name} from 0 to 4",
        ]


async def test_scaling_mid_rollout_is_proportional(apiserver, v1, apps, namespace):
    """v2 never becomes Ready, so the rollout stops at old 8 / new 5 (10 replicas, surge 3, unavailable
    2); scaling to 20 gives each its share of 20 + 3: old 14, new 9 (upstream's getProportion)."""
    async with (
        running(apiserver, "replicaset", "deployment"),
        kubelet(apiserver, namespace, ready=lambda pod: image_of(pod) == "busybox:1"),
    ):
        apps.create_namespaced_deployment(namespace, deployment("web", 10, strategy=rolling(3, 2)))
        await eventually(lambda: rolled_out(apps, namespace, "web", 10), what="v1 rolled out")
        set_image(apps, namespace, "web", "busybox:2")
        stuck = await eventually(
            lambda: (
                (r := revisions(apps, namespace))
                and "2" in r
                and (r["1"].spec.replicas, r["2"].spec.replicas) == (8, 5)
                and r
            ),
            what="old 8, new 5",
        )
        old, new = stuck["1"].metadata.name, stuck["2"].metadata.name
        apps.patch_namespaced_deployment_scale("web", namespace, {"spec": {"replicas": 20}})
        after = await eventually(
            lambda: (
                (r := revisions(apps, namespace)) and r["1"].spec.replicas + r["2"].spec.replicas == 23 and r
            ),
            what="23 replicas",
        )
        assert (after["1"].spec.replicas, after["2"].spec.replicas) == (14, 9)
        for rs in after.values():
            assert rs.metadata.annotations["deployment.kubernetes.io/desired-replicas"] == "20"
            assert rs.metadata.annotations["deployment.kubernetes.io/max-replicas"] == "23"
        scaled = events(v1, namespace, "ScalingReplicaSet")
        assert f"Scaled up replica set {old} from 8 to 14" in scaled
        assert f"Scaled up replica set {new} from 5 to 9" in scaled


async def test_paused_deployment_scales_but_does_not_roll_out(apiserver, v1, apps, namespace):
    async with running(apiserver, "replicaset", "deployment"), kubelet(apiserver, namespace):
        apps.create_namespaced_deployment(namespace, deployment("web", 2))
        await eventually(lambda: rolled_out(apps, namespace, "web", 2), what="v1 rolled out")
        apps.patch_namespaced_deployment("web", namespace, {"spec": {"paused": True}})
        paused = await eventually(
            lambda: (
                (x := apps.read_namespaced_deployment("web", namespace))
                and condition(x, "Progressing").reason == "DeploymentPaused"
                and x
            )
        )
        assert (condition(paused, "Progressing").status, condition(paused, "Progressing").message) == (
            "Unknown",
            "Deployment is paused",
        )
        set_image(apps, namespace, "web", "busybox:2")
        apps.patch_namespaced_deployment_scale("web", namespace, {"spec": {"replicas": 3}})
        observed = await eventually(
            lambda: (
                (x := apps.read_namespaced_deployment("web", namespace))
                and x.status.observed_generation == x.metadata.generation
                and (x.status.replicas or 0) == 3
                and x
            ),
            what="the scale observed",
        )
        [rs] = replica_sets(apps, namespace)  # no new ReplicaSet while paused
        assert rs.spec.template.spec.containers[0].image == "busybox:1" and rs.spec.replicas == 3
        assert observed.status.updated_replicas is None  # the template is not the ReplicaSet's
        apps.patch_namespaced_deployment("web", namespace, {"spec": {"paused": False}})
        await eventually(
            lambda: (
                (x := rolled_out(apps, namespace, "web", 3))
                and x.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
            ),
            what="v2 after resume",
        )
        assert f"Scaled up replica set {rs.metadata.name} from 2 to 3" in events(
            v1, namespace, "ScalingReplicaSet"
        )


async def test_pause_and_resume_are_recorded_in_progressing(apiserver, v1, apps, namespace):
    """A Deployment created paused rolls nothing out; a watch sees Progressing go Unknown/Paused, then
    Unknown/Resumed on resume, then True/NewReplicaSetCreated."""
    kube = KubeClient(load_kubeconfig(apiserver.kubeconfig), qps=0)
    seen: list[tuple[str, str, str]] = []

    async def watch() -> None:
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
        async for event in kube.watch(path, {"resourceVersion": "0", "timeoutSeconds": 60}):
            for c in (event["object"].get("status") or {}).get("conditions") or []:
                entry = (c["status"], c["reason"], c["message"])
                if c["type"] == "Progressing" and (not seen or seen[-1] != entry):
                    seen.append(entry)

    watcher = asyncio.create_task(watch())
    try:
        async with running(apiserver, "replicaset", "deployment"), kubelet(apiserver, namespace):
            apps.create_namespaced_deployment(namespace, deployment("web", 1, paused=True))
            await eventually(
                lambda: ("Unknown", "DeploymentPaused", "Deployment is paused") in seen, what="paused"
            )
            d = apps.read_namespaced_deployment("web", namespace)
            assert d.status.observed_generation == d.metadata.generation
            assert replica_sets(apps, namespace) == []  # created paused: nothing rolls out
            apps.patch_namespaced_deployment("web", namespace, {"spec": {"paused": False}})
            await eventually(lambda: rolled_out(apps, namespace, "web", 1), what="rolled out after resume")
            await eventually(lambda: seen[-1][1] == "NewReplicaSetAvailable", what="the rollout's end seen")
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await kube.close()
    name = replica_sets(apps, namespace)[0].metadata.name
    reasons = [r for _, r, _ in seen]
    assert reasons[:3] == ["DeploymentPaused", "DeploymentResumed", "NewReplicaSetCreated"], seen
    assert seen[1] == ("Unknown", "DeploymentResumed", "Deployment is resumed")
    assert seen[2] == ("True", "NewReplicaSetCreated", f'Created new replica set "{name}"')


async def test_revision_history_limit_deletes_the_oldest_empty_replica_sets(apiserver, v1, apps, namespace):
    async with running(apiserver, "replicaset", "deployment"), kubelet(apiserver, namespace):
        apps.create_namespaced_deployment(namespace, deployment("web", 2, revisionHistoryLimit=1))
        for version in (2, 3):
            await eventually(lambda: rolled_out(apps, namespace, "web", 2), what=f"v{version - 1} rolled out")
            set_image(apps, namespace, "web", f"busybox:{version}")
        await eventually(
            lambda: (
                (x := rolled_out(apps, namespace, "web", 2))
                and x.metadata.annotations["deployment.kubernetes.io/revision"] == "3"
            ),
            what="v3 rolled out",
        )
        left = await eventually(
            lambda: (r := revisions(apps, namespace)) and len(r) == 2 and r, what="one old kept"
        )
        assert set(left) == {"2", "3"} and left["2"].spec.replicas == 0


async def test_progress_deadline_exceeded(apiserver, v1, apps, namespace):
    async with (
        running(apiserver, "replicaset", "deployment"),
        kubelet(apiserver, namespace, ready=lambda pod: image_of(pod) == "busybox:1"),
    ):
        apps.create_namespaced_deployment(namespace, deployment("web", 2, progressDeadlineSeconds=2))
        await eventually(lambda: rolled_out(apps, namespace, "web", 2), what="v1 rolled out")
        set_image(apps, namespace, "web", "busybox:2")
        d = await eventually(
            lambda: (
                (x := apps.read_namespaced_deployment("web", namespace))
                and condition(x, "Progressing").reason == "ProgressDeadlineExceeded"
                and x
            ),
            timeout=30,
            what="ProgressDeadlineExceeded",
        )
        new = revisions(apps, namespace)["2"].metadata.name
        progressing = condition(d, "Progressing")
        assert (progressing.status, progressing.message) == (
            "False",
            f'ReplicaSet "{new}" has timed out progressing.',
        )
        assert condition(d, "Available").status == "True"  # the old pods still serve


async def test_hash_collision_bumps_collision_count(apiserver, v1, apps, namespace):
    """A ReplicaSet that is not the Deployment's holds the name its template hashes to: the controller
    counts a collision and uses the name the template hashes to with collisionCount 1."""
    apps.create_namespaced_deployment(namespace, deployment("web", 1))
    stored = apps.read_namespaced_deployment("web", namespace)
    kube = KubeClient(load_kubeconfig(apiserver.kubeconfig), qps=0)
    try:
        raw = await kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/web")
    finally:
        await kube.close()
    template = raw["spec"]["template"]
    taken = f"web-{compute_hash(template, None)}"
    apps.create_namespaced_replica_set(
        namespace,
        {
            "metadata": {"name": taken, "labels": {"other": "x"}},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"other": "x"}},
                "template": {
                    "metadata": {"labels": {"other": "x"}},
                    "spec": {"containers": [{"name": "c", "image": "other"}]},
                },
            },
        },
    )
    async with running(apiserver, "replicaset", "deployment"), kubelet(apiserver, namespace):
        d = await eventually(
            lambda: rolled_out(apps, namespace, "web", 1), what="rolled out despite the collision"
        )
        assert d.status.collision_count == 1
        owned = [rs for rs in replica_sets(apps, namespace) if rs.metadata.owner_references]
        assert [rs.metadata.name for rs in owned] == [f"web-{compute_hash(template, 1)}"]
        assert stored.metadata.uid == owned[0].metadata.owner_references[0].uid


async def test_orphans_are_adopted_and_released(apiserver, v1, apps, namespace):
    """A ReplicaSet the selector matches, with the Deployment's template, is adopted as its new one
    (no second ReplicaSet); one whose labels stop matching is released."""
    body = deployment("web", 2)
    apps.create_namespaced_replica_set(
        namespace,
        {
            "metadata": {"name": "web-manual", "labels": {"app": "web"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": body["spec"]["template"],
            },
        },
    )
    async with running(apiserver, "replicaset", "deployment"), kubelet(apiserver, namespace):
        d = apps.create_namespaced_deployment(namespace, body)
        await eventually(lambda: rolled_out(apps, namespace, "web", 2), what="rolled out")
        [rs] = replica_sets(apps, namespace)
        assert rs.metadata.name == "web-manual" and rs.metadata.owner_references[0].uid == d.metadata.uid
        assert rs.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
        apps.patch_namespaced_replica_set("web-manual", namespace, {"metadata": {"labels": {"app": "gone"}}})
        released = await eventually(
            lambda: (
                not (x := apps.read_namespaced_replica_set("web-manual", namespace)).metadata.owner_references
                and x
            ),
            what="release",
        )
        assert released.metadata.labels == {"app": "gone"}
        await eventually(
            lambda: len(replica_sets(apps, namespace)) == 2, what="a new ReplicaSet for the Deployment"
        )


async def test_rollback_annotation_goes_back_to_a_revision(apiserver, v1, apps, namespace):
    async with running(apiserver, "replicaset", "deployment"), kubelet(apiserver, namespace):
        apps.create_namespaced_deployment(namespace, deployment("web", 1))
        await eventually(lambda: rolled_out(apps, namespace, "web", 1))
        set_image(apps, namespace, "web", "busybox:2")
        await eventually(
            lambda: (
                (x := rolled_out(apps, namespace, "web", 1))
                and x.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
            )
        )
        first = revisions(apps, namespace)["1"].metadata.name
        apps.patch_namespaced_deployment(
            "web", namespace, {"metadata": {"annotations": {"deprecated.deployment.rollback.to": "1"}}}
        )
        d = await eventually(
            lambda: (
                (x := rolled_out(apps, namespace, "web", 1))
                and x.metadata.annotations["deployment.kubernetes.io/revision"] == "3"
                and x
            )
        )
        assert "deprecated.deployment.rollback.to" not in d.metadata.annotations
        assert d.spec.template.spec.containers[0].image == "busybox:1"
        back = revisions(apps, namespace)["3"]
        assert back.metadata.name == first  # the old ReplicaSet is new again, with the next revision
        assert back.metadata.annotations["deployment.kubernetes.io/revision-history"] == "1"
        assert 'Rolled back deployment "web" to revision 1' in events(v1, namespace, "DeploymentRollback")


async def test_a_settled_deployment_writes_nothing(apiserver, v1, apps, namespace):
    """Syncing a rolled-out Deployment again and again changes no object: writes happen only on change."""
    async with running(apiserver, "replicaset", "deployment") as manager, kubelet(apiserver, namespace):
        apps.create_namespaced_deployment(namespace, deployment("web", 3))
        await eventually(
            lambda: (
                (x := rolled_out(apps, namespace, "web", 3))
                and condition(x, "Progressing").reason == "NewReplicaSetAvailable"
            ),
            what="settled",
        )
        controller = next(c for c in manager.controllers if c.name == "deployment")
        d = apps.read_namespaced_deployment("web", namespace)
        [rs] = replica_sets(apps, namespace)
        writes, syncs = controller.writes, controller.syncs
        for _ in range(5):
            controller.queue.add(f"{namespace}/web")
            await eventually(lambda s=controller.syncs: controller.syncs > s, what="another sync")
        assert controller.syncs >= syncs + 5
        assert controller.writes == writes
        assert (
            apps.read_namespaced_deployment("web", namespace).metadata.resource_version
            == d.metadata.resource_version
        )
        assert replica_sets(apps, namespace)[0].metadata.resource_version == rs.metadata.resource_version
