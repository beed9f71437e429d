"""Service cluster IPs and node ports handed out from one record per range in the store, so that every
API server replica on the same etcd sees the same allocations (upstream keeps a bitmap under
/registry/ranges/serviceips and /registry/ranges/servicenodeports and updates it with a
compare-and-swap; we do the same, keeping each value's owner so that a release is safe to repeat).

A value is taken with a write of the record at the revision it was read (a lost race is a retry from
the newer record), before the Service is stored; it is released once the Service no longer holds it
(deleted, changed to ExternalName or ClusterIP, a port dropped), or when the Service's write failed.
A missing record is rebuilt from the Services in the store (upstream's repair controller); a value held
by a record entry whose Service no longer holds it, older than a grace period, is a leak and taken over.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from controlplane.storage import ConflictError, KeyExistsError, NotFoundError
from controlplane.storage.interface import Store

Obj = dict[str, Any]

IPS_KEY = "/ranges/serviceips"
PORTS_KEY = "/ranges/servicenodeports"
SERVICES_PREFIX = "/services/"
_RETRIES = 16
# An entry whose Service does not hold the value is a leak only after this long (the Service may be
# about to be written by the replica that took the value).
LEAK_GRACE_SECONDS = 60.0

IP_TAKEN = "provided IP is already allocated"
PORT_TAKEN = "provided port is already allocated"
RANGE_FULL = "range is full"


class Taken(Exception):
    """A requested value another Service holds."""

    def __init__(self, value: str, owner: str) -> None:
        super().__init__(value)
        self.value = value
        self.owner = owner


class Full(Exception):
    """No free value is left in the range."""


@dataclass
class Holder:
    """Who holds a value: the Service's uid and namespace/name, and when it was taken."""

    uid: str
    name: str
    at: float

    def to_json(self) -> list[Any]:
        return [self.uid, self.name, self.at]

    @classmethod
    def from_json(cls, data: list[Any]) -> Holder:
        return cls(str(data[0]), str(data[1]), float(data[2]))


@dataclass
class Record:
    """One range's allocation record as stored (kind RangeAllocation, as upstream's)."""

    range: str
    owners: dict[str, Holder] = field(default_factory=dict)

    def encode(self) -> bytes:
        body = {
            "kind": "RangeAllocation",
            "apiVersion": "v1",
            "metadata": {"name": ""},
            "range": self.range,
            "owners": {value: holder.to_json() for value, holder in sorted(self.owners.items())},
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Record:
        body = json.loads(raw)
        owners = {str(v): Holder.from_json(h) for v, h in (body.get("owners") or {}).items()}
        return cls(str(body.get("range", "")), owners)


def service_ips(spec: Obj) -> set[str]:
    """The cluster IPs a stored Service holds."""
    if spec.get("type") == "ExternalName":
        return set()
    ips = [ip for ip in (spec.get("clusterIPs") or [spec.get("clusterIP")]) if ip and ip != "None"]
    return {str(ip) for ip in ips}


def service_ports(spec: Obj) -> set[str]:
    """The node ports (and health check node port) a stored Service holds."""
    ports = {p.get("nodePort") for p in spec.get("ports") or [] if isinstance(p, dict)}
    ports.add(spec.get("healthCheckNodePort"))
    return {str(p) for p in ports if isinstance(p, int) and p}


@dataclass
class Request:
    """What one Service asks of one range: values it names, and how many new ones it needs."""

    owner: Holder
    named: list[str]
    fresh: int = 0


class RangeAllocator:
    """One range's record: take, release and repair, each a compare-and-swap loop on the store."""

    def __init__(
        self,
        store: Store,
        key: str,
        range_text: str,
        candidates: Callable[[], Iterable[str]],
        held_by: Callable[[Obj], set[str]],
        contains: Callable[[str], bool],
    ) -> None:
        self.store = store
        self.key = key
        self.range_text = range_text
        self.candidates = candidates
        self.held_by = held_by
        self.contains = contains

    async def _read(self) -> tuple[Record, int]:
        """The record and its revision (0: missing, rebuilt from the Services in the store)."""
        kv = await self.store.get(self.key)
        if kv is not None:
            record = Record.decode(kv.value)
            if record.range == self.range_text:
                return record, kv.mod_revision
            # The server's range changed: rebuild from the Services, keep the revision for the CAS.
            return await self._rebuild(), kv.mod_revision
        return await self._rebuild(), 0

    async def _rebuild(self) -> Record:
        record = Record(self.range_text)
        for name, obj in await self._services():
            meta = obj.get("metadata") or {}
            for value in self.held_by(obj.get("spec") or {}):
                if self.contains(value) and value not in record.owners:
                    record.owners[value] = Holder(str(meta.get("uid", "")), name, 0.0)
        return record

    async def _services(self) -> list[tuple[str, Obj]]:
        out: list[tuple[str, Obj]] = []
        start = ""
        while True:
            items, _, more = await self.store.list(SERVICES_PREFIX, start_after=start, limit=500)
            for kv in items:
                out.append((kv.key[len(SERVICES_PREFIX) :], json.loads(kv.value)))
            if not more or not items:
                return out
            start = items[-1].key

    async def _write(self, record: Record, revision: int) -> bool:
        """Compare-and-swap; False when another writer won (read again)."""
        try:
            if revision:
                await self.store.update(self.key, record.encode(), revision)
            else:
                await self.store.create(self.key, record.encode())
        except (ConflictError, KeyExistsError, NotFoundError):
            return False
        return True

    async def _leaked(self, value: str, holder: Holder) -> bool:
        """Whether `holder` no longer holds `value` (its Service is gone or moved on)."""
        if time.time() - holder.at < LEAK_GRACE_SECONDS:
            return False
        kv = await self.store.get(SERVICES_PREFIX + holder.name)
        if kv is None:
            return True
        obj = json.loads(kv.value)
        if (obj.get("metadata") or {}).get("uid") != holder.uid:
            return True
        return value not in self.held_by(obj.get("spec") or {})

    async def take(self, request: Request, dry_run: bool = False) -> list[str]:
        """Reserve the named values and `fresh` new ones for the owner; returns the new ones.
        Raises Taken (the first named value another Service holds) or Full."""
        for _ in range(_RETRIES):
            record, revision = await self._read()
            for value in request.named:
                holder = record.owners.get(value)
                if holder is None or holder.uid == request.owner.uid:
                    continue
                if await self._leaked(value, holder):
                    del record.owners[value]
                    continue
                raise Taken(value, holder.name)
            wanted = set(request.named)
            fresh = list(_first_free(self.candidates(), record.owners.keys() | wanted, request.fresh))
            if len(fresh) < request.fresh:
                raise Full(RANGE_FULL)
            changed = False
            for value in [*request.named, *fresh]:
                if value not in record.owners:
                    record.owners[value] = request.owner
                    changed = True
            if dry_run or not changed or await self._write(record, revision):
                return fresh
        raise ConflictError(self.key, 0, 0)

    async def release(self, uid: str, values: Iterable[str]) -> None:
        """Give back `values` held by `uid` (others' entries, and values already free, stay)."""
        values = set(values)
        if not values:
            return
        for _ in range(_RETRIES):
            kv = await self.store.get(self.key)
            if kv is None:
                return  # rebuilt from the Services when next needed
            record = Record.decode(kv.value)
            gone = [v for v in values if v in record.owners and record.owners[v].uid == uid]
            if not gone:
                return
            for value in gone:
                del record.owners[value]
            if await self._write(record, kv.mod_revision):
                return
        raise ConflictError(self.key, 0, 0)


def _first_free(candidates: Iterable[str], used: set[str], count: int) -> Iterator[str]:
    if count <= 0:
        return
    for value in candidates:
        if value not in used:
            yield value
            count -= 1
            if count == 0:
                return
