"""The CSI drivers registered on this node (upstream's csiDrivers store): name -> endpoint, the versions
it speaks and what NodeGetInfo said, with one CSI client per driver."""

from __future__ import annotations

from dataclasses import dataclass, field

from kubeclient.csi.client import CSIClient, NodeInfo


@dataclass
class RegisteredDriver:
    name: str
    endpoint: str
    registration_socket: str
    versions: tuple[str, ...]
    node: NodeInfo
    client: CSIClient = field(repr=False)


class DriverRegistry:
    def __init__(self) -> None:
        self._drivers: dict[str, RegisteredDriver] = {}

    def get(self, name: str) -> RegisteredDriver | None:
        return self._drivers.get(name)

    def names(self) -> list[str]:
        return sorted(self._drivers)

    def by_socket(self, socket: str) -> RegisteredDriver | None:
        return next((d for d in self._drivers.values() if d.registration_socket == socket), None)

    def add(self, driver: RegisteredDriver) -> RegisteredDriver | None:
        """Register (or re-register) `driver`; the one it replaces, whose client the caller closes."""
        old = self._drivers.get(driver.name)
        self._drivers[driver.name] = driver
        return old

    def remove(self, name: str) -> RegisteredDriver | None:
        return self._drivers.pop(name, None)
