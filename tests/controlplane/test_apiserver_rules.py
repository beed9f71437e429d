"""Rules upstream's validation enforces that the server once let through (issue 22 item 6): sysctl names,
and ConfigMaps and Secrets marked immutable."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.integration

SYSCTL_REGEX = r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"
FROZEN = "Forbidden: field is immutable when `immutable` is set"


def _pod(name: str, sysctls: list[tuple[str, str]], **spec: object) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="c", image="busybox")],
            security_context=client.V1PodSecurityContext(
                sysctls=[client.V1Sysctl(name=n, value=v) for n, v in sysctls]
            ),
            **spec,
        ),
    )


def _message(err: pytest.ExceptionInfo[ApiException]) -> str:
    assert err.value.status == 422
    return json.loads(err.value.body)["message"]


def test_sysctl_names_are_validated(v1: client.CoreV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, _pod("upper", [("Kernel.SHM_rmid", "1")]))
    assert _message(err) == (
        'Pod "upper" is invalid: spec.securityContext.sysctls[0].name: Invalid value: "Kernel.SHM_rmid": '
        f"must have at most 253 characters and match regex {SYSCTL_REGEX}"
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(
            namespace, _pod("dots", [("net..ipv4", "1"), ("kernel.shmmax", "1"), ("kernel.shmmax", "2")])
        )
    message = _message(err)
    assert 'spec.securityContext.sysctls[0].name: Invalid value: "net..ipv4"' in message
    assert 'spec.securityContext.sysctls[2].name: Duplicate value: "kernel.shmmax"' in message
    # A namespaced sysctl of a namespace the pod shares with its host would change the host's.
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(
            namespace, _pod("hostnet", [("net.ipv4.ip_local_port_range", "1024 65535")], host_network=True)
        )
    assert _message(err) == (
        'Pod "hostnet" is invalid: spec.securityContext.sysctls[0].name: Invalid value: '
        "\"net.ipv4.ip_local_port_range\": may not be specified when 'hostNetwork' is true"
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, _pod("hostipc", [("kernel/shm_rmid_forced", "1")], host_ipc=True))
    assert "may not be specified when 'hostIPC' is true" in _message(err)
    # Well-formed names (dots or slashes) are the node's business: the kubelet decides which it allows.
    ok = v1.create_namespaced_pod(
        namespace, _pod("ok", [("kernel.shm_rmid_forced", "1"), ("net/ipv4/ip_unprivileged_port_start", "0")])
    )
    assert [s.name for s in ok.spec.security_context.sysctls] == [
        "kernel.shm_rmid_forced",
        "net/ipv4/ip_unprivileged_port_start",
    ]


def test_immutable_config_maps_keep_their_data(v1: client.CoreV1Api, namespace: str) -> None:
    v1.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="frozen"),
            data={"a": "1"},
            binary_data={"b": "Yg=="},
            immutable=True,
        ),
    )
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_config_map("frozen", namespace, {"data": {"a": "2"}})
    assert _message(err) == f'ConfigMap "frozen" is invalid: data: {FROZEN}'
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_config_map("frozen", namespace, {"binaryData": {"b": "Yw=="}})
    assert _message(err) == f'ConfigMap "frozen" is invalid: binaryData: {FROZEN}'
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_config_map("frozen", namespace, {"immutable": False})
    assert _message(err) == f'ConfigMap "frozen" is invalid: immutable: {FROZEN}'
    current = v1.read_namespaced_config_map("frozen", namespace)
    current.data = {"a": "3"}
    current.immutable = None
    with pytest.raises(ApiException) as err:
        v1.replace_namespaced_config_map("frozen", namespace, current)
    assert _message(err) == f'ConfigMap "frozen" is invalid: [immutable: {FROZEN}, data: {FROZEN}]'
    # Its metadata may still change, and it may be deleted.
    labelled = v1.patch_namespaced_config_map("frozen", namespace, {"metadata": {"labels": {"x": "y"}}})
    assert labelled.metadata.labels == {"x": "y"} and labelled.data == {"a": "1"}
    v1.delete_namespaced_config_map("frozen", namespace)


def test_immutable_secrets_keep_their_data(v1: client.CoreV1Api, kubectl, namespace: str) -> None:  # type: ignore[no-untyped-def]
    v1.create_namespaced_secret(
        namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="frozen"), data={"a": "MQ=="}, immutable=True),
    )
    bad = kubectl.run(
        "patch", "-n", namespace, "secret", "frozen", "-p", '{"stringData":{"a":"2"}}', check=False
    )
    assert bad.returncode != 0 and f'The Secret "frozen" is invalid: data: {FROZEN}' in bad.stderr
    bad = kubectl.run("patch", "-n", namespace, "secret", "frozen", "-p", '{"immutable":false}', check=False)
    assert bad.returncode != 0 and f"immutable: {FROZEN}" in bad.stderr
    bad = kubectl.run(
        "patch", "-n", namespace, "secret", "frozen", "-p", '{"type":"kubernetes.io/tls"}', check=False
    )
    assert (
        bad.returncode != 0 and 'type: Invalid value: "kubernetes.io/tls": field is immutable' in bad.stderr
    )
    assert v1.read_namespaced_secret("frozen", namespace).data == {"a": "MQ=="}


def test_default_toleration_seconds_as_upstreams_admission_adds_them(
    v1: client.CoreV1Api, namespace: str
) -> None:
    """A pod gets the 300 s NoExecute tolerations for not-ready and unreachable unless it already
    tolerates that taint with NoExecute (or with no effect), by key or with an empty key."""

    def defaults(name: str, tolerations: list[client.V1Toleration]) -> set[tuple[str, int]]:
        pod = v1.create_namespaced_pod(
            namespace,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name=name),
                spec=client.V1PodSpec(
                    containers=[client.V1Container(name="c", image="busybox")], tolerations=tolerations
                ),
            ),
        )
        return {(t.key, t.toleration_seconds) for t in pod.spec.tolerations if t.toleration_seconds == 300}

    both = {("node.kubernetes.io/not-ready", 300), ("node.kubernetes.io/unreachable", 300)}
    assert defaults("plain", []) == both
    # Tolerating the taint for NoSchedule only is not tolerating its NoExecute form.
    assert (
        defaults(
            "noschedule",
            [
                client.V1Toleration(
                    key="node.kubernetes.io/unreachable", operator="Exists", effect="NoSchedule"
                )
            ],
        )
        == both
    )
    # Tolerating everything (empty key and effect) needs no defaults.
    assert defaults("everything", [client.V1Toleration(operator="Exists")]) == set()
    own = client.V1Toleration(
        key="node.kubernetes.io/not-ready", operator="Exists", effect="NoExecute", toleration_seconds=60
    )
    assert defaults("own", [own]) == {("node.kubernetes.io/unreachable", 300)}


def test_status_updates_take_metadata_but_not_the_spec_or_what_the_kind_resets(
    v1: client.CoreV1Api, namespace: str, api: client.ApiClient
) -> None:
    """upstream's status strategies: a /status write may change labels and annotations; a Deployment's
    keeps its labels, a Pod's keeps its ownerReferences; the spec never changes through /status."""
    apps = client.AppsV1Api(api)
    body = {
        "metadata": {"name": "web", "labels": {"tier": "a"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    apps.create_namespaced_deployment(namespace, body)
    d = apps.patch_namespaced_deployment_status(
        "web",
        namespace,
        {
            "metadata": {"annotations": {"deployment.kubernetes.io/revision": "1"}, "labels": {"tier": "b"}},
            "spec": {"replicas": 5},
            "status": {"observedGeneration": 1},
        },
    )
    assert d.metadata.annotations == {"deployment.kubernetes.io/revision": "1"}
    assert d.metadata.labels == {"tier": "a"} and d.spec.replicas == 1 and d.status.observed_generation == 1
    owner = v1.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    v1.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "p", "ownerReferences": [ref]},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    p = v1.patch_namespaced_pod_status(
        "p",
        namespace,
        {
            "metadata": {
                "ownerReferences": [{"$patch": "delete", "uid": owner.metadata.uid}],
                "annotations": {"x": "y"},
            },
            "status": {"phase": "Running"},
        },
    )
    assert [r.uid for r in p.metadata.owner_references] == [owner.metadata.uid]
    assert p.metadata.annotations == {"x": "y"} and p.status.qos_class == "BestEffort"


@pytest.mark.parametrize(
    ("strategy", "extra", "message"),
    [
        (
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}},
            {},
            "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0",
        ),
        (
            {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}},
            {},
            "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'",
        ),
        (
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "oops", "maxUnavailable": 1}},
            {},
            'spec.strategy.rollingUpdate.maxSurge: Invalid value: "oops": a valid percent string must be a numeric string '
            "followed by an ending '%'",
        ),
        (
            {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "150%"}},
            {},
            'spec.strategy.rollingUpdate.maxUnavailable: Invalid value: "150%": must not be greater than 100%',
        ),
        (
            None,
            {"minReadySeconds": 30, "progressDeadlineSeconds": 30},
            "spec.progressDeadlineSeconds: Invalid value: 30: must be greater than minReadySeconds",
        ),
        ({"type": "Sideways"}, {}, 'spec.strategy.type: Unsupported value: "Sideways"'),
    ],
)
def test_deployment_strategy_and_deadlines_are_validated(
    api: client.ApiClient, namespace: str, strategy, extra, message
) -> None:
    spec = {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "web"}},
        **extra,
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
    }
    if strategy is not None:
        spec["strategy"] = strategy
    with pytest.raises(ApiException) as err:
        client.AppsV1Api(api).create_namespaced_deployment(
            namespace, {"metadata": {"name": "bad"}, "spec": spec}
        )
    assert message in _message(err)
