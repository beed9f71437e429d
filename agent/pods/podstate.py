"""What a pod worker knows of its pod between passes (upstream's podSyncStatus): which phase it is in,
the grace period a termination runs with, why container starts failed (the reason cache), and why the
agent itself failed or rejected the pod. Nothing here must survive a restart: CRI and the API rebuild
the rest.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Phase(enum.Enum):
    SYNCING = "syncing"  # the pod should run: converge toward its spec
    TERMINATING = "terminating"  # stop everything of the pod (containers, sidecars, sandbox)
    TERMINATED = "terminated"  # nothing runs: write the final status, release what the pod held
    FINISHED = "finished"  # done; wait for the API object to go, then remove what is left in CRI


@dataclass
class PodState:
    uid: str
    name: str = ""  # namespace/name, for logs
    phase: Phase = Phase.SYNCING
    # The grace period the termination runs with: once set it can only shrink (upstream's
    # status.gracePeriod); None while terminating without one (a pod that finished on its own: each
    # container then gets its own period).
    grace: int | None = None
    waiting: dict[str, tuple[str, str]] = field(
        default_factory=dict
    )  # reason cache: name -> (reason, message)
    failure: tuple[str, str] | None = None  # the agent failed the pod (activeDeadlineSeconds)
    rejection: tuple[str, str] | None = None  # admission refused the pod: (reason, message)
    admitted: bool = False
    orphan: bool = False  # found in CRI for a pod the API does not have

    def could_have_running(self) -> bool:
        return self.phase in (Phase.SYNCING, Phase.TERMINATING)


def effective_grace(
    current: int | None, pod: dict[str, Any] | None, override: int | None = None
) -> tuple[int, bool]:
    """upstream's calculateEffectiveGracePeriod: the pod's deletionGracePeriodSeconds (the API server's
    word), or a shorter override, never longer than the grace already in force; else the spec's
    terminationGracePeriodSeconds; at least 1. Also whether this shortens a grace already in force."""
    grace = current or 0
    overridden = False
    meta = (pod or {}).get("metadata") or {}
    deletion = meta.get("deletionGracePeriodSeconds")
    if deletion is not None and (grace == 0 or int(deletion) < grace):
        grace, overridden = int(deletion), True
    if override is not None and (grace == 0 or override < grace):
        grace, overridden = override, True
    if grace == 0 and not overridden:
        spec_grace = ((pod or {}).get("spec") or {}).get("terminationGracePeriodSeconds")
        if spec_grace is not None:
            grace = int(spec_grace)
    grace = max(grace, 1)
    return grace, bool(current) and current != grace
