"""Table output (`as=Table;g=meta.k8s.io;v=v1`) with upstream's columns, so `kubectl get` prints the
same columns and cells against us as against a real cluster. Rows always carry the wide cells; kubectl
hides priority-1 columns unless -o wide.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controlplane.apiserver.meta import age, human_duration, now, parse_time

Obj = dict[str, Any]
Column = tuple[str, str, int, str]  # name, type, priority, description

_NAME: Column = ("Name", "string", 0, "Name must be unique within a namespace.")
_AGE: Column = ("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created.")


def _s(name: str, priority: int = 0, kind: str = "string", desc: str = "") -> Column:
    return (name, kind, priority, desc)


def _since(value: str | None) -> str:
    when = parse_time(value)
    return human_duration(now() - when) if when else "<unknown>"


def format_selector(selector: Obj | None) -> str:
    if not selector:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op = expr.get("operator")
        if op in ("In", "NotIn"):
            parts.append(f"{expr.get('key')} {op.lower()} ({','.join(sorted(expr.get('values') or []))})")
        elif op == "Exists":
            parts.append(expr.get("key", ""))
        else:
            parts.append(f"!{expr.get('key')}")
    return ",".join(parts) or "<none>"


def _pod(obj: Obj) -> list[Any]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    meta = obj.get("metadata") or {}
    containers = spec.get("containers") or []
    restarts = 0
    last_restart = None
    ready = 0
    reason = status.get("reason") or status.get("phase") or ""
    initializing = False
    init_specs = spec.get("initContainers") or []
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        restarts += cs.get("restartCount", 0)
        state = cs.get("state") or {}
        term = (cs.get("lastState") or {}).get("terminated")
        if term and term.get("finishedAt"):
            last_restart = max(last_restart or "", term["finishedAt"])
        if state.get("terminated") and state["terminated"].get("exitCode") == 0:
            continue
        if state.get("terminated"):
            t = state["terminated"]
            reason = "Init:" + (t.get("reason") or (f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode')}"))
        elif (state.get("waiting") or {}).get("reason") not in (None, "", "PodInitializing"):
            reason = "Init:" + state["waiting"]["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    if not initializing:
        restarts = 0
        running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += cs.get("restartCount", 0)
            state = cs.get("state") or {}
            term = (cs.get("lastState") or {}).get("terminated")
            if term and term.get("finishedAt"):
                last_restart = max(last_restart or "", term["finishedAt"])
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif (state.get("terminated") or {}).get("reason"):
                reason = state["terminated"]["reason"]
            elif state.get("terminated"):
                t = state["terminated"]
                reason = f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode')}"
            elif cs.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            pod_ready = any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
            )
            reason = "Running" if pod_ready else "NotReady"
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    restart_text = str(restarts)
    if last_restart and restarts:
        restart_text = f"{restarts} ({_since(last_restart)} ago)"
    gates = spec.get("readinessGates") or []
    gate_text = "<none>"
    if gates:
        conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        gate_text = f"{sum(1 for g in gates if conds.get(g.get('conditionType')) == 'True')}/{len(gates)}"
    return [
        meta.get("name"), f"{ready}/{len(containers)}", reason, restart_text, age(obj),
        status.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>", gate_text,
    ]


def _node(obj: Obj) -> list[Any]:
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
        {k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and k.split("/", 1)[1]}
        | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set())
    )
    addresses = status.get("addresses") or []
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        return next((a.get("address") for a in addresses if a.get("type") == kind), None) or "<none>"

    return [
        obj["metadata"].get("name"), state, ",".join(roles) or "<none>", age(obj), info.get("kubeletVersion", ""),
        address("InternalIP"), address("ExternalIP"), info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>", info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _containers_images(template_spec: Obj) -> tuple[str, str]:
    containers = template_spec.get("containers") or []
    return ",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)


def _deployment(obj: Obj) -> list[Any]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    names, images = _containers_images((spec.get("template") or {}).get("spec") or {})
    return [
        obj["metadata"].get("name"), f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
        status.get("updatedReplicas", 0), status.get("availableReplicas", 0), age(obj),
        names, images, format_selector(spec.get("selector")),
    ]


def _replicaset(obj: Obj) -> list[Any]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    names, images = _containers_images((spec.get("template") or {}).get("spec") or {})
    return [
        obj["metadata"].get("name"), spec.get("replicas", 0), status.get("replicas", 0),
        status.get("readyReplicas", 0), age(obj), names, images, format_selector(spec.get("selector")),
    ]


def _event(obj: Obj) -> list[Any]:
    first = _since(obj.get("firstTimestamp")) if obj.get("firstTimestamp") else _since(obj.get("eventTime"))
    last = _since(obj.get("lastTimestamp")) if obj.get("lastTimestamp") else first
    count = obj.get("count") or 0
    series = obj.get("series")
    if series:
        last = _since(series.get("lastObservedTime"))
        count = series.get("count", 0)
    elif not count:
        count = 1
    involved = obj.get("involvedObject") or {}
    kind = (involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = obj.get("source") or {}
    if source.get("component"):
        src = source["component"] + (f", {source['host']}" if source.get("host") else "")
    else:
        src = obj.get("reportingComponent", "") + (
            f", {obj['reportingInstance']}" if obj.get("reportingInstance") else ""
        )
    return [
        last, obj.get("type", ""), obj.get("reason", ""), target, involved.get("fieldPath", ""), src,
        (obj.get("message") or "").strip(), first, int(count), obj["metadata"].get("name"),
    ]


def _service(obj: Obj) -> list[Any]:
    spec = obj.get("spec") or {}
    kind = spec.get("type", "ClusterIP")
    external = "<none>"
    if kind == "LoadBalancer":
        ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        ips = [i.get("ip") or i.get("hostname") for i in ingress] + (spec.get("externalIPs") or [])
        external = ",".join(ips) if ips else "<pending>"
    elif kind == "ExternalName":
        external = spec.get("externalName", "<none>")
    elif spec.get("externalIPs"):
        external = ",".join(spec["externalIPs"])
    ports = []
    for p in spec.get("ports") or []:
        text = f"{p.get('port')}:{p['nodePort']}" if p.get("nodePort") else str(p.get("port"))
        ports.append(f"{text}/{p.get('protocol', 'TCP')}")
    selector = spec.get("selector")
    sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items())) if selector else "<none>"
    return [
        obj["metadata"].get("name"), kind, spec.get("clusterIP") or "<none>", external,
        ",".join(ports) or "<none>", age(obj), sel,
    ]


def _endpoints(obj: Obj) -> list[Any]:
    pairs = []
    for subset in obj.get("subsets") or []:
        for address in subset.get("addresses") or []:
            for port in subset.get("ports") or [{}]:
                pairs.append(f"{address.get('ip')}:{port['port']}" if port.get("port") else address.get("ip"))
    text = ",".join(pairs[:3]) + (f" + {len(pairs) - 3} more..." if len(pairs) > 3 else "")
    return [obj["metadata"].get("name"), text or "<none>", age(obj)]


COLUMNS: dict[str, tuple[list[Column], Callable[[Obj], list[Any]]]] = {
    "pods": (
        [_NAME, _s("Ready", desc="The aggregate readiness state of this pod for accepting traffic."),
         _s("Status", desc="The aggregate status of the containers in this pod."),
         _s("Restarts", desc="The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
         _AGE, _s("IP", 1, desc="IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."),
         _s("Node", 1, desc="NodeName is a request to schedule this pod onto a specific node."),
         _s("Nominated Node", 1, desc="nominatedNodeName is set only when this pod preempts other pods on the node."),
         _s("Readiness Gates", 1, desc="If specified, all readiness gates will be evaluated for pod readiness.")],
        _pod,
    ),
    "nodes": (
        [_NAME, _s("Status", desc="The status of the node"), _s("Roles", desc="The roles of the node"), _AGE,
         _s("Version", desc="Kubelet Version reported by the node."),
         _s("Internal-IP", 1, desc="List of addresses reachable to the node."),
         _s("External-IP", 1, desc="List of addresses reachable to the node."),
         _s("OS-Image", 1, desc="OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
         _s("Kernel-Version", 1, desc="Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
         _s("Container-Runtime", 1, desc="ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).")],
        _node,
    ),
    "namespaces": (
        [_NAME, _s("Status", desc="The status of the namespace"), _AGE],
        lambda o: [o["metadata"].get("name"), (o.get("status") or {}).get("phase", ""), age(o)],
    ),
    "deployments.apps": (
        [_NAME, _s("Ready", desc="Number of the pod with ready state"),
         _s("Up-to-date", kind="integer", desc="Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
         _s("Available", kind="integer", desc="Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
         _AGE, _s("Containers", 1, desc="Names of each container in the template."),
         _s("Images", 1, desc="Images referenced by each container in the template."),
         _s("Selector", 1, desc="Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.")],
        _deployment,
    ),
    "replicasets.apps": (
        [_NAME, _s("Desired", kind="integer", desc="Replicas is the number of desired pods."),
         _s("Current", kind="integer", desc="Replicas is the most recently observed number of replicas."),
         _s("Ready", kind="integer", desc="The number of ready replicas for this replica set."), _AGE,
         _s("Containers", 1, desc="Names of each container in the template."),
         _s("Images", 1, desc="Images referenced by each container in the template."),
         _s("Selector", 1, desc="Selector is a label query over pods that should match the replica count.")],
        _replicaset,
    ),
    "events": (
        [_s("Last Seen", desc="Time when last event occurred"), _s("Type", desc="Type of this event (Normal, Warning), new types could be added in the future."),
         _s("Reason", desc="This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
         _s("Object", desc="The object that this event is about."), _s("Subobject", 1, desc="The field path of the object."),
         _s("Source", 1, desc="The component reporting this event."),
         _s("Message", desc="A human-readable description of the status of this operation."),
         _s("First Seen", 1, desc="The time at which the event was first recorded."),
         _s("Count", 1, kind="integer", desc="The number of times this event has occurred."),
         _s("Name", 1, desc="Name must be unique within a namespace.")],
        _event,
    ),
    "leases.coordination.k8s.io": (
        [_NAME, _s("Holder", desc="The holder of the lease."), _AGE],
        lambda o: [o["metadata"].get("name"), (o.get("spec") or {}).get("holderIdentity", ""), age(o)],
    ),
    "configmaps": (
        [_NAME, _s("Data", kind="integer", desc="Data contains the configuration data."), _AGE],
        lambda o: [o["metadata"].get("name"), len(o.get("data") or {}) + len(o.get("binaryData") or {}), age(o)],
    ),
    "secrets": (
        [_NAME, _s("Type", desc="Used to facilitate programmatic handling of secret data."),
         _s("Data", kind="integer", desc="Data contains the secret data."), _AGE],
        lambda o: [o["metadata"].get("name"), o.get("type", ""), len(o.get("data") or {}), age(o)],
    ),
    "services": (
        [_NAME, _s("Type", desc="type determines how the Service is exposed."),
         _s("Cluster-IP", desc="clusterIP is the IP address of the service."),
         _s("External-IP", desc="externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service."),
         _s("Port(s)", desc="The list of ports that are exposed by this service."), _AGE,
         _s("Selector", 1, desc="Route service traffic to pods with label keys and values matching this selector.")],
        _service,
    ),
    "endpoints": ([_NAME, _s("Endpoints", desc="Endpoints of the service"), _AGE], _endpoints),
    "serviceaccounts": (
        [_NAME, _s("Secrets", kind="integer", desc="Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use."), _AGE],
        lambda o: [o["metadata"].get("name"), len(o.get("secrets") or []), age(o)],
    ),
}

_DEFAULT: tuple[list[Column], Callable[[Obj], list[Any]]] = (
    [_NAME, ("Created At", "date", 0, "CreationTimestamp is a timestamp representing the server time when this object was created.")],
    lambda o: [o["metadata"].get("name"), o["metadata"].get("creationTimestamp")],
)


def _column_defs(columns: list[Column]) -> list[Obj]:
    out = []
    for name, kind, priority, desc in columns:
        d: Obj = {"name": name, "type": kind, "format": "name" if name == "Name" and priority == 0 else "", "description": desc, "priority": priority}
        out.append(d)
    return out


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


def table(
    bucket: str, objects: list[Obj], include: str = "Metadata", list_meta: Obj | None = None, headers: bool = True
) -> Obj:
    columns, cells = COLUMNS.get(bucket, _DEFAULT)
    rows = []
    for obj in objects:
        row: Obj = {"cells": cells(obj)}
        embedded = _row_object(obj, include)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta or {},
        "columnDefinitions": _column_defs(columns) if headers else [],
        "rows": rows,
    }
