"""Kubelet admission, as upstream's canAdmitPod with the predicate admit handler
(pkg/kubelet/lifecycle/predicate.go and the scheduler checks it calls, AdmissionCheck): before a pod
starts, it must fit the node, with the pods already admitted here counted. A pod that does not fit
fails (phase Failed, the check's reason, `Pod was rejected: <message>`) instead of starting; pods bound
straight to the node (spec.nodeName, no scheduler) meet the same checks.

Checked in upstream's order, the first failure reported: sysctls (agent/pods/sysctls.py), the pod's kubernetes.io/os label and spec.os,
then resources (pods, cpu, memory, ephemeral-storage, other resources), node affinity and
nodeSelector, the node name, host ports, and taints with effect NoExecute the pod does not tolerate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.pods.spec import app_containers, init_containers, is_sidecar
from agent.pods.sysctls import FORBIDDEN_REASON, Allowlist, forbidden
from kubeclient.nodeaffinity import node_selector_matches
from kubeclient.quantity import QuantityError, milli_value, value

OUT_OF = {
    "cpu": "OutOfcpu",
    "memory": "OutOfmemory",
    "ephemeral-storage": "OutOfephemeral-storage",
    "pods": "OutOfpods",
}
AFFINITY = ("NodeAffinity", "node(s) didn't match Pod's node affinity/selector")
NODE_NAME = ("NodeName", "node(s) didn't match the requested node name")
PORTS = ("NodePorts", "node(s) didn't have free ports for the requested pod ports")
TAINTS = ("TaintToleration", "node(s) had taints that the pod didn't tolerate")


@dataclass(frozen=True)
class Verdict:
    admit: bool
    reason: str = ""
    message: str = ""


def _amount(name: str, text: Any) -> int:
    """cpu in millicores, everything else in units (bytes for memory and storage)."""
    try:
        return milli_value(text) if name == "cpu" else value(text)
    except QuantityError:
        return 0


def _requests(container: dict[str, Any]) -> dict[str, int]:
    reqs = ((container.get("resources") or {}).get("requests")) or {}
    return {name: _amount(name, text) for name, text in reqs.items()}


def _add(into: dict[str, int], more: dict[str, int]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + amount


def pod_requests(pod: dict[str, Any]) -> dict[str, int]:
    """upstream's PodRequests: the app containers and sidecars summed, or the largest need while an init
    container runs (beside the sidecars started before it), whichever is more, plus the pod's overhead."""
    total: dict[str, int] = {}
    for c in app_containers(pod):
        _add(total, _requests(c))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in init_containers(pod):
        need = _requests(c)
        if is_sidecar(c):
            _add(total, need)
            _add(sidecars, need)
            need = dict(sidecars)
        else:
            _add(need, sidecars)
        for name, amount in need.items():
            init_peak[name] = max(init_peak.get(name, 0), amount)
    for name, amount in init_peak.items():
        total[name] = max(total.get(name, 0), amount)
    for name, text in ((pod.get("spec") or {}).get("overhead") or {}).items():
        total[name] = total.get(name, 0) + _amount(name, text)
    return total


def _insufficient(name: str, requested: int, used: int, capacity: int) -> Verdict:
    return Verdict(
        False,
        OUT_OF.get(name, f"OutOf{name}"),
        f"Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}",
    )


def _extended(name: str) -> bool:
    """An extended resource (a domain-prefixed name outside kubernetes.io, requests.* excluded)."""
    return (
        "/" in name
        and not name.startswith("requests.")
        and not (name.split("/", 1)[0] == "kubernetes.io" or name.split("/", 1)[0].endswith(".kubernetes.io"))
    )


def fits_resources(pod: dict[str, Any], node: dict[str, Any], others: list[dict[str, Any]]) -> Verdict | None:
    """upstream's noderesources.Fits, the first shortage."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    allowed = _amount("pods", allocatable.get("pods", 0))
    if len(others) + 1 > allowed:
        return _insufficient("pods", 1, len(others), allowed)
    request = pod_requests(pod)
    used: dict[str, int] = {}
    for other in others:
        _add(used, pod_requests(other))
    standard = ("cpu", "memory", "ephemeral-storage")
    for name in standard:
        want = request.get(name, 0)
        have = _amount(name, allocatable.get(name, 0))
        if want > 0 and want > have - used.get(name, 0):
            return _insufficient(name, want, used.get(name, 0), have)
    for name, want in sorted(request.items()):
        if name in standard or want == 0 or (_extended(name) and name not in allocatable):
            continue
        have = _amount(name, allocatable.get(name, 0))
        if want > have - used.get(name, 0):
            return _insufficient(name, want, used.get(name, 0), have)
    return None


def matches_node_affinity(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution (terms ORed, expressions ANDed)."""
    spec = pod.get("spec") or {}
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    return node_selector_matches(required, meta.get("name", ""), labels)


def _host_ports(pod: dict[str, Any]) -> list[tuple[str, str, int]]:
    out = []
    for c in app_containers(pod):
        for p in c.get("ports") or []:
            if int(p.get("hostPort") or 0) > 0:
                out.append((p.get("protocol") or "TCP", p.get("hostIP") or "0.0.0.0", int(p["hostPort"])))
    return out


def ports_free(pod: dict[str, Any], others: list[dict[str, Any]]) -> bool:
    """No host port of the pod is taken on the node: same protocol and port, and either address is the
    wildcard or both are the same (upstream's HostPortInfo)."""
    used = [port for other in others for port in _host_ports(other)]
    for proto, ip, port in _host_ports(pod):
        for u_proto, u_ip, u_port in used:
            if proto == u_proto and port == u_port and (ip == "0.0.0.0" or u_ip == "0.0.0.0" or ip == u_ip):
                return False
    return True


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """upstream's ToleratesTaint."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_no_execute(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") == "NoExecute" and not any(tolerates(t, taint) for t in tolerations):
            return True
    return False


def _predicate(check: tuple[str, str]) -> Verdict:
    return Verdict(False, check[0], f"Predicate {check[0]} failed: {check[1]}")


_SAFE_ONLY: Allowlist | None = None


def admit(
    pod: dict[str, Any],
    node: dict[str, Any] | None,
    others: list[dict[str, Any]],
    sysctls: Allowlist | None = None,
) -> Verdict:
    """Whether `pod` may start on `node` beside the pods already admitted there (`others`). The sysctl
    allowlist is checked first, as upstream's handler comes before the predicates."""
    global _SAFE_ONLY
    if sysctls is None:
        _SAFE_ONLY = _SAFE_ONLY or Allowlist.build()
        sysctls = _SAFE_ONLY
    refused = forbidden(pod, sysctls)
    if refused is not None:
        return Verdict(False, FORBIDDEN_REASON, refused)
    if node is None:
        return Verdict(False, "InvalidNodeInfo", "Kubelet cannot get node info.")
    pod_os = ((pod.get("metadata") or {}).get("labels") or {}).get("kubernetes.io/os")
    if pod_os is not None and pod_os != "linux":
        return Verdict(
            False,
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
        )
    spec_os = ((pod.get("spec") or {}).get("os") or {}).get("name")
    if spec_os is not None and spec_os != "linux":
        return Verdict(
            False, "PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS"
        )
    shortage = fits_resources(pod, node, others)
    if shortage is not None:
        return shortage
    if not matches_node_affinity(pod, node):
        return _predicate(AFFINITY)
    node_name = (pod.get("spec") or {}).get("nodeName")
    if node_name and node_name != (node.get("metadata") or {}).get("name"):
        return _predicate(NODE_NAME)
    if not ports_free(pod, others):
        return _predicate(PORTS)
    if untolerated_no_execute(pod, node):
        return _predicate(TAINTS)
    return Verdict(True)
