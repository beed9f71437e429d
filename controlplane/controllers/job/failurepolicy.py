"""A Job's podFailurePolicy applied to one failed pod (upstream's pod_failure_policy.go
matchPodFailurePolicy): the rules in order, the first whose onExitCodes (a terminated container's
non-zero exit code, In or NotIn the values) or onPodConditions (a condition of that type and status)
matches decides: FailJob fails the Job at once (reason PodFailurePolicy), Ignore neither counts the pod
nor backs off, Count is the default handling. No rule matching is Count too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

FAIL_JOB, IGNORE, COUNT, FAIL_INDEX = "FailJob", "Ignore", "Count", "FailIndex"
REASON = "PodFailurePolicy"


@dataclass(frozen=True)
class Verdict:
    action: str
    message: str = ""


def _exit_code_match(pod: Obj, requirement: Obj) -> Obj | None:
    status = pod.get("status") or {}
    wanted = requirement.get("containerName")
    values = set(requirement.get("values") or [])
    operator = requirement.get("operator")
    for group in ("containerStatuses", "initContainerStatuses"):
        for c in status.get(group) or []:
            terminated = (c.get("state") or {}).get("terminated")
            if terminated is None or (wanted and wanted != c.get("name")):
                continue
            code = int(terminated.get("exitCode") or 0)
            if code == 0:
                continue
            if (operator == "In" and code in values) or (operator == "NotIn" and code not in values):
                return {"name": c.get("name", ""), "code": code}
    return None


def _condition_match(pod: Obj, patterns: list[Obj]) -> str | None:
    for pattern in patterns:
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == pattern.get("type") and c.get("status") == pattern.get("status", "True"):
                return str(c["type"])
    return None


def evaluate(job: Obj, pod: Obj) -> Verdict | None:
    """The verdict of the Job's podFailurePolicy on a Failed pod, None when the Job has none."""
    policy = (job.get("spec") or {}).get("podFailurePolicy")
    if not policy:
        return None
    meta = pod.get("metadata") or {}
    who = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action", COUNT)
        if rule.get("onExitCodes"):
            found = _exit_code_match(pod, rule["onExitCodes"])
            if found is not None:
                return Verdict(
                    action,
                    f"Container {found['name']} for pod {who} failed with exit code {found['code']} "
                    f"matching {action} rule at index {index}",
                )
        elif rule.get("onPodConditions"):
            kind = _condition_match(pod, rule["onPodConditions"])
            if kind is not None:
                return Verdict(
                    action, f"Pod {who} has condition {kind} matching {action} rule at index {index}"
                )
    return Verdict(COUNT)
