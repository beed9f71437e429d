"""A container probe's settings with upstream's defaults (pkg/apis/core/v1/defaults.go SetDefaults_Probe),
read once from the pod spec so the worker never re-parses the dict."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Kind(enum.Enum):
    """The three probe kinds; `value` is what upstream prints in events ("Liveness probe failed: ...")."""

    STARTUP = "Startup"
    READINESS = "Readiness"
    LIVENESS = "Liveness"

    @property
    def field(self) -> str:
        return f"{self.name.lower()}Probe"


@dataclass(frozen=True)
class ProbeSpec:
    action: dict[str, Any]  # the handler part: exec, httpGet, tcpSocket or grpc
    initial_delay: int = 0
    period: int = 10
    timeout: int = 1
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace: int | None = None  # probe-level terminationGracePeriodSeconds (liveness/startup)

    @classmethod
    def from_api(cls, probe: dict[str, Any]) -> ProbeSpec:
        def number(key: str, default: int, minimum: int) -> int:
            value = probe.get(key)
            return max(minimum, int(value)) if value is not None else default

        action = {k: probe[k] for k in ("exec", "httpGet", "tcpSocket", "grpc") if probe.get(k) is not None}
        grace = probe.get("terminationGracePeriodSeconds")
        return cls(
            action=action,
            initial_delay=number("initialDelaySeconds", 0, 0),
            period=number("periodSeconds", 10, 1),
            timeout=number("timeoutSeconds", 1, 1),
            success_threshold=number("successThreshold", 1, 1),
            failure_threshold=number("failureThreshold", 3, 1),
            termination_grace=int(grace) if grace is not None else None,
        )


def container_probes(container: dict[str, Any]) -> dict[Kind, ProbeSpec]:
    return {kind: ProbeSpec.from_api(container[kind.field]) for kind in Kind if container.get(kind.field)}
