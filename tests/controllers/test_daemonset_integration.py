"""The DaemonSet controller against the real API server (the test plays the scheduler and the kubelet:
each pod is bound to the node its affinity names, then runs Ready): one pod per eligible node
(nodeSelector, taints and the daemon tolerations), the pinning affinity, status numbers, a RollingUpdate
one node at a time (maxUnavailable) and with maxSurge, OnDelete, ControllerRevisions, and a pod
replaced on a node that gains the label."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes import client

from controlplane.controllers.daemonset.logic import target_node
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from pykubelet.rig.apiserver import ApiServer
from tests.controllers.conftest import eventually, running
from tests.controllers.kubeletplay import delete_node, make_node

Obj = dict[str, Any]


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@contextlib.asynccontextmanager
async def scheduler_and_kubelets(apiserver: ApiServer, namespace: str) -> AsyncIterator[dict[str, int]]:
    """Bind every new pod of the namespace to its affinity's node, make it Running and Ready; remove
    pods being deleted at once. Yields the most pods seen not Ready at one time (while armed)."""
    kube = KubeClient(load_kubeconfig(apiserver.kubeconfig), qps=0)
    seen: set[str] = set()
    tasks: set[asyncio.Task[None]] = set()
    figures = {"most_unready": 0}

    async def start(pod: Obj) -> None:
        name = pod["metadata"]["name"]
        base = f"/api/v1/namespaces/{namespace}/pods/{name}"
        with contextlib.suppress(ApiError):
            await kube.create(
                f"{base}/binding",
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name},
                    "target": {"kind": "Node", "name": target_node(pod)},
                },
            )
            await asyncio.sleep(0.3)
            await kube.patch(
                f"{base}/status",
                {
                    "status": {
                        "phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _stamp()}],
                    }
                },
            )

    async def stop(pod: Obj) -> None:
        with contextlib.suppress(ApiError):
            await kube.delete(
                f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}",
                {"gracePeriodSeconds": 0, "preconditions": {"uid": pod["metadata"]["uid"]}},
            )

    def spawn(coro: Any) -> None:
        task = asyncio.create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def handle(pod: Obj) -> None:
        key = pod["metadata"]["uid"] + ("-stop" if pod["metadata"].get("deletionTimestamp") else "")
        if key in seen:
            return
        seen.add(key)
        spawn(stop(pod) if pod["metadata"].get("deletionTimestamp") else start(pod))

    async def loop() -> None:
        path = f"/api/v1/namespaces/{namespace}/pods"
        listing = await kube.get(path)
        rv = listing["metadata"]["resourceVersion"]
        for pod in listing["items"]:
            handle(pod)
        while True:
            async for event in kube.watch(path, {"resourceVersion": rv, "timeoutSeconds": 600}):
                rv = event["object"]["metadata"].get("resourceVersion", rv)
                if event["type"] in ("ADDED", "MODIFIED"):
                    handle(event["object"])

    runner = asyncio.create_task(loop())
    try:
        yield figures
    finally:
        for task in [runner, *tasks]:
            task.cancel()
        await asyncio.gather(runner, *tasks, return_exceptions=True)
        await kube.close()


def daemonset(name: str, group: str, image: str = "busybox:1", **spec: Any) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            **spec,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"nodeSelector": {"group": group}, "containers": [{"name": "c", "image": image}]},
            },
        },
    }


@pytest.fixture
def nodes(v1: client.CoreV1Api, namespace: str):
    made: list[str] = []

    def make(count: int, **kwargs: Any) -> list[str]:
        names = []
        for _ in range(count):
            name = f"{namespace}-n{len(made)}"
            labels = {"group": namespace, **kwargs.pop("labels", {})}
            make_node(v1, None, name, labels=labels, **kwargs)
            made.append(name)
            names.append(name)
        return names

    yield make
    for name in made:
        delete_node(v1, None, name)


def live(v1: client.CoreV1Api, ns: str, app: str) -> list[client.V1Pod]:
    return [
        p
        for p in v1.list_namespaced_pod(ns, label_selector=f"app={app}").items
        if not p.metadata.deletion_timestamp
    ]


def on_nodes(pods: list[client.V1Pod]) -> list[str]:
    return sorted(p.spec.node_name or "" for p in pods)


async def test_one_pod_per_eligible_node(apiserver, v1, apps, namespace, nodes):
    eligible = nodes(2)
    tainted = nodes(1, taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}])
    nodes(
        1,
        ready="False",
        taints=[
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        ],
    )
    make_node(v1, None, f"{namespace}-other", labels={"group": "elsewhere"})
    try:
        async with running(apiserver, "daemonset"), scheduler_and_kubelets(apiserver, namespace):
            apps.create_namespaced_daemon_set(namespace, daemonset("agent", namespace))
            pods = await eventually(
                lambda: (
                    (p := live(v1, namespace, "agent"))
                    and len(p) == 3
                    and all(x.spec.node_name for x in p)
                    and p
                ),
                what="3 daemon pods",
            )
            assert tainted[0] not in on_nodes(pods) and set(eligible) <= set(on_nodes(pods))
            pod = pods[0]
            terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
            assert len(terms) == 1 and terms[0].match_fields[0].key == "metadata.name"
            assert terms[0].match_fields[0].values == [pod.spec.node_name]
            keys = {(t.key, t.effect) for t in pod.spec.tolerations}
            assert keys == {
                ("node.kubernetes.io/not-ready", "NoExecute"),
                ("node.kubernetes.io/unreachable", "NoExecute"),
                ("node.kubernetes.io/disk-pressure", "NoSchedule"),
                ("node.kubernetes.io/memory-pressure", "NoSchedule"),
                ("node.kubernetes.io/pid-pressure", "NoSchedule"),
                ("node.kubernetes.io/unschedulable", "NoSchedule"),
            }
            assert (
                pod.metadata.labels["controller-revision-hash"]
                and pod.metadata.labels["pod-template-generation"] == "1"
            )
            status = (
                await eventually(
                    lambda: (
                        (d := apps.read_namespaced_daemon_set_status("agent", namespace))
                        and d.status
                        and d.status.number_ready == 3
                        and d
                    )
                )
            ).status
            assert (
                status.desired_number_scheduled,
                status.current_number_scheduled,
                status.updated_number_scheduled,
                status.number_available,
                status.number_misscheduled,
                status.observed_generation,
            ) == (3, 3, 3, 3, 0, 1)
            # Tolerating the taint brings a pod there too.
            apps.patch_namespaced_daemon_set(
                "agent",
                namespace,
                {
                    "spec": {
                        "template": {
                            "spec": {
                                "tolerations": [
                                    {
                                        "key": "dedicated",
                                        "operator": "Equal",
                                        "value": "db",
                                        "effect": "NoSchedule",
                                    }
                                ]
                            }
                        }
                    }
                },
            )
            await eventually(
                lambda: tainted[0] in on_nodes(live(v1, namespace, "agent")),
                timeout=30,
                what="a pod on the tainted node",
            )
            # A node losing the label loses its pod.
            v1.patch_node(eligible[0], {"metadata": {"labels": {"group": "gone"}}})
            await eventually(lambda: eligible[0] not in on_nodes(live(v1, namespace, "agent")), timeout=30)
    finally:
        delete_node(v1, None, f"{namespace}-other")


async def test_rolling_update_one_node_at_a_time_and_history(apiserver, v1, apps, namespace, nodes):
    nodes(3)
    async with running(apiserver, "daemonset"), scheduler_and_kubelets(apiserver, namespace):
        apps.create_namespaced_daemon_set(namespace, daemonset("agent", namespace))
        await eventually(
            lambda: (
                (d := apps.read_namespaced_daemon_set_status("agent", namespace).status)
                and d.number_available == 3
            )
        )
        before = {p.metadata.uid for p in live(v1, namespace, "agent")}
        apps.patch_namespaced_daemon_set(
            "agent",
            namespace,
            {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}},
        )
        # Watch the pods: never fewer than 2 of 3 nodes with a live pod (maxUnavailable 1).
        least = 3
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            pods = live(v1, namespace, "agent")
            ready = [
                p
                for p in pods
                if p.status.conditions
                and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions)
            ]
            least = min(least, len(ready))
            if (
                len(pods) == 3
                and all(p.spec.containers[0].image == "busybox:2" for p in pods)
                and len(ready) == 3
            ):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the rollout did not finish")
        assert least >= 2
        assert not before & {p.metadata.uid for p in live(v1, namespace, "agent")}
        status = (
            await eventually(
                lambda: (
                    (d := apps.read_namespaced_daemon_set_status("agent", namespace))
                    and d.status.updated_number_scheduled == 3
                    and d.status.number_available == 3
                    and d
                )
            )
        ).status
        assert status.observed_generation == 2
        revisions = sorted(
            client.AppsV1Api(apps.api_client).list_namespaced_controller_revision(namespace).items,
            key=lambda r: r.revision,
        )
        assert [r.revision for r in revisions] == [1, 2]
        assert revisions[1].data["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:2"
        assert revisions[1].data["spec"]["template"]["$patch"] == "replace"
        assert revisions[1].metadata.owner_references[0].kind == "DaemonSet"
        assert revisions[1].metadata.labels["app"] == "agent"
        hashes = {p.metadata.labels["controller-revision-hash"] for p in live(v1, namespace, "agent")}
        assert hashes == {revisions[1].metadata.labels["controller-revision-hash"]}
        # Going back to the first template renumbers its revision instead of making a third.
        apps.patch_namespaced_daemon_set(
            "agent",
            namespace,
            {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}}},
        )
        await eventually(
            lambda: (
                sorted(
                    (r.metadata.name, r.revision)
                    for r in client.AppsV1Api(apps.api_client)
                    .list_namespaced_controller_revision(namespace)
                    .items
                )
                == sorted([(revisions[0].metadata.name, 3), (revisions[1].metadata.name, 2)])
            )
        )


async def test_surge_and_on_delete(apiserver, v1, apps, namespace, nodes):
    nodes(2)
    async with running(apiserver, "daemonset"), scheduler_and_kubelets(apiserver, namespace):
        apps.create_namespaced_daemon_set(
            namespace,
            daemonset(
                "surge",
                namespace,
                updateStrategy={
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
                },
            ),
        )
        apps.create_namespaced_daemon_set(
            namespace, daemonset("manual", namespace, updateStrategy={"type": "OnDelete"})
        )
        for app in ("surge", "manual"):
            await eventually(
                lambda a=app: (
                    (d := apps.read_namespaced_daemon_set_status(a, namespace).status)
                    and d.number_available == 2
                )
            )
        for app in ("surge", "manual"):
            apps.patch_namespaced_daemon_set(
                app,
                namespace,
                {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}},
            )
        most = 0
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            pods = live(v1, namespace, "surge")
            most = max(most, len(pods))
            if len(pods) == 2 and all(p.spec.containers[0].image == "busybox:2" for p in pods):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the surge rollout did not finish")
        assert most <= 3  # one extra pod at a time
        # OnDelete: nothing changes until a pod is deleted; its replacement has the new template.
        manual = live(v1, namespace, "manual")
        assert all(p.spec.containers[0].image == "busybox:1" for p in manual)
        status = apps.read_namespaced_daemon_set_status("manual", namespace).status
        assert status.updated_number_scheduled in (0, None)
        v1.delete_namespaced_pod(manual[0].metadata.name, namespace)
        replaced = await eventually(
            lambda: [
                p
                for p in live(v1, namespace, "manual")
                if p.spec.node_name == manual[0].spec.node_name and p.metadata.uid != manual[0].metadata.uid
            ],
            timeout=30,
        )
        assert replaced[0].spec.containers[0].image == "busybox:2"
        assert any(p.spec.containers[0].image == "busybox:1" for p in live(v1, namespace, "manual"))


@pytest.mark.parametrize(
    ("phase", "reason", "kind", "said"),
    [
        (
            "Failed",
            "FailedDaemonPod",
            "Warning",
            "Found failed daemon pod {pod} on node {node}, will try to kill it",
        ),
        (
            "Succeeded",
            "SucceededDaemonPod",
            "Normal",
            "Found succeeded daemon pod {pod} on node {node}, will try to delete it",
        ),
    ],
)
async def test_a_finished_daemon_pod_is_deleted_and_replaced(
    apiserver, v1, apps, namespace, nodes, phase, reason, kind, said
):
    """A daemon is never done while its node is there: a pod that Failed or Succeeded is deleted (with
    upstream's event) and replaced."""
    nodes(1)
    async with running(apiserver, "daemonset"), scheduler_and_kubelets(apiserver, namespace):
        apps.create_namespaced_daemon_set(namespace, daemonset("agent", namespace))
        first = (
            await eventually(lambda: [p for p in live(v1, namespace, "agent") if p.status.phase == "Running"])
        )[0]
        v1.patch_namespaced_pod_status(first.metadata.name, namespace, {"status": {"phase": phase}})
        await eventually(
            lambda: [
                p
                for p in live(v1, namespace, "agent")
                if p.metadata.uid != first.metadata.uid and p.status.phase == "Running"
            ],
            timeout=30,
            what="a replacement",
        )
        events = [e for e in v1.list_namespaced_event(namespace).items if e.reason == reason]
        assert [(e.type, e.message) for e in events] == [
            (kind, said.format(pod=f"{namespace}/{first.metadata.name}", node=first.spec.node_name))
        ]
