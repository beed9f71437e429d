"""The host-path driver's storage pools, as csi-driver-host-path simulates them: `--capacity [KIND=]SIZE`
gives a pool of SIZE bytes for the classes whose `kind` parameter is KIND (a bare SIZE is the pool of
classes without one); a volume takes its requested size from its pool until it is deleted. What is left
is what GetCapacity reports and what CreateVolume checks a new volume against. Without `--capacity` no
pool is simulated: GetCapacity reports the largest volume size, as csi-driver-host-path's does.

Each volume's size and pool are recorded in a file of their own (<state>/sizes/<volume_id>), so a
restarted driver counts the volumes it made before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kubeclient.quantity import Quantity, QuantityError

KIND = "kind"  # the class parameter naming a pool (csi-driver-host-path's storageKind)


def parse_capacity(values: list[str]) -> dict[str, int]:
    """`--capacity` values ([KIND=]SIZE, SIZE a quantity such as 10Gi) as pool sizes in bytes by kind;
    ValueError naming a bad one."""
    pools: dict[str, int] = {}
    for value in values:
        kind, _, size = value.rpartition("=")
        try:
            pools[kind] = Quantity.parse(size).value()
        except QuantityError as err:
            raise ValueError(f"--capacity {value!r}: {err}") from None
        if pools[kind] < 0:
            raise ValueError(f"--capacity {value!r}: a size cannot be negative")
    return pools


@dataclass
class Pools:
    totals: dict[str, int]  # bytes by kind; empty: no pool is simulated
    records: Path  # one JSON file per volume: {"size": bytes, "kind": pool}

    def __post_init__(self) -> None:
        self.records.mkdir(parents=True, exist_ok=True)

    @property
    def enabled(self) -> bool:
        return bool(self.totals)

    def _path(self, volume_id: str) -> Path:
        return self.records / volume_id

    def has(self, volume_id: str) -> bool:
        return self._path(volume_id).exists()

    def record(self, volume_id: str, size: int, kind: str) -> None:
        path, scratch = self._path(volume_id), self.records / f".{volume_id}"  # no volume id starts with "."
        scratch.write_text(json.dumps({"size": size, "kind": kind}))
        scratch.replace(path)

    def resize(self, volume_id: str, size: int) -> None:
        if self.has(volume_id):
            self.record(volume_id, size, self._read(volume_id)["kind"])

    def forget(self, volume_id: str) -> None:
        self._path(volume_id).unlink(missing_ok=True)

    def _read(self, volume_id: str) -> dict:
        return json.loads(self._path(volume_id).read_text())

    def used(self, kind: str) -> int:
        records = (json.loads(p.read_text()) for p in self.records.iterdir() if not p.name.startswith("."))
        return sum(r["size"] for r in records if r["kind"] == kind)

    def available(self, kind: str) -> int:
        """What is left of the pool (0 for a kind without one; never negative)."""
        return max(0, self.totals.get(kind, 0) - self.used(kind))

    def kind_with_room(self, size: int) -> str | None:
        """For a volume naming no kind when no pool is for such volumes: the first pool (by name) with
        room for it (csi-driver-host-path's choice)."""
        return next((k for k in sorted(self.totals) if self.available(k) >= size), None)
