"""core/v1 Node: cluster-scoped, its status written by the node agent (capacity and allocatable are
quantities, stored in canonical form). The NodeRestriction admission plugin (what a node may write of
Nodes, pods, leases and tokens) and TaintNodesByCondition (every new Node starts with the
`node.kubernetes.io/not-ready:NoSchedule` taint, which the node lifecycle controller lifts once the node
is Ready, so nothing is scheduled onto a node before it has said it is ready) come with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.kinds.base import (
    REFUSE_UNSUPPORTED,
    Kind,
    Proxy,
    SelectableField,
    StatusSubresource,
)
from controlplane.apiserver.meta import age
from controlplane.apiserver.nodeauthz.restriction import NodeRestriction
from controlplane.apiserver.validation import nonnegative_quantity

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import AdmissionRequest

Obj = dict[str, Any]
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


class TaintNodesByCondition:
    """Upstream's nodetaint admission plugin: on create, the not-ready NoSchedule taint is added unless
    the node already has one with that key and effect."""

    name = "TaintNodesByCondition"

    def admit(self, request: AdmissionRequest) -> None:
        if request.operation != "CREATE" or request.kind.kind != "Node" or request.subresource:
            return
        spec = request.obj.setdefault("spec", {})
        taints = spec.get("taints") or []
        if not any(
            t.get("key") == NOT_READY_TAINT["key"] and t.get("effect") == NOT_READY_TAINT["effect"]
            for t in taints
        ):
            spec["taints"] = [*taints, dict(NOT_READY_TAINT)]


class Node(Kind):
    kind = "Node"
    plural = "nodes"
    etcd_resource_prefix = "minions"  # upstream's SpecialDefaultResourcePrefixes
    namespaced = False
    short_names = ("no",)
    subresources = (StatusSubresource("Node"), Proxy("NodeProxyOptions"))
    schema = "V1Node"
    type_marks = {
        ("V1NodeStatus", "capacity"): "map[quantity]",
        ("V1NodeStatus", "allocatable"): "map[quantity]",
    }
    field_selectors = (SelectableField("spec.unschedulable", missing="false"),)
    field_meta = ("metadata.name",)
    field_refusal = REFUSE_UNSUPPORTED
    admission = (NodeRestriction(), TaintNodesByCondition())
    columns = (
        tables.NAME,
        tables.column("Status", desc="The status of the node"),
        tables.column("Roles", desc="The roles of the node"),
        tables.AGE,
        tables.column("Version", desc="Kubelet Version reported by the node."),
        tables.column("Internal-IP", 1, desc="List of addresses reachable to the node."),
        tables.column("External-IP", 1, desc="List of addresses reachable to the node."),
        tables.column(
            "OS-Image",
            1,
            desc="OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
        ),
        tables.column(
            "Kernel-Version",
            1,
            desc="Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
        ),
        tables.column(
            "Container-Runtime",
            1,
            desc="ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
        ),
    )

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        errors: list[FieldError] = []
        status = obj.get("status") or {}
        for field in ("capacity", "allocatable"):
            for name, amount in (status.get(field) or {}).items():
                errors += nonnegative_quantity(f"status.{field}[{name}]", amount)
        return errors

    def cells(self, obj: Obj) -> list[Any]:
        status = obj.get("status") or {}
        spec = obj.get("spec") or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        state = "Unknown"
        if ready is not None:
            state = {"True": "Ready", "False": "NotReady"}.get(ready.get("status"), "Unknown")
        if spec.get("unschedulable"):
            state += ",SchedulingDisabled"
        roles = sorted(
            {
                k.split("/", 1)[1]
                for k in labels
                if k.startswith("node-role.kubernetes.io/") and k.split("/", 1)[1]
            }
            | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set())
        )
        addresses = status.get("addresses") or []
        info = status.get("nodeInfo") or {}

        def address(kind: str) -> str:
            return next((a.get("address") for a in addresses if a.get("type") == kind), None) or "<none>"

        return [
            obj["metadata"].get("name"),
            state,
            ",".join(roles) or "<none>",
            age(obj),
            info.get("kubeletVersion", ""),
            address("InternalIP"),
            address("ExternalIP"),
            info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>",
        ]


KIND = Node()
