"""The resource-quota controller in-process against the real API server, on its own identity
(resourcequota-controller): it fills status.hard/used from the live objects, recounts when objects go
away or pods turn terminal, follows a change of hard limits, counts `count/<resource>.<group>` through
discovery, and after parallel creates against pods=5 (exactly 5 admitted) its recount agrees with the
charges admission made."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pykubelet.rig.apiserver import ApiServer
from tests.controllers.conftest import eventually, running

Obj = dict[str, Any]


def pod(name: str, cpu: str | None = None) -> Obj:
    container: Obj = {"name": "c", "image": "busybox"}
    if cpu:
        container["resources"] = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    return {"metadata": {"name": name}, "spec": {"containers": [container]}}


def quota_used(v1: client.CoreV1Api, ns: str, name: str = "q") -> dict[str, str]:
    status = v1.read_namespaced_resource_quota(name, ns).status
    return dict((status.used if status else None) or {})


async def settled(v1: client.CoreV1Api, ns: str, want: dict[str, str], name: str = "q") -> None:
    await eventually(lambda: quota_used(v1, ns, name) == want, what=f"quota {name} used == {want}")


async def test_status_counts_live_objects_and_releases(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str
) -> None:
    # Objects that exist before the quota are counted by the controller, not by admission.
    v1.create_namespaced_pod(namespace, pod("before", "200m"))
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}})
    hard = {"pods": "3", "requests.cpu": "1", "count/configmaps": "5", "count/deployments.apps": "2"}
    async with running(apiserver, "resourcequota"):
        v1.create_namespaced_resource_quota(namespace, {"metadata": {"name": "q"}, "spec": {"hard": hard}})
        # count/configmaps also sees kube-root-ca.crt when that controller runs; here it does not.
        await settled(
            v1,
            namespace,
            {"pods": "1", "requests.cpu": "200m", "count/configmaps": "1", "count/deployments.apps": "0"},
        )
        assert v1.read_namespaced_resource_quota("q", namespace).status.hard == hard
        v1.create_namespaced_pod(namespace, pod("a", "300m"))
        v1.create_namespaced_pod(namespace, pod("b", "300m"))
        assert quota_used(v1, namespace)["pods"] == "3"  # charged at admission
        try:
            v1.create_namespaced_pod(namespace, pod("c", "100m"))
            raise AssertionError("a fourth pod was admitted")
        except ApiException as err:
            assert err.status == 403
            assert json.loads(err.body)["message"] == (
                'pods "c" is forbidden: exceeded quota: q, requested: pods=1, used: pods=3, limited: pods=3'
            )
        # A deleted pod's usage comes back.
        v1.delete_namespaced_pod("a", namespace, grace_period_seconds=0)
        await settled(
            v1,
            namespace,
            {"pods": "2", "requests.cpu": "500m", "count/configmaps": "1", "count/deployments.apps": "0"},
        )
        # A pod that finished stops counting, but stays counted as an object (count/pods).
        v1.patch_namespaced_pod_status("b", namespace, {"status": {"phase": "Succeeded"}})
        await settled(
            v1,
            namespace,
            {"pods": "1", "requests.cpu": "200m", "count/configmaps": "1", "count/deployments.apps": "0"},
        )
        # New hard limits are followed.
        v1.patch_namespaced_resource_quota(
            "q", namespace, {"spec": {"hard": {"pods": "10", "count/pods": "10"}}}
        )
        await settled(
            v1,
            namespace,
            {
                "pods": "1",
                "count/pods": "2",
                "requests.cpu": "200m",
                "count/configmaps": "1",
                "count/deployments.apps": "0",
            },
        )


async def test_scoped_quota_counts_only_its_pods(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str
) -> None:
    v1.create_namespaced_pod(namespace, pod("be"))
    v1.create_namespaced_pod(namespace, pod("burst", "100m"))
    async with running(apiserver, "resourcequota"):
        v1.create_namespaced_resource_quota(
            namespace, {"metadata": {"name": "be"}, "spec": {"hard": {"pods": "5"}, "scopes": ["BestEffort"]}}
        )
        v1.create_namespaced_resource_quota(
            namespace,
            {
                "metadata": {"name": "nbe"},
                "spec": {"hard": {"pods": "5", "limits.cpu": "1"}, "scopes": ["NotBestEffort"]},
            },
        )
        await settled(v1, namespace, {"pods": "1"}, "be")
        await settled(v1, namespace, {"pods": "1", "limits.cpu": "100m"}, "nbe")


async def test_parallel_creates_end_exact_and_recount_agrees(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str
) -> None:
    async with running(apiserver, "resourcequota", resourcequota_sync_period=1.0) as manager:
        (controller,) = await eventually(
            lambda: [c for c in manager.controllers if c.name == "resourcequota"], what="the controller"
        )
        v1.create_namespaced_resource_quota(
            namespace, {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "5"}}}
        )
        await settled(v1, namespace, {"pods": "0"})

        def create(i: int) -> int:
            with apiserver.api_client() as api_client:
                try:
                    client.CoreV1Api(api_client).create_namespaced_pod(namespace, pod(f"p{i}"))
                    return 201
                except ApiException as err:
                    return err.status

        with ThreadPoolExecutor(20) as pool:
            codes = await asyncio.to_thread(lambda: list(pool.map(create, range(20))))
        assert codes.count(201) == 5 and codes.count(403) == 15, codes
        assert len(v1.list_namespaced_pod(namespace).items) == 5
        assert quota_used(v1, namespace) == {"pods": "5"}
        # The controller's recounts (a full resync every second here) keep agreeing with the real count.
        before = controller.syncs
        await eventually(lambda: controller.syncs >= before + 2, what="two resync passes")
        assert quota_used(v1, namespace) == {"pods": str(len(v1.list_namespaced_pod(namespace).items))}
        # Delete two, create in parallel again: exactly two more get in.
        for name in [p.metadata.name for p in v1.list_namespaced_pod(namespace).items][:2]:
            v1.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        await settled(v1, namespace, {"pods": "3"})
        with ThreadPoolExecutor(20) as pool:
            codes = await asyncio.to_thread(lambda: list(pool.map(create, range(20, 40))))
        assert codes.count(201) == 2, codes
        assert len(v1.list_namespaced_pod(namespace).items) == 5
        await settled(v1, namespace, {"pods": "5"})


async def test_creates_racing_deletes_stay_within_hard(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str
) -> None:
    """Deletions make the controller recount while parallel creates are being charged: the recount
    confirms any release with a live list, so no share is handed out twice."""
    async with running(apiserver, "resourcequota"):
        v1.create_namespaced_resource_quota(
            namespace, {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "5"}}}
        )
        await settled(v1, namespace, {"pods": "0"})

        def create(i: int) -> None:
            with apiserver.api_client() as api_client:
                try:
                    client.CoreV1Api(api_client).create_namespaced_pod(namespace, pod(f"r{i}"))
                except ApiException as err:
                    assert err.status == 403, err.body

        def delete(name: str) -> None:
            with apiserver.api_client() as api_client:
                client.CoreV1Api(api_client).delete_namespaced_pod(name, namespace, grace_period_seconds=0)

        for round_ in range(4):
            names = [p.metadata.name for p in v1.list_namespaced_pod(namespace).items]
            with ThreadPoolExecutor(16) as pool:
                jobs = [pool.submit(delete, n) for n in names[:2]]
                jobs += [pool.submit(create, round_ * 100 + i) for i in range(12)]
                await asyncio.to_thread(lambda jobs=jobs: [j.result() for j in jobs])
            count = len(v1.list_namespaced_pod(namespace).items)
            assert count <= 5, f"round {round_}: {count} pods under pods=5"
            await eventually(
                lambda: (
                    quota_used(v1, namespace) == {"pods": str(len(v1.list_namespaced_pod(namespace).items))}
                ),
                what="used == the real count",
            )


async def test_an_under_count_heals_at_the_next_counted_object(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str
) -> None:
    """Admission charges a quota before it stores the object, so a recount listing in between finds
    the object missing and writes usage one short. The next counted object to arrive recounts (no
    waiting for the five-minute resync): here the short count is written by hand, then one pod is
    created and used is the real count again."""
    async with running(apiserver, "resourcequota"):
        v1.create_namespaced_resource_quota(
            namespace, {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "5"}}}
        )
        await settled(v1, namespace, {"pods": "0"})
        for i in range(3):
            v1.create_namespaced_pod(namespace, pod(f"p{i}"))
        await settled(v1, namespace, {"pods": "3"})
        # (Not read back: a recount the pods' arrival queued may already be putting it right.)
        v1.patch_namespaced_resource_quota_status("q", namespace, {"status": {"used": {"pods": "2"}}})
        v1.create_namespaced_pod(namespace, pod("p3"))  # charged: 3 (without a recount), while 4 exist
        await settled(v1, namespace, {"pods": "4"})
