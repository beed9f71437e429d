"""What one run of a probe or hook handler found, in upstream's terms (pkg/probe: Success, Warning,
Failure, Unknown), so every handler reports the same way and the prober counts them alike."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Result(enum.Enum):
    SUCCESS = "success"
    # Counted as a success, with a note for the event: upstream's probe.Warning (an httpGet redirected to
    # another host, which probes do not follow).
    WARNING = "warning"
    FAILURE = "failure"
    # The probe could not be run at all (bad port name, exec that the runtime refused): upstream's
    # probe.Unknown, reported as "<Kind> probe errored and resulted in unknown state: ..." and thrown away.
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Outcome:
    result: Result
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.result in (Result.SUCCESS, Result.WARNING)


@dataclass(frozen=True)
class Target:
    """Where a handler acts: the pod's IP (the node's for hostNetwork pods), the container CRI runs, and
    the container's named ports so `port: http` resolves as upstream's ResolveContainerPort does."""

    pod_ip: str
    container_id: str
    ports: tuple[tuple[str, int], ...] = ()

    def port(self, value: int | str) -> int:
        """A port given by number or by the name of one of the container's ports; errors read as
        upstream's (a name that is neither a port name nor a number fails its last-ditch Atoi)."""
        port = -1
        if isinstance(value, int):
            port = value
        else:
            port = next((number for name, number in self.ports if name == value), -1)
            if port == -1:
                if not value.strip().lstrip("+-").isdigit():
                    raise ValueError(f'strconv.Atoi: parsing "{value}": invalid syntax')
                port = int(value)
        if 0 < port < 65536:
            return port
        raise ValueError(f"invalid port number: {port}")
