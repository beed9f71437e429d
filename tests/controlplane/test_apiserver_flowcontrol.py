"""API priority and fairness against a real API server: upstream's default FlowSchemas and
PriorityLevelConfigurations are there and come back when deleted, every classified response names its
schema and level in the X-Kubernetes-PF-* headers, requests land in the levels upstream's defaults
choose, a flood from a low-priority identity gets 429s while a system:masters client keeps being
served, a watch holds no seat once started, and kubectl prints the objects with upstream's columns."""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import aiohttp
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e import waiting
from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.conftest import Kubectl

T = TypeVar("T")
FC = "/apis/flowcontrol.apiserver.k8s.io/v1"
SCHEMAS = {
    "exempt": ("exempt", 1),
    "probes": ("exempt", 2),
    "system-leader-election": ("leader-election", 100),
    "endpoint-controller": ("workload-high", 150),
    "workload-leader-election": ("leader-election", 200),
    "system-node-high": ("node-high", 400),
    "system-nodes": ("system", 500),
    "kube-controller-manager": ("workload-high", 800),
    "kube-scheduler": ("workload-high", 800),
    "kube-system-service-accounts": ("workload-high", 900),
    "service-accounts": ("workload-low", 9000),
    "global-default": ("global-default", 9900),
    "catch-all": ("catch-all", 10000),
}
LEVELS = {
    "exempt": None,
    "catch-all": 5,
    "system": 30,
    "node-high": 40,
    "leader-election": 10,
    "workload-high": 40,
    "workload-low": 100,
    "global-default": 20,
}


eventually = functools.partial(waiting.wait_for, timeout=20.0, interval=0.1)


@pytest.fixture(scope="module")
def fc(api: client.ApiClient) -> client.FlowcontrolApiserverV1Api:
    return client.FlowcontrolApiserverV1Api(api)


def admin_context(server: ApiServer) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(server.ca_cert))
    pki = server.data_dir / "pki"
    ctx.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    return ctx


def pf_headers(server: ApiServer, path: str, **headers: str) -> tuple[int, dict[str, str]]:
    """(status, headers) of a GET, as the admin or whom `headers` impersonate."""
    request = urllib.request.Request(server.url + path, headers=headers)
    try:
        with urllib.request.urlopen(request, context=admin_context(server)) as resp:
            return resp.status, dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers)


def uids(fc: client.FlowcontrolApiserverV1Api) -> tuple[dict[str, str], dict[str, str]]:
    schemas = {s.metadata.name: s.metadata.uid for s in fc.list_flow_schema().items}
    levels = {p.metadata.name: p.metadata.uid for p in fc.list_priority_level_configuration().items}
    return schemas, levels


def classified(
    server: ApiServer, fc: client.FlowcontrolApiserverV1Api, path: str, **headers: str
) -> tuple[str, str]:
    """The (schema, level) names the server's headers name for a GET of `path`."""
    _, got = pf_headers(server, path, **headers)
    schemas, levels = uids(fc)
    by_uid_s = {v: k for k, v in schemas.items()}
    by_uid_l = {v: k for k, v in levels.items()}
    return by_uid_s[got["X-Kubernetes-PF-FlowSchema-UID"]], by_uid_l[got["X-Kubernetes-PF-PriorityLevel-UID"]]


def test_upstreams_default_objects_exist(fc: client.FlowcontrolApiserverV1Api) -> None:
    schemas = {s.metadata.name: s for s in fc.list_flow_schema().items}
    for name, (level, precedence) in SCHEMAS.items():
        assert schemas[name].spec.priority_level_configuration.name == level
        assert schemas[name].spec.matching_precedence == precedence
        assert schemas[name].metadata.annotations["apf.kubernetes.io/autoupdate-spec"] == "true"
    levels = {p.metadata.name: p for p in fc.list_priority_level_configuration().items}
    for name, shares in LEVELS.items():
        if shares is None:
            assert levels[name].spec.type == "Exempt"
        else:
            assert levels[name].spec.limited.nominal_concurrency_shares == shares
    assert levels["catch-all"].spec.limited.limit_response.type == "Reject"
    queuing = levels["global-default"].spec.limited.limit_response.queuing
    assert (queuing.queues, queuing.hand_size, queuing.queue_length_limit) == (128, 6, 50)
    # The Dangling condition (kubectl's MISSINGPL) says every default schema's level exists.
    dangling = eventually(
        lambda: all(
            any(c.type == "Dangling" and c.status == "False" for c in (s.status.conditions or []))
            for s in fc.list_flow_schema().items
            if s.metadata.name in SCHEMAS
        ),
        what="Dangling=False on the default schemas",
    )
    assert dangling


def test_mandatory_and_suggested_objects_come_back_when_deleted(fc: client.FlowcontrolApiserverV1Api) -> None:
    for name in ("catch-all", "global-default"):
        old = fc.read_flow_schema(name).metadata.uid
        fc.delete_flow_schema(name)
        back = eventually(
            lambda n=name, o=old: _uid_if_new(fc.read_flow_schema, n, o), what=f"flowschema {name} back"
        )
        assert back != old
    old = fc.read_priority_level_configuration("exempt").metadata.uid
    fc.delete_priority_level_configuration("exempt")
    back = eventually(
        lambda: _uid_if_new(fc.read_priority_level_configuration, "exempt", old), what="the exempt level back"
    )
    assert back != old


def _uid_if_new(read: Callable[[str], Any], name: str, old: str) -> str | None:
    try:
        uid = read(name).metadata.uid
    except ApiException as err:
        assert err.status == 404
        return None
    return uid if uid != old else None


def test_a_mandatory_spec_is_reset_and_a_suggested_one_kept_when_not_autoupdated(
    fc: client.FlowcontrolApiserverV1Api,
) -> None:
    fc.patch_flow_schema("catch-all", {"spec": {"matchingPrecedence": 9999}})
    eventually(
        lambda: fc.read_flow_schema("catch-all").spec.matching_precedence == 10000, what="catch-all reset"
    )
    body = {
        "metadata": {"annotations": {"apf.kubernetes.io/autoupdate-spec": "false"}},
        "spec": {"matchingPrecedence": 9800},
    }
    fc.patch_flow_schema("global-default", body)
    try:
        fc.patch_flow_schema("catch-all", {"metadata": {"labels": {"touched": "yes"}}})  # a maintenance round
        eventually(lambda: fc.read_flow_schema("catch-all").metadata.labels, what="a write seen")
        assert fc.read_flow_schema("global-default").spec.matching_precedence == 9800
    finally:
        restore = {"metadata": {"annotations": {"apf.kubernetes.io/autoupdate-spec": "true"}}}
        fc.patch_flow_schema("global-default", restore)
    eventually(
        lambda: fc.read_flow_schema("global-default").spec.matching_precedence == 9900, what="restored"
    )


def test_every_classified_response_names_its_schema_and_level(
    apiserver: ApiServer, fc: client.FlowcontrolApiserverV1Api
) -> None:
    status, got = pf_headers(apiserver, "/api/v1/namespaces/default")
    schemas, levels = uids(fc)
    assert status == 200
    assert got["X-Kubernetes-PF-FlowSchema-UID"] == schemas["exempt"]
    assert got["X-Kubernetes-PF-PriorityLevel-UID"] == levels["exempt"]
    # A refusal by authorization is classified too (priority and fairness runs before it).
    status, got = pf_headers(apiserver, "/api/v1/secrets", **{"Impersonate-User": "nobody"})
    assert status == 403
    assert got["X-Kubernetes-PF-FlowSchema-UID"] == schemas["global-default"]


def test_requests_land_in_the_levels_upstreams_defaults_choose(
    apiserver: ApiServer, fc: client.FlowcontrolApiserverV1Api
) -> None:
    api = apiserver

    def who(user: str, *groups: str) -> dict[str, str]:
        headers = {"Impersonate-User": user}
        if groups:
            headers["Impersonate-Group"] = groups[0]  # the client sends one value per header
        return headers

    assert classified(api, fc, "/api/v1/namespaces") == ("exempt", "exempt")
    assert classified(api, fc, "/api/v1/namespaces", **who("alice")) == ("global-default", "global-default")
    assert classified(api, fc, "/healthz", **who("alice")) == ("probes", "exempt")
    node = who("system:node:n1", "system:nodes")
    assert classified(api, fc, "/api/v1/nodes/n1", **node) == ("system-node-high", "node-high")
    assert classified(api, fc, "/api/v1/pods", **node) == ("system-nodes", "system")
    kube_system_sa = who("system:serviceaccount:kube-system:foo", "system:serviceaccounts")
    leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x"
    assert classified(api, fc, leases, **kube_system_sa) == ("system-leader-election", "leader-election")
    assert classified(api, fc, "/api/v1/pods", **kube_system_sa) == (
        "kube-system-service-accounts",
        "workload-high",
    )
    other_sa = who("system:serviceaccount:apps:web", "system:serviceaccounts")
    assert classified(api, fc, "/api/v1/pods", **other_sa) == ("service-accounts", "workload-low")
    assert classified(api, fc, "/api/v1/pods", **who("system:kube-scheduler")) == (
        "kube-scheduler",
        "workload-high",
    )


def test_bad_configuration_is_refused_naming_the_field(fc: client.FlowcontrolApiserverV1Api) -> None:
    schema = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": f"t-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "priorityLevelConfiguration": {"name": "global-default"},
            "matchingPrecedence": 20000,
            "rules": [{"subjects": [{"kind": "User", "user": {"name": "x"}}]}],
        },
    }
    with pytest.raises(ApiException) as err:
        fc.create_flow_schema(schema)
    assert err.value.status == 422
    message = json.loads(err.value.body)["message"]
    assert "spec.matchingPrecedence: Invalid value: 20000: must not be greater than 10000" in message
    assert "at least one of resourceRules and nonResourceRules has to be non-empty" in message
    level = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": f"t-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "type": "Limited",
            "limited": {"limitResponse": {"type": "Queue", "queuing": {"queues": 4, "handSize": 8}}},
        },
    }
    with pytest.raises(ApiException) as err:
        fc.create_priority_level_configuration(level)
    assert err.value.status == 422
    assert (
        "spec.limited.limitResponse.queuing.handSize: Invalid value: 8: should not be greater than queues (4)"
        in (json.loads(err.value.body)["message"])
    )


def test_kubectl_prints_upstreams_columns(apiserver: ApiServer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    kubectl = Kubectl(apiserver.kubeconfig, tmp_path)
    lines = kubectl("get", "flowschemas").splitlines()
    assert lines[0].split() == [
        "NAME",
        "PRIORITYLEVEL",
        "MATCHINGPRECEDENCE",
        "DISTINGUISHERMETHOD",
        "AGE",
        "MISSINGPL",
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["exempt"][1:4] == ["exempt", "1", "<none>"]
    assert rows["kube-scheduler"][1:4] == ["workload-high", "800", "ByNamespace"]
    lines = kubectl("get", "prioritylevelconfigurations").splitlines()
    assert lines[0].split() == [
        "NAME",
        "TYPE",
        "NOMINALCONCURRENCYSHARES",
        "QUEUES",
        "HANDSIZE",
        "QUEUELENGTHLIMIT",
        "AGE",
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["exempt"][1:6] == ["Exempt", "<none>", "<none>", "<none>", "<none>"]
    assert rows["leader-election"][1:6] == ["Limited", "10", "16", "4", "50"]


# --- a flood from a low-priority identity ----------------------------------------------------------


@pytest.fixture
def tiny_level(fc: client.FlowcontrolApiserverV1Api, api: client.ApiClient) -> Iterator[dict[str, str]]:
    """A level of one share (3 of the server's 600 seats) refusing what does not fit."""
    yield from _tiny(fc, api, {"type": "Reject"})


@pytest.fixture
def tiny_queued_level(
    fc: client.FlowcontrolApiserverV1Api, api: client.ApiClient
) -> Iterator[dict[str, str]]:
    """A level of 3 seats queuing up to 5 requests in one queue."""
    yield from _tiny(
        fc, api, {"type": "Queue", "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 5}}
    )


def _tiny(
    fc: client.FlowcontrolApiserverV1Api, api: client.ApiClient, response: dict
) -> Iterator[dict[str, str]]:
    """The level, the schema that sends user `flooder-*` there, and RBAC letting the flooder read."""
    tag = uuid.uuid4().hex[:6]
    level, schema, user = f"t-tiny-{tag}", f"t-flood-{tag}", f"flooder-{tag}"
    fc.create_priority_level_configuration(
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": level},
            "spec": {
                "type": "Limited",
                "limited": {"nominalConcurrencyShares": 1, "limitResponse": response},
            },
        }
    )
    created = fc.create_flow_schema(
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": schema},
            "spec": {
                "priorityLevelConfiguration": {"name": level},
                "matchingPrecedence": 50,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": user}}],
                        "resourceRules": [
                            {
                                "verbs": ["*"],
                                "apiGroups": ["*"],
                                "resources": ["*"],
                                "namespaces": ["*"],
                                "clusterScope": True,
                            }
                        ],
                    }
                ],
            },
        }
    )
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=user),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
            ),
            subjects=[client.RbacV1Subject(kind="User", name=user, api_group="rbac.authorization.k8s.io")],
        )
    )
    yield {"user": user, "schema_uid": created.metadata.uid, "level": level, "schema": schema}
    rbac.delete_cluster_role_binding(user)
    fc.delete_flow_schema(schema)
    fc.delete_priority_level_configuration(level)


async def _flood(
    server: ApiServer, namespace: str, user: str, count: int
) -> tuple[list[tuple[int, dict[str, str], str]], list[int]]:
    """`count` concurrent slow LISTs as `user` (each waits the watch cache's 3 s for a resourceVersion
    from the future, holding its seat, as upstream's does), and the admin's GETs while they run."""
    ctx = admin_context(server)
    connector = aiohttp.TCPConnector(ssl=ctx, limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        done = asyncio.Event()

        async def slow_list() -> tuple[int, dict[str, str], str]:
            async with session.get(
                f"{server.url}/api/v1/namespaces/{namespace}/configmaps",
                params={"resourceVersion": "999999999", "resourceVersionMatch": "NotOlderThan"},
                headers={"Impersonate-User": user},
            ) as resp:
                return resp.status, dict(resp.headers), await resp.text()

        async def admin() -> list[int]:
            statuses = []
            while not done.is_set() or not statuses:
                async with session.get(f"{server.url}/api/v1/namespaces/{namespace}") as resp:
                    statuses.append(resp.status)
            return statuses

        watcher = asyncio.create_task(admin())
        results = await asyncio.gather(*(slow_list() for _ in range(count)))
        done.set()
        return list(results), await watcher


def test_a_flood_gets_429s_while_system_masters_is_served(
    apiserver: ApiServer, namespace: str, tiny_level: dict[str, str]
) -> None:
    results, admin = asyncio.run(_flood(apiserver, namespace, tiny_level["user"], 30))
    codes = [r[0] for r in results]
    # Three seats: three LISTs run (and end as the cache's 504 Too large resource version), the rest
    # are refused at once.
    assert codes.count(504) == 3 and codes.count(429) == 27, codes
    status, headers, body = next(r for r in results if r[0] == 429)
    assert body == "Too many requests, please try again later.\n"
    assert int(headers["Retry-After"]) >= 1
    assert headers["X-Kubernetes-PF-FlowSchema-UID"] == tiny_level["schema_uid"]
    # The administrator was served all along, dozens of times while the flood held its seats.
    assert len(admin) > 10 and set(admin) == {200}
    metrics = _get(apiserver, "/metrics")
    level, schema = tiny_level["level"], tiny_level["schema"]
    assert (
        "apiserver_flowcontrol_rejected_requests_total{"
        f'flow_schema="{schema}",priority_level="{level}",reason="concurrency-limit"}} 27.0'
    ) in metrics
    assert (
        f'apiserver_flowcontrol_dispatched_requests_total{{flow_schema="{schema}",priority_level="{level}"}} 3.0'
        in (metrics)
    )
    assert f'apiserver_flowcontrol_nominal_limit_seats{{priority_level="{level}"}} 3.0' in metrics
    dump = _get(apiserver, "/debug/api_priority_and_fairness/dump_priority_levels").splitlines()
    assert dump[0].startswith("PriorityLevelName, ActiveQueues, IsIdle")
    row = next(line for line in dump if line.startswith(level + ","))
    assert [c.strip() for c in row.split(",")][6:8] == ["3", "27"]  # dispatched, rejected


def test_a_queued_level_serves_what_its_queue_holds_and_refuses_the_rest(
    apiserver: ApiServer, namespace: str, tiny_queued_level: dict[str, str]
) -> None:
    results, admin = asyncio.run(_flood(apiserver, namespace, tiny_queued_level["user"], 20))
    codes = [r[0] for r in results]
    # Three run at once, five wait in the queue and run when seats free up, twelve find it full.
    assert codes.count(504) == 8 and codes.count(429) == 12, codes
    metrics = _get(apiserver, "/metrics")
    assert (
        "apiserver_flowcontrol_rejected_requests_total{"
        f'flow_schema="{tiny_queued_level["schema"]}",priority_level="{tiny_queued_level["level"]}",'
        'reason="queue-full"} 12.0'
    ) in metrics
    assert set(admin) == {200}


def _get(server: ApiServer, path: str) -> str:
    with urllib.request.urlopen(server.url + path, context=admin_context(server)) as resp:
        return resp.read().decode()


def test_a_watch_holds_no_seat_once_started(
    apiserver: ApiServer, namespace: str, tiny_level: dict[str, str]
) -> None:
    async def scenario() -> tuple[list[int], int]:
        connector = aiohttp.TCPConnector(ssl=admin_context(apiserver), limit=0)
        headers = {"Impersonate-User": tiny_level["user"]}
        async with aiohttp.ClientSession(connector=connector) as session:
            url = f"{apiserver.url}/api/v1/namespaces/{namespace}/configmaps"
            watches = [await session.get(url, params={"watch": "true"}, headers=headers) for _ in range(6)]
            try:
                # Six open watches on a level of three seats, and the flooder is still served.
                async with session.get(url, headers=headers) as resp:
                    after = resp.status
                # A watch's response is classified like any other.
                assert all(
                    w.headers["X-Kubernetes-PF-FlowSchema-UID"] == tiny_level["schema_uid"] for w in watches
                )
                return [w.status for w in watches], after
            finally:
                for w in watches:
                    w.close()

    statuses, after = asyncio.run(scenario())
    assert statuses == [200] * 6
    assert after == 200
