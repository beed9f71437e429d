"""Kubelet admission (agent/pods/admission.py, upstream's canAdmitPod): reasons and messages as upstream
writes them, checks in upstream's order, the pods already admitted counted."""

from __future__ import annotations

import pytest

from agent.pods.admission import admit, pod_requests


def node(cpu="2", memory="4Gi", pods="110", labels=None, taints=None):
    return {
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", **(labels or {})}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "10Gi"}},
    }


def pod(name="p", requests=None, ports=None, **spec):
    container = {"name": "c", "image": "busybox", "resources": {"requests": requests or {}}}
    if ports:
        container["ports"] = ports
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": name},
        "spec": {"nodeName": "n1", "containers": [container], **spec},
    }


def test_fits():
    assert admit(pod(requests={"cpu": "1"}), node(), [pod("a", {"cpu": "500m"})]).admit


@pytest.mark.parametrize(
    ("requests", "others", "reason", "message"),
    [
        (
            {"cpu": "1500m"},
            [{"cpu": "1"}],
            "OutOfcpu",
            "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000",
        ),
        (
            {"memory": "5Gi"},
            [],
            "OutOfmemory",
            "Node didn't have enough resource: memory, requested: 5368709120, used: 0, capacity: 4294967296",
        ),
        (
            {"hugepages-2Mi": "4Mi"},
            [],
            "OutOfhugepages-2Mi",
            "Node didn't have enough resource: hugepages-2Mi, requested: 4194304, used: 0, capacity: 0",
        ),
    ],
)
def test_insufficient_resources(requests, others, reason, message):
    verdict = admit(pod(requests=requests), node(), [pod(f"o{i}", r) for i, r in enumerate(others)])
    assert (verdict.admit, verdict.reason, verdict.message) == (False, reason, message)


def test_max_pods_is_enforced_first():
    verdict = admit(pod(requests={"cpu": "100"}), node(pods="2"), [pod("a"), pod("b")])
    assert (verdict.reason, verdict.message) == (
        "OutOfpods",
        "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2",
    )


def test_node_selector_and_affinity():
    assert admit(pod(nodeSelector={"disk": "ssd"}), node(labels={"disk": "ssd"}), []).admit
    verdict = admit(pod(nodeSelector={"disk": "ssd"}), node(), [])
    assert (verdict.reason, verdict.message) == (
        "NodeAffinity",
        "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
    )
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
    affinity = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    assert admit(pod(affinity=affinity), node(labels={"zone": "b"}), []).admit
    assert not admit(pod(affinity=affinity), node(labels={"zone": "c"}), []).admit
    by_name = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                ]
            }
        }
    }
    assert admit(pod(affinity=by_name), node(), []).admit


def test_host_ports():
    port = [{"containerPort": 80, "hostPort": 8080}]
    verdict = admit(pod(ports=port), node(), [pod("web", ports=port)])
    assert (verdict.reason, verdict.message) == (
        "NodePorts",
        "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports",
    )
    udp = [{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}]
    assert admit(pod(ports=udp), node(), [pod("web", ports=port)]).admit
    ip_a = [{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}]
    ip_b = [{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.2"}]
    assert admit(pod(ports=ip_a), node(), [pod("web", ports=ip_b)]).admit


def test_untolerated_no_execute_taint():
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoExecute"}
    verdict = admit(pod(), node(taints=[taint]), [])
    assert (verdict.reason, verdict.message) == (
        "TaintToleration",
        "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate",
    )
    assert admit(
        pod(tolerations=[{"key": "dedicated", "operator": "Exists"}]), node(taints=[taint]), []
    ).admit
    # Only NoExecute matters to the kubelet: NoSchedule is the scheduler's business.
    assert admit(pod(), node(taints=[{**taint, "effect": "NoSchedule"}]), []).admit


def test_resources_come_before_other_checks():
    verdict = admit(pod(requests={"cpu": "3"}, nodeSelector={"x": "y"}), node(), [])
    assert verdict.reason == "OutOfcpu"


def test_pod_requests_count_init_containers_and_sidecars():
    p = {
        "spec": {
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}},
                {"name": "setup", "resources": {"requests": {"cpu": "1"}}},
            ],
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}}],
            "overhead": {"cpu": "50m"},
        }
    }
    # max(app 500m + sidecar 200m, setup 1000m beside the sidecar 200m) + overhead 50m
    assert pod_requests(p)["cpu"] == 1250


# -- sysctls (upstream's pkg/kubelet/sysctl allowlist, checked before the predicates) ---------------


def with_sysctls(*names, **spec):
    return pod(securityContext={"sysctls": [{"name": n, "value": "1"} for n in names]}, **spec)


def test_safe_sysctls_are_admitted_in_either_spelling():
    assert admit(with_sysctls("kernel.shm_rmid_forced", "net/ipv4/ip_local_port_range"), node(), []).admit


@pytest.mark.parametrize(
    ("names", "spec", "message"),
    [
        (("kernel.msgmax",), {}, 'forbidden sysctl: "kernel.msgmax" not allowlisted'),
        (("net.core.somaxconn",), {}, 'forbidden sysctl: "net.core.somaxconn" not allowlisted'),
        (
            ("net.ipv4.tcp_syncookies",),
            {"hostNetwork": True},
            'forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host net enabled',
        ),
    ],
)
def test_unsafe_sysctls_are_forbidden_before_anything_else(names, spec, message):
    # Even a pod that also does not fit the node is refused for its sysctl first.
    verdict = admit(with_sysctls(*names, **spec), node(cpu="0"), [])
    assert (verdict.admit, verdict.reason, verdict.message) == (False, "SysctlForbidden", message)


def test_allowed_unsafe_sysctls_extend_the_safe_set():
    from agent.pods.sysctls import Allowlist

    allow = Allowlist.build(["kernel.msg*", "net.core.somaxconn"])
    assert admit(with_sysctls("kernel.msgmax", "net.core.somaxconn"), node(), [], allow).admit
    verdict = admit(with_sysctls("kernel.sem", "vm.swappiness"), node(), [], allow)
    assert verdict.message == 'forbidden sysctl: "kernel.sem" not allowlisted'
    with pytest.raises(ValueError, match="not known to be namespaced"):
        Allowlist.build(["vm.swappiness"])


def test_kernel_gated_safe_sysctls():
    from agent.pods.sysctls import safe_sysctls

    assert "net.ipv4.tcp_fin_timeout" not in safe_sysctls("4.4.0-generic")
    assert "net.ipv4.tcp_fin_timeout" in safe_sysctls("6.1.0-18-amd64")


async def test_a_label_the_cached_node_lacks_is_checked_against_the_node_read_now():
    """A pod bound right after `kubectl label node` (issue 30): the agent's cached Node has no label yet,
    the scheduler's had it; admission asks the API before refusing, and admits."""
    from agent.pods.manager import PodManager
    from tests.agent.fakeruntime import FakeRuntime, fake_context

    ctx = fake_context(FakeRuntime())
    reads: list[int] = []
    fresh = node(labels={"color": "blue"})

    async def read_now():
        reads.append(1)
        return fresh

    ctx.node = lambda: node()
    ctx.fresh_node = read_now
    manager = PodManager(ctx)
    assert await manager.admit(pod("a", nodeSelector={"color": "blue"})) == (True, "", "")
    assert reads == [1]
    # still refused when the Node read now does not match either, with upstream's reason
    ok, reason, message = await manager.admit(pod("b", nodeSelector={"color": "red"}))
    assert (ok, reason) == (False, "NodeAffinity") and "didn't match Pod's node affinity" in message
    # a refusal the Node's labels cannot turn around asks nothing
    await manager.admit(pod("c", requests={"cpu": "64"}))
    assert reads == [1, 1]
