"""CheckRequest (upstream's admission/plugin/resourcequota/controller.go), pure: given the namespace's
quotas and one write, either the quotas' new `status.used` or the refusal with upstream's text.

A quota is pertinent when its status.hard names a resource the evaluator charges and its scopes match
the object; each pertinent quota must know its usage (`status unknown for quota`), the object must
declare what a cpu/memory quota tracks (`failed quota: q: must specify ...`), and the charge, the
object's usage (less its previous usage on an update), must keep every limited resource within hard
(`exceeded quota: q, requested: ..., used: ..., limited: ...`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlplane.quota import resources as rl
from controlplane.quota.evaluators import Evaluator

Obj = dict[str, Any]


class QuotaRefused(Exception):
    """The write does not fit; the message is upstream's (it follows `<resource> "<name>" is forbidden: `)."""


@dataclass(frozen=True)
class Write:
    operation: str  # CREATE or UPDATE
    subresource: str
    obj: Obj
    old: Obj | None


def _status(quota: Obj, field: str) -> rl.Resources:
    return rl.parse(((quota.get("status") or {}).get(field)) or {})


def check_request(quotas: list[Obj], write: Write, evaluator: Evaluator) -> list[rl.Resources | None]:
    """For each quota, its new used (None: unchanged); QuotaRefused when the write does not fit."""
    out: list[rl.Resources | None] = [None] * len(quotas)
    interesting: list[int] = []
    for i, quota in enumerate(quotas):
        if not evaluator.matches(quota, write.obj):
            continue
        name = quota["metadata"].get("name", "")
        hard, used = _status(quota, "hard"), _status(quota, "used")
        restricted = evaluator.matching_resources(hard)
        problem = evaluator.constraints(restricted, write.obj)
        if problem:
            raise QuotaRefused(f"failed quota: {name}: {problem}")
        if any(r not in used for r in restricted):
            raise QuotaRefused(f"status unknown for quota: {name}, resources: {','.join(sorted(restricted))}")
        interesting.append(i)
    if not interesting:
        return out
    usage = evaluator.usage(write.obj)
    negative = rl.negative(usage)
    if negative:
        raise QuotaRefused(f"quota usage is negative for resource(s): {','.join(negative)}")
    deltas = dict.fromkeys(interesting, usage)
    old = write.old
    if write.operation == "UPDATE" and old is not None and (old.get("metadata") or {}).get("resourceVersion"):
        delta = rl.subtract_non_negative(usage, evaluator.usage(old))
        for i in interesting:
            if evaluator.matches(quotas[i], old):
                deltas[i] = delta
    for i in interesting:
        delta = rl.remove_zeros(deltas[i])
        if not delta:
            continue
        quota = quotas[i]
        hard, used = _status(quota, "hard"), _status(quota, "used")
        requested = rl.mask(delta, hard)
        new_used = rl.add(used, requested)
        if write.subresource != "status":
            over = rl.exceeded(rl.mask(new_used, requested), hard)
            if over:
                raise QuotaRefused(
                    f"exceeded quota: {quota['metadata'].get('name', '')}, "
                    f"requested: {rl.pretty(rl.mask(requested, over))}, "
                    f"used: {rl.pretty(rl.mask(used, over))}, "
                    f"limited: {rl.pretty(rl.mask(hard, over))}"
                )
        if not rl.equal(new_used, used):
            out[i] = new_used
    return out
