"""What the Job controller reads off a pod, as upstream's job_controller.go and its utils state it: finished
or failed (a pod being deleted counts as failed unless the Job only replaces Failed pods), its completion
index, when it finished, and the pod a Job makes from its template (the tracking finalizer, the index
annotation, label, hostname and JOB_COMPLETION_INDEX env of Indexed Jobs)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

from controlplane.controllers import podutil
from controlplane.controllers.podcontrol import pod_from_template

Obj = dict[str, Any]

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
INDEX_LABEL = INDEX_ANNOTATION
INDEX_ENV = "JOB_COMPLETION_INDEX"
INDEX_FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"


def phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase", "")


def deleting(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def has_finalizer(pod: Obj) -> bool:
    return TRACKING_FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or [])


def only_replace_failed(job: Obj) -> bool:
    spec = job.get("spec") or {}
    return spec.get("podReplacementPolicy") == "Failed" or bool(spec.get("podFailurePolicy"))


def is_failed(pod: Obj, job: Obj) -> bool:
    """isPodFailed: Failed, or (unless only Failed pods are replaced) deleted before it succeeded."""
    if phase(pod) == "Failed":
        return True
    if only_replace_failed(job):
        return False
    return deleting(pod) and phase(pod) != "Succeeded"


def is_finished(pod: Obj, job: Obj) -> bool:
    return phase(pod) == "Succeeded" or is_failed(pod, job)


def is_active(pod: Obj) -> bool:
    return phase(pod) not in ("Succeeded", "Failed") and not deleting(pod)


def is_terminating(pod: Obj) -> bool:
    return deleting(pod) and phase(pod) not in ("Succeeded", "Failed")


def index_of(pod: Obj, completions: int) -> int | None:
    """getCompletionIndex: the annotation's index (the label's as fallback), None when out of range."""
    meta = pod.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(INDEX_ANNOTATION, (meta.get("labels") or {}).get(INDEX_LABEL))
    try:
        index = int(raw)
    except (TypeError, ValueError):
        return None
    return index if 0 <= index < completions else None


def finish_time(pod: Obj, default: datetime) -> datetime:
    """When the pod finished (upstream's getFinishedTime): its Ready=False transition once terminal, else
    its containers' latest finishedAt, else its deletion (deletionTimestamp less the grace period),
    else `default`."""
    status = pod.get("status") or {}
    if phase(pod) in ("Succeeded", "Failed"):
        ready = podutil.ready_condition(pod)
        when = (
            podutil.parse_time((ready or {}).get("lastTransitionTime"))
            if (ready or {}).get("status") == "False"
            else None
        )
        if when is not None:
            return when
    latest: datetime | None = None
    for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        when = podutil.parse_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        if when is not None and (latest is None or when > latest):
            latest = when
    if latest is not None:
        return latest
    meta = pod.get("metadata") or {}
    deleted = podutil.parse_time(meta.get("deletionTimestamp"))
    if deleted is not None:
        return deleted - timedelta(seconds=int(meta.get("deletionGracePeriodSeconds") or 0))
    return default


def restarts(pod: Obj) -> int:
    status = pod.get("status") or {}
    return sum(
        int(c.get("restartCount") or 0)
        for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    )


def pod_for(job: Obj, index: int | None, failures: int | None = None) -> Obj:
    """The pod the Job creates (upstream's createPod with the tracking finalizer; for an Indexed Job
    addCompletionIndexAnnotation, the index label, the hostname and addCompletionIndexEnvVariables)."""
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    name = job["metadata"]["name"]
    if index is not None:
        tmeta = template.setdefault("metadata", {})
        tmeta.setdefault("annotations", {})[INDEX_ANNOTATION] = str(index)
        tmeta.setdefault("labels", {})[INDEX_LABEL] = str(index)
        if failures is not None:  # backoffLimitPerIndex: the index's failures so far
            tmeta["annotations"][INDEX_FAILURE_COUNT] = str(failures)
        pod_spec = template.setdefault("spec", {})
        pod_spec["hostname"] = f"{name}-{index}"
        for group in ("initContainers", "containers"):
            for container in pod_spec.get(group) or []:
                env = container.setdefault("env", [])
                if not any(e.get("name") == INDEX_ENV for e in env):
                    env.append(
                        {
                            "name": INDEX_ENV,
                            "valueFrom": {
                                "fieldRef": {
                                    "apiVersion": "v1",
                                    "fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']",
                                }
                            },
                        }
                    )
    pod = pod_from_template(
        template, job, generate_name=f"{name}-{index}-" if index is not None else f"{name}-"
    )
    finalizers = pod["metadata"].setdefault("finalizers", [])
    if TRACKING_FINALIZER not in finalizers:
        finalizers.append(TRACKING_FINALIZER)
    return pod
