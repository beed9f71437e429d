"""policy/v1 PodDisruptionBudget and the pods/eviction subresource against the real server (no
controllers: the test writes the budget's status the disruption controller would write).

Validation with upstream's 422 texts, generation, the status subresource, kubectl's columns; evictions:
201 when the budget allows one (and the decrement with disruptedPods recorded), 429 with upstream's
message and cause when it allows none or its status is behind its spec, 500 for two budgets, pods not
running evicted without a check, the unhealthy-pod policies, dryRun, a policy/v1beta1 body, RBAC."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pykubelet.rig.apiserver import api_client
from tests.controlplane.conftest import Kubectl, message

VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."


def pdb(name: str, selector: dict | None = None, **spec: object) -> dict:
    body: dict = {
        "metadata": {"name": name},
        "spec": {"selector": selector or {"matchLabels": {"app": "web"}}},
    }
    body["spec"].update(spec)
    return body


@pytest.fixture(scope="module")
def policy(api: client.ApiClient) -> client.PolicyV1Api:
    return client.PolicyV1Api(api)


def test_validation(policy: client.PolicyV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        policy.create_namespaced_pod_disruption_budget(
            namespace, pdb("both", minAvailable=1, maxUnavailable=1)
        )
    assert "spec: Invalid value: " in message(err)
    assert message(err).endswith(": minAvailable and maxUnavailable cannot be both set")
    with pytest.raises(ApiException) as err:
        policy.create_namespaced_pod_disruption_budget(namespace, pdb("neg", minAvailable=-1))
    assert message(err) == (
        'PodDisruptionBudget.policy "neg" is invalid: spec.minAvailable: Invalid value: -1: '
        "must be greater than or equal to 0"
    )
    with pytest.raises(ApiException) as err:
        policy.create_namespaced_pod_disruption_budget(namespace, pdb("pct", maxUnavailable="120%"))
    assert message(err) == (
        'PodDisruptionBudget.policy "pct" is invalid: spec.maxUnavailable: Invalid value: "120%": '
        "must not be greater than 100%"
    )
    with pytest.raises(ApiException) as err:
        policy.create_namespaced_pod_disruption_budget(namespace, pdb("word", minAvailable="half"))
    assert message(err).startswith(
        'PodDisruptionBudget.policy "word" is invalid: spec.minAvailable: Invalid value: "half": '
        "a valid percent string must be a numeric string followed by an ending '%'"
    )
    with pytest.raises(ApiException) as err:
        policy.create_namespaced_pod_disruption_budget(
            namespace, pdb("pol", minAvailable=1, unhealthyPodEvictionPolicy="Sometimes")
        )
    assert message(err) == (
        'PodDisruptionBudget.policy "pol" is invalid: spec.unhealthyPodEvictionPolicy: Unsupported value: '
        '"Sometimes": supported values: "AlwaysAllow", "IfHealthyBudget"'
    )
    made = policy.create_namespaced_pod_disruption_budget(
        namespace, pdb("ok", minAvailable="50%", unhealthyPodEvictionPolicy="AlwaysAllow")
    )
    assert made.metadata.generation == 1 and made.spec.min_available == "50%"
    changed = policy.patch_namespaced_pod_disruption_budget(
        "ok", namespace, {"spec": {"minAvailable": None, "maxUnavailable": 1}}
    )
    assert changed.metadata.generation == 2 and changed.spec.max_unavailable == 1
    with pytest.raises(ApiException) as err:
        policy.patch_namespaced_pod_disruption_budget_status(
            "ok", namespace, {"status": {"disruptionsAllowed": -1}}
        )
    assert "status.disruptionsAllowed: Invalid value: -1: must be greater than or equal to 0" in message(err)


def test_status_subresource_and_columns(kubectl: Kubectl, policy: client.PolicyV1Api, namespace: str) -> None:
    body = pdb("web", minAvailable=2)
    body["status"] = {"disruptionsAllowed": 5}
    policy.create_namespaced_pod_disruption_budget(namespace, body)
    policy.create_namespaced_pod_disruption_budget(namespace, pdb("db", maxUnavailable="25%"))
    assert policy.read_namespaced_pod_disruption_budget("web", namespace).status.disruptions_allowed == 0
    set_status(policy, namespace, "web", allowed=3)
    ignored = policy.patch_namespaced_pod_disruption_budget(
        "web", namespace, {"status": {"disruptionsAllowed": 9}}
    )
    assert ignored.status.disruptions_allowed == 3
    lines = kubectl("get", "pdb", "-n", namespace).splitlines()
    assert lines[0].split() == [
        "NAME",
        "MIN",
        "AVAILABLE",
        "MAX",
        "UNAVAILABLE",
        "ALLOWED",
        "DISRUPTIONS",
        "AGE",
    ]
    rows = {line.split()[0]: line.split()[1:4] for line in lines[1:]}
    assert rows == {"web": ["2", "N/A", "3"], "db": ["N/A", "25%", "0"]}


# --- evictions -----------------------------------------------------------------------------------------


def set_status(
    policy: client.PolicyV1Api, namespace: str, name: str, allowed: int, current: int = 2, desired: int = 1
) -> None:
    generation = policy.read_namespaced_pod_disruption_budget(name, namespace).metadata.generation
    policy.patch_namespaced_pod_disruption_budget_status(
        name,
        namespace,
        {
            "status": {
                "disruptionsAllowed": allowed,
                "currentHealthy": current,
                "desiredHealthy": desired,
                "expectedPods": current,
                "observedGeneration": generation,
            }
        },
    )


def running_pod(
    v1: client.CoreV1Api, namespace: str, name: str, ready: bool = True, app: str = "web"
) -> None:
    v1.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    v1.patch_namespaced_pod_status(
        name,
        namespace,
        {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            }
        },
    )


def evict(v1: client.CoreV1Api, namespace: str, name: str, **extra: object) -> object:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    body.update(extra)
    return v1.create_namespaced_pod_eviction(name, namespace, body)


def evict_raw(
    api: client.ApiClient, namespace: str, name: str, body: dict, query: str = ""
) -> tuple[int, dict]:
    answer = api.call_api(
        "POST",
        f"{api.configuration.host}/api/v1/namespaces/{namespace}/pods/{name}/eviction{query}",
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
    )
    answer.read()
    return answer.status, json.loads(answer.data)


def terminating(v1: client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        return v1.read_namespaced_pod(name, namespace).metadata.deletion_timestamp is not None
    except ApiException as err:
        assert err.status == 404
        return True


@pytest.fixture
def ns(v1: client.CoreV1Api, namespace: str) -> Iterator[str]:
    yield namespace


def test_eviction_allowed_decrements_and_records(
    api: client.ApiClient, v1: client.CoreV1Api, policy: client.PolicyV1Api, ns: str
) -> None:
    policy.create_namespaced_pod_disruption_budget(ns, pdb("web", minAvailable=1))
    set_status(policy, ns, "web", allowed=1)
    running_pod(v1, ns, "a")
    running_pod(v1, ns, "b")
    status, body = evict_raw(
        api, ns, "a", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"}}
    )
    assert (status, body) == (
        201,
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"},
    )
    pod = v1.read_namespaced_pod("a", ns)
    assert pod.metadata.deletion_timestamp is not None  # bound: marked for its grace period
    target = next(c for c in pod.status.conditions if c.type == "DisruptionTarget")
    assert (target.status, target.reason, target.message) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )
    budget = policy.read_namespaced_pod_disruption_budget("web", ns).status
    assert budget.disruptions_allowed == 0 and list(budget.disrupted_pods) == ["a"]
    cond = next(c for c in budget.conditions if c.type == "DisruptionAllowed")
    assert (cond.status, cond.reason) == ("False", "InsufficientPods")

    with pytest.raises(ApiException) as err:
        evict(v1, ns, "b")
    assert err.value.status == 429
    status_body = json.loads(err.value.body)
    assert status_body["reason"] == "TooManyRequests" and status_body["message"] == VIOLATES
    assert status_body["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget web needs 1 healthy pods and has 2 currently",
        }
    ]
    assert "Retry-After" not in err.value.headers
    assert not terminating(v1, ns, "b")
    # an already terminating pod goes without a check
    evict(v1, ns, "a")


def test_stale_budget_two_budgets_and_pods_not_running(
    api: client.ApiClient, v1: client.CoreV1Api, policy: client.PolicyV1Api, ns: str
) -> None:
    policy.create_namespaced_pod_disruption_budget(ns, pdb("web", minAvailable=1))
    set_status(policy, ns, "web", allowed=1)
    policy.patch_namespaced_pod_disruption_budget("web", ns, {"spec": {"minAvailable": 2}})
    running_pod(v1, ns, "a")
    with pytest.raises(ApiException) as err:
        evict(v1, ns, "a")
    assert err.value.status == 429 and json.loads(err.value.body)["details"]["causes"][0]["message"] == (
        "The disruption budget web is still being processed by the server."
    )
    assert err.value.headers["Retry-After"] == "10"

    policy.create_namespaced_pod_disruption_budget(ns, pdb("also", maxUnavailable=1))
    status, body = evict_raw(
        api, ns, "a", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"}}
    )
    assert status == 500 and body["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    )
    # a Pending pod has nothing to disrupt: no budget is consulted
    v1.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "p", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    evict(v1, ns, "p")
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_pod("p", ns)
    assert err.value.status == 404


def test_unhealthy_pod_policies(v1: client.CoreV1Api, policy: client.PolicyV1Api, ns: str) -> None:
    policy.create_namespaced_pod_disruption_budget(ns, pdb("web", minAvailable=1))
    set_status(policy, ns, "web", allowed=0, current=1, desired=1)
    running_pod(v1, ns, "sick", ready=False)
    evict(v1, ns, "sick")  # IfHealthyBudget: the budget is met without it, nothing spent
    assert terminating(v1, ns, "sick")
    assert policy.read_namespaced_pod_disruption_budget("web", ns).status.disruptions_allowed == 0

    set_status(policy, ns, "web", allowed=0, current=0, desired=1)
    running_pod(v1, ns, "sick2", ready=False)
    with pytest.raises(ApiException) as err:
        evict(v1, ns, "sick2")
    assert err.value.status == 429
    policy.patch_namespaced_pod_disruption_budget(
        "web", ns, {"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}}
    )
    set_status(policy, ns, "web", allowed=0, current=0, desired=1)
    evict(v1, ns, "sick2")
    assert terminating(v1, ns, "sick2")


def test_dry_run_beta_body_and_bad_requests(
    api: client.ApiClient, v1: client.CoreV1Api, policy: client.PolicyV1Api, ns: str
) -> None:
    policy.create_namespaced_pod_disruption_budget(ns, pdb("web", maxUnavailable=1))
    set_status(policy, ns, "web", allowed=1)
    running_pod(v1, ns, "a")
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"}}
    status, _ = evict_raw(api, ns, "a", body, "?dryRun=All")
    assert status == 201 and not terminating(v1, ns, "a")
    assert policy.read_namespaced_pod_disruption_budget("web", ns).status.disruptions_allowed == 1
    status, _ = evict_raw(api, ns, "a", {**body, "deleteOptions": {"dryRun": ["All"]}})
    assert status == 201 and not terminating(v1, ns, "a")

    status, out = evict_raw(api, ns, "a", {**body, "metadata": {"name": "b"}})
    assert (status, out["message"]) == (400, "name in URL does not match name in Eviction object")
    status, out = evict_raw(api, ns, "nope", {**body, "metadata": {"name": "nope"}})
    assert (status, out["message"]) == (404, 'pods "nope" not found')

    beta = {
        "apiVersion": "policy/v1beta1",
        "kind": "Eviction",
        "metadata": {"name": "a"},
        "deleteOptions": {"gracePeriodSeconds": 5},
    }
    status, _ = evict_raw(api, ns, "a", beta)
    assert status == 201
    assert v1.read_namespaced_pod("a", ns).metadata.deletion_grace_period_seconds == 5


def test_kubectl_discovery_names_policy_v1_eviction(kubectl: Kubectl) -> None:
    """kubectl drain uses the eviction API only when discovery lists pods/eviction as policy/v1 Eviction."""
    resources = json.loads(kubectl("get", "--raw", "/api/v1"))["resources"]
    eviction = next(r for r in resources if r["name"] == "pods/eviction")
    assert (eviction["group"], eviction["version"], eviction["kind"], eviction["verbs"]) == (
        "policy",
        "v1",
        "Eviction",
        ["create"],
    )


def test_kubectl_drain_dry_run_posts_evictions(
    kubectl: Kubectl, v1: client.CoreV1Api, policy: client.PolicyV1Api, ns: str
) -> None:
    """kubectl's own eviction requests (its typed client's encoding) against a budget, as a server dry run:
    the evictions are answered, the pods, the node and the budget stay as they were."""
    node = f"drain-{ns}"
    v1.create_node({"metadata": {"name": node}})
    try:
        policy.create_namespaced_pod_disruption_budget(ns, pdb("web", maxUnavailable=1))
        set_status(policy, ns, "web", allowed=1)
        for name in ("a", "b"):
            v1.create_namespaced_pod(
                ns,
                {
                    "metadata": {"name": name, "labels": {"app": "web"}},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
                },
            )
            v1.patch_namespaced_pod_status(
                name,
                ns,
                {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
            )
        out = kubectl.run(
            "drain",
            node,
            "--dry-run=server",
            "--force",
            "--pod-selector",
            "app=web",
            "--timeout=20s",
            check=False,
        )
        assert out.returncode == 0, out.stderr
        for name in ("a", "b"):  # a dry run spends nothing, so both go through
            assert f"evicting pod {ns}/{name} (server dry run)" in out.stdout
        assert f"node/{node} drained (server dry run)" in out.stdout
        assert not terminating(v1, ns, "a") and not terminating(v1, ns, "b")
        assert not (v1.read_node(node).spec or client.V1NodeSpec()).unschedulable
        assert policy.read_namespaced_pod_disruption_budget("web", ns).status.disruptions_allowed == 1
    finally:
        v1.delete_node(node)


def _varint(n: int) -> bytes:
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([low])
        out += bytes([low | 0x80])


def _field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def test_protobuf_eviction_body_decodes() -> None:
    """kubectl's typed client may post the Eviction as protobuf (runtime.Unknown around policy/v1 Eviction)."""
    from controlplane.apiserver.decoding import decode

    options = _varint(1 << 3) + _varint(5) + _field(5, b"All")  # gracePeriodSeconds 5, dryRun [All]
    eviction = _field(1, _field(1, b"a")) + _field(2, options)
    envelope = b"k8s\x00" + _field(1, _field(1, b"policy/v1") + _field(2, b"Eviction")) + _field(2, eviction)
    assert decode(envelope, "application/vnd.kubernetes.protobuf") == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "a"},
        "deleteOptions": {"gracePeriodSeconds": 5, "dryRun": ["All"]},
    }


def test_rbac_and_node_restriction(apiserver, v1: client.CoreV1Api, ns: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`create` on pods/eviction is what RBAC judges (edit has it, view does not); a node evicts only pods
    bound to itself (NodeRestriction's admitPodEviction)."""
    running_pod(v1, ns, "mine", app="x")  # bound to n1
    v1.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "theirs"},
            "spec": {"nodeName": "n2", "containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    v1.patch_namespaced_pod_status("theirs", ns, {"status": {"phase": "Running"}})
    node = apiserver.client_kubeconfig("system:node:n1", ("system:nodes",), tmp_path / "kubelet.kubeconfig")
    with api_client(node) as api:
        as_node = client.CoreV1Api(api)
        with pytest.raises(ApiException) as err:
            evict(as_node, ns, "theirs")
        assert (
            message(err, 403)
            == 'pods "theirs" is forbidden: node n1 can only evict pods with spec.nodeName set to itself'
        )
        evict(as_node, ns, "mine")
    rbac = client.RbacAuthorizationV1Api(v1.api_client)
    viewer = f"viewer-{ns}"
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": viewer, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )
    with api_client(apiserver.client_kubeconfig(viewer, (), tmp_path / "viewer.kubeconfig")) as api:
        with pytest.raises(ApiException) as err:
            evict(client.CoreV1Api(api), ns, "theirs")
        assert message(err, 403).startswith(
            f'pods "theirs" is forbidden: User "{viewer}" cannot create resource "pods/eviction"'
        )


def test_kubectl_create_pdb(kubectl: Kubectl, policy: client.PolicyV1Api, ns: str) -> None:
    """`kubectl create poddisruptionbudget` (its typed client's encoding)."""
    out = kubectl("create", "pdb", "web", "-n", ns, "--selector=app=web", "--min-available=50%")
    assert out.strip() == "poddisruptionbudget.policy/web created"
    kubectl("create", "pdb", "db", "-n", ns, "--selector=app=db", "--max-unavailable=1")
    web = policy.read_namespaced_pod_disruption_budget("web", ns)
    assert web.spec.min_available == "50%" and web.spec.selector.match_labels == {"app": "web"}
    assert policy.read_namespaced_pod_disruption_budget("db", ns).spec.max_unavailable == 1
    refused = kubectl.run(
        "create", "pdb", "bad", "-n", ns, "--selector=app=x", "--max-unavailable=200%", check=False
    )
    assert refused.returncode != 0
    assert 'spec.maxUnavailable: Invalid value: "200%": must not be greater than 100%' in refused.stderr
