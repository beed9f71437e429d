"""core/v1 Pod (upstream's pkg/registry/core/pod/strategy.go): defaults, what create and update may
change (the status belongs to pods/status; the spec is immutable but for images, tolerations and a few
more), graceful deletion (a bound pod stays, marked, for its grace period until its kubelet deletes it
with gracePeriodSeconds=0), the pods/log stream from the node agent, pods/exec, attach and portforward
(streaming.py), and the pod table."""

from __future__ import annotations

import copy
from typing import Any

from controlplane.apiserver import errors, tables
from controlplane.apiserver.errors import FieldError, forbidden
from controlplane.apiserver.kinds import podspec
from controlplane.apiserver.kinds.base import (
    REFUSE_UNSUPPORTED,
    Kind,
    Proxy,
    SelectableField,
    StatusSubresource,
    Subresource,
    fields,
)
from controlplane.apiserver.kinds.binding import BINDING
from controlplane.apiserver.kinds.eviction import EVICTION
from controlplane.apiserver.meta import age

Obj = dict[str, Any]

_TERMINAL = ("Succeeded", "Failed")
# Added by admission plugins upstream (DefaultTolerationSeconds).
_DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _tolerates_no_execute(toleration: Obj, key: str) -> bool:
    """upstream's DefaultTolerationSeconds test: the pod already tolerates the taint when a toleration
    names its key (or no key at all) with effect NoExecute (or no effect)."""
    return toleration.get("key") in (key, "", None) and toleration.get("effect") in ("NoExecute", "", None)


# What a pod update may change in the spec (upstream ValidatePodUpdate).
_MUTABLE = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates")
_SPEC_UPDATE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


class Log(Subresource):
    """pods/log: checked and streamed from the pod's node agent by the REST layer (kindparts/pods.py)."""

    name = "log"
    kind = "Pod"
    verbs = ("get",)


class EphemeralContainers(Subresource):
    """pods/ephemeralcontainers (upstream's podEphemeralContainersStrategy): an update or patch through it
    changes spec.ephemeralContainers and nothing else; existing ones may not change (validate_update)."""

    name = "ephemeralcontainers"
    whole_object = True

    def merge(self, current: Obj, desired: Obj) -> Obj:
        new = copy.deepcopy(current)
        new["metadata"] = desired.get("metadata") or new["metadata"]
        wanted = (desired.get("spec") or {}).get("ephemeralContainers")
        if wanted:
            new.setdefault("spec", {})["ephemeralContainers"] = wanted
        else:
            (new.get("spec") or {}).pop("ephemeralContainers", None)
        return new


def validate_ephemeral_update(new: Obj, old: Obj) -> list[FieldError]:
    """upstream's ValidatePodEphemeralContainersUpdate: ephemeral containers may be added, never changed
    or removed, each with a name unique in the pod and an image."""
    path = "spec.ephemeralContainers"
    olds = {c.get("name"): c for c in (old.get("spec") or {}).get("ephemeralContainers") or []}
    news = (new.get("spec") or {}).get("ephemeralContainers") or []
    by_name = {c.get("name"): c for c in news if isinstance(c, dict)}
    problems: list[FieldError] = []
    for name, was in olds.items():
        if name not in by_name:
            problems.append(forbidden(path, f'existing ephemeral containers "{name}" may not be removed'))
        elif by_name[name] != was:
            problems.append(forbidden(path, f'existing ephemeral containers "{name}" may not be changed'))
    spec = new.get("spec") or {}
    taken = {c.get("name") for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]}
    for i, c in enumerate(news):
        if not isinstance(c, dict) or c.get("name") in olds:
            continue
        if not c.get("name"):
            problems.append(errors.required(f"{path}[{i}].name"))
        elif c["name"] in taken:
            problems.append(errors.duplicate(f"{path}[{i}].name", c["name"]))
        if not c.get("image"):
            problems.append(errors.required(f"{path}[{i}].image"))
        taken.add(c.get("name"))
    return problems


class _Streaming(Subresource):
    """pods/exec, pods/attach, pods/portforward: upgraded connections streamed to the pod's node agent
    (the REST layer's streaming.py, attached by kindparts/pods.py). GET (WebSocket) and POST (SPDY) both
    connect, authorized as get and create."""

    verbs = ("create", "get")
    connects = True


class Exec(_Streaming):
    name = "exec"
    kind = "PodExecOptions"


class Attach(_Streaming):
    name = "attach"
    kind = "PodAttachOptions"


class PortForward(_Streaming):
    name = "portforward"
    kind = "PodPortForwardOptions"


class Pod(Kind):
    kind = "Pod"
    plural = "pods"
    short_names = ("po",)
    categories = ("all",)
    subresources = (
        StatusSubresource("Pod"),
        BINDING,
        EVICTION,
        Log(),
        EphemeralContainers(),
        Exec(),
        Attach(),
        PortForward(),
        Proxy("PodProxyOptions"),
    )
    schema = "V1Pod"
    type_marks = podspec.TYPE_MARKS
    field_selectors = (
        *fields(
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
        SelectableField("spec.hostNetwork", missing="false"),
        SelectableField("status.podIPs", exposed=False),  # accepted by the conversion, never exposed
        SelectableField("spec.host", "spec.nodeName"),  # old v1 clients' name for spec.nodeName
    )
    field_refusal = REFUSE_UNSUPPORTED
    # DELETE answers with the pod (marked, or as it was), not a Status; it is deleted gracefully.
    return_deleted_object = True
    graceful = True
    columns = (
        tables.NAME,
        tables.column("Ready", desc="The aggregate readiness state of this pod for accepting traffic."),
        tables.column("Status", desc="The aggregate status of the containers in this pod."),
        tables.column(
            "Restarts",
            desc="The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
        ),
        tables.AGE,
        tables.column(
            "IP",
            1,
            desc="IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
        ),
        tables.column("Node", 1, desc="NodeName is a request to schedule this pod onto a specific node."),
        tables.column(
            "Nominated Node",
            1,
            desc="nominatedNodeName is set only when this pod preempts other pods on the node.",
        ),
        tables.column(
            "Readiness Gates",
            1,
            desc="If specified, all readiness gates will be evaluated for pod readiness.",
        ),
    )

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.setdefault("spec", {})
        podspec.default_pod_spec(spec)
        if creating:
            # These come from admission plugins upstream (ServiceAccount, DefaultTolerationSeconds).
            # (A mirror pod may name no account: the ServiceAccount plugin refuses one that does.)
            if "kubernetes.io/config.mirror" not in ((obj.get("metadata") or {}).get("annotations") or {}):
                spec["serviceAccountName"] = (
                    spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
                )
                spec["serviceAccount"] = spec["serviceAccountName"]
            spec.setdefault("enableServiceLinks", True)
            tolerations = spec.setdefault("tolerations", [])
            for key in _DEFAULT_TOLERATIONS:
                if not any(_tolerates_no_execute(t, key) for t in tolerations if isinstance(t, dict)):
                    tolerations.append(
                        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                    )

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = podspec.initial_status(obj.get("spec") or {})

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        super().prepare_for_update(new, old)
        # upstream's podStrategy.PrepareForUpdate: ephemeral containers change only through their
        # subresource; an update of the pod keeps those it has.
        spec = new.get("spec")
        if isinstance(spec, dict):
            kept = (old.get("spec") or {}).get("ephemeralContainers")
            if kept:
                spec["ephemeralContainers"] = kept
            else:
                spec.pop("ephemeralContainers", None)

    def prepare_for_status_update(self, new: Obj, old: Obj) -> None:
        # upstream's podStatusStrategy: "old kubelets corrupt" ownerReferences, so pods/status never
        # touches them (the garbage collector depends on them).
        refs = (old.get("metadata") or {}).get("ownerReferences")
        if refs is None:
            new["metadata"].pop("ownerReferences", None)
        else:
            new["metadata"]["ownerReferences"] = refs
        # The QoS class is set at creation and immutable; a status without it keeps the old one.
        status = new.setdefault("status", {})
        if (
            isinstance(status, dict)
            and not status.get("qosClass")
            and (old.get("status") or {}).get("qosClass")
        ):
            status["qosClass"] = old["status"]["qosClass"]

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return podspec.validate_pod_spec(obj.get("spec"))

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        if subresource == "ephemeralcontainers":
            return validate_ephemeral_update(new, old)
        old_spec = dict(old.get("spec") or {})
        new_spec = dict(new.get("spec") or {})
        errors_: list[FieldError] = []
        for group in ("containers", "initContainers"):
            olds, news = old_spec.get(group) or [], new_spec.get(group) or []
            if group in old_spec and len(olds) == len(news):
                # Images may change; copy the new ones over the old so the rest can be compared.
                old_spec[group] = [{**o, "image": n.get("image")} for o, n in zip(olds, news, strict=True)]
        old_tolerations = old_spec.get("tolerations") or []
        new_tolerations = new_spec.get("tolerations") or []
        if any(t not in new_tolerations for t in old_tolerations):
            errors_.append(
                forbidden(
                    "spec.tolerations", "existing toleration can not be modified except its tolerationSeconds"
                )
            )
        for key in _MUTABLE:
            old_spec.pop(key, None)
            new_spec.pop(key, None)
        if old_spec != new_spec:
            errors_.append(forbidden("spec", _SPEC_UPDATE))
        return errors_

    def deletion_grace(self, obj: Obj, grace: int | None) -> int:
        """CheckGracefulDelete: the DELETE's grace period, else the pod's terminationGracePeriodSeconds;
        0 for unbound or finished pods."""
        spec = obj.get("spec") or {}
        if not spec.get("nodeName") or (obj.get("status") or {}).get("phase") in _TERMINAL:
            return 0
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        return max(int(grace), 0)

    def cells(self, obj: Obj) -> list[Any]:
        return pod_cells(obj)


def _init_status(spec: Obj, status: Obj) -> tuple[str | None, int, str | None]:
    """The STATUS reason while init containers run (None once they are done), restarts, last restart."""
    restarts = 0
    last_restart = None
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
            reason = "Init:" + (
                t.get("reason")
                or (f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode')}")
            )
        elif (state.get("waiting") or {}).get("reason") not in (None, "", "PodInitializing"):
            reason = "Init:" + state["waiting"]["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        return reason, restarts, last_restart
    return None, restarts, last_restart


def pod_cells(obj: Obj) -> list[Any]:
    """printPod: READY, STATUS (the reason kubectl shows), RESTARTS, and the wide columns."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    meta = obj.get("metadata") or {}
    ready = 0
    reason = status.get("reason") or status.get("phase") or ""
    init_reason, restarts, last_restart = _init_status(spec, status)
    if init_reason is not None:
        reason = init_reason
    else:
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
        restart_text = f"{restarts} ({tables.since(last_restart)} ago)"
    gates = spec.get("readinessGates") or []
    gate_text = "<none>"
    if gates:
        conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        gate_text = f"{sum(1 for g in gates if conds.get(g.get('conditionType')) == 'True')}/{len(gates)}"
    return [
        meta.get("name"),
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        restart_text,
        age(obj),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gate_text,
    ]


KIND = Pod()
