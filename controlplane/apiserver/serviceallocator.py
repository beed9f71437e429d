"""Service cluster IPs and node ports handed out through the store, so that every API server replica on
the same etcd sees the same allocations.

Each value taken is a key of its own under its range's record (`/ranges/serviceips/10.96.0.11`,
`/ranges/servicenodeports/30001`) holding its owner (the Service's uid and namespace/name, and when it
was taken), so that taking a value is one create (a lost race is a KeyExistsError: the next value), a
release is a delete at the revision read (safe to repeat: another owner's entry stays), and neither costs
more with more Services stored. (One record holding every allocation, as upstream's RangeAllocation
bitmap, grew with every Service and made each create re-read and re-write all of them: 53 ms of server
CPU per create at 1 000 Services. Upstream's newer allocator, MultiCIDRServiceAllocator, likewise keeps
one IPAddress object per address.) The range's record itself (kind RangeAllocation, its range) says that
the value keys below it are complete.

A value is taken before the Service is stored and released once the Service no longer holds it (deleted,
changed to ExternalName or ClusterIP, a port dropped), or when the Service's write failed. A missing
record (a store from before the allocator, or a changed range) is rebuilt from the Services in the store
(upstream's repair controller), an older one holding its owners in itself is moved into value keys; a
value whose owner's Service no longer holds it, older than a grace period, is a leak and taken over.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
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

    @classmethod
    def from_json(cls, data: list[Any]) -> Holder:
        """An entry of an older record's owners: [uid, name, at]."""
        return cls(str(data[0]), str(data[1]), float(data[2]))

    def encode(self) -> bytes:
        """A value key's body (an object, as every stored value: the watch cache reads it as one)."""
        return json.dumps({"uid": self.uid, "name": self.name, "at": self.at}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Holder:
        body = json.loads(raw)
        return cls(str(body.get("uid", "")), str(body.get("name", "")), float(body.get("at", 0.0)))


@dataclass
class Record:
    """One range's record as stored (kind RangeAllocation, as upstream's). `owners` is only read: the
    owners an older record held in itself, moved into value keys."""

    range: str
    owners: dict[str, Holder] | None = None

    def encode(self) -> bytes:
        body = {"kind": "RangeAllocation", "apiVersion": "v1", "metadata": {"name": ""}, "range": self.range}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Record:
        body = json.loads(raw)
        owners = body.get("owners")
        held = {str(v): Holder.from_json(h) for v, h in owners.items()} if isinstance(owners, dict) else None
        return cls(str(body.get("range", "")), held)


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
    """One range: take, release and repair, each value a key created or deleted on its own.

    New values are looked for from where this allocator last found one (upstream's bitmap allocator
    starts from a random offset for the same reason: not to walk every taken value on each create), and
    from the range's start after a restart; `size` and `value_at` are the range's values in order."""

    def __init__(
        self,
        store: Store,
        key: str,
        range_text: str,
        size: int,
        value_at: Callable[[int], str],
        held_by: Callable[[Obj], set[str]],
        contains: Callable[[str], bool],
    ) -> None:
        self.store = store
        self.key = key
        self.range_text = range_text
        self.size = size
        self.value_at = value_at
        self.held_by = held_by
        self.contains = contains
        self.next = 0  # the offset the next search for a new value starts at
        self._ready = False  # the record was seen current: value keys are complete
        self._known: set[str] | None = None  # values known to be taken (a hint: the store decides)

    def value_key(self, value: str) -> str:
        return f"{self.key}/{value}"

    async def holders(self) -> dict[str, Holder]:
        """Every value taken, with its holder (for tests and repair)."""
        out: dict[str, Holder] = {}
        prefix, start = self.key + "/", ""
        while True:
            items, _, more = await self.store.list(prefix, start_after=start, limit=500)
            for kv in items:
                out[kv.key[len(prefix) :]] = Holder.decode(kv.value)
            if not more or not items:
                return out
            start = items[-1].key

    async def _ensure(self) -> None:
        """Make the value keys complete: move an older record's owners into them, or rebuild them from
        the Services when the record is missing or names another range; then store the record."""
        if self._ready:
            return
        for _ in range(_RETRIES):
            kv = await self.store.get(self.key)
            record = Record.decode(kv.value) if kv is not None else None
            if record is not None and record.range == self.range_text and record.owners is None:
                self._ready = True
                return
            if record is not None and record.range == self.range_text and record.owners is not None:
                for value, holder in record.owners.items():
                    await self._put(value, holder)
            else:
                await self._rebuild()
            if await self._write_record(kv.mod_revision if kv is not None else 0):
                self._ready = True
                return
        raise ConflictError(self.key, 0, 0)

    async def _rebuild(self) -> None:
        start = ""
        while True:
            items, _, more = await self.store.list(SERVICES_PREFIX, start_after=start, limit=500)
            for kv in items:
                obj = json.loads(kv.value)
                uid = str((obj.get("metadata") or {}).get("uid", ""))
                for value in self.held_by(obj.get("spec") or {}):
                    if self.contains(value):
                        await self._put(value, Holder(uid, kv.key[len(SERVICES_PREFIX) :], 0.0))
            if not more or not items:
                return
            start = items[-1].key

    async def _put(self, value: str, holder: Holder) -> bool:
        """Create the value's key for `holder`; False when it exists."""
        try:
            await self.store.create(self.value_key(value), holder.encode())
        except KeyExistsError:
            return False
        return True

    async def _write_record(self, revision: int) -> bool:
        """Compare-and-swap; False when another writer won (read again)."""
        try:
            if revision:
                await self.store.update(self.key, Record(self.range_text).encode(), revision)
            else:
                await self.store.create(self.key, Record(self.range_text).encode())
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

    async def _take_named(self, value: str, owner: Holder, dry_run: bool) -> bool:
        """Reserve one named value; True when this call created its key. Raises Taken."""
        for _ in range(_RETRIES):
            kv = await self.store.get(self.value_key(value))
            if kv is not None:
                holder = Holder.decode(kv.value)
                if holder.uid == owner.uid:
                    return False
                if not await self._leaked(value, holder):
                    raise Taken(value, holder.name)
                if dry_run:
                    return False
                try:
                    await self.store.delete(self.value_key(value), kv.mod_revision)
                except (ConflictError, NotFoundError):
                    continue
            if dry_run:
                return False
            if await self._put(value, owner):
                return True
        raise ConflictError(self.value_key(value), 0, 0)

    async def _take_fresh(self, count: int, skip: set[str], owner: Holder, dry_run: bool) -> list[str]:
        """`count` values nobody holds, searched from `self.next` round the range. Raises Full.

        The values this process knows to be taken (read once, then kept up to date with its own takes
        and releases) are passed over without a store call, so a restarted server does not try every
        taken value once; the store's create still decides. The knowledge may miss values freed by
        another replica since, so a search that comes up short asks the store of every value once more."""
        if self._known is None:
            self._known = set(await self.holders())
        found: list[str] = []
        for hinted in (True, False):
            start = self.next
            for step in range(self.size):
                if len(found) == count:
                    return found
                offset = (start + step) % self.size
                value = self.value_at(offset)
                if value in skip or value in found or (hinted and value in self._known):
                    continue
                if dry_run:
                    free = await self.store.get(self.value_key(value)) is None
                else:
                    free = await self._put(value, owner)
                if not free:
                    self._known.add(value)
                    continue
                found.append(value)
                self.next = (offset + 1) % self.size
                if not dry_run:
                    self._known.add(value)
            if len(found) == count:
                return found
        if not dry_run:
            await self.release(owner.uid, found)
        raise Full(RANGE_FULL)

    async def take(self, request: Request, dry_run: bool = False) -> list[str]:
        """Reserve the named values and `fresh` new ones for the owner; returns the new ones.
        Raises Taken (the first named value another Service holds) or Full, having taken nothing."""
        if not request.named and request.fresh <= 0:
            return []
        await self._ensure()
        created: list[str] = []
        try:
            for value in request.named:
                if await self._take_named(value, request.owner, dry_run):
                    created.append(value)
                    if self._known is not None:
                        self._known.add(value)
            return await self._take_fresh(request.fresh, set(request.named), request.owner, dry_run)
        except BaseException:
            if created:
                await self.release(request.owner.uid, created)
            raise

    async def release(self, uid: str, values: Iterable[str]) -> None:
        """Give back `values` held by `uid` (others' entries, and values already free, stay)."""
        values = set(values)
        if not values:
            return
        await self._ensure()  # an older record's owners are value keys before any is given back
        for value in values:
            for _ in range(_RETRIES):
                kv = await self.store.get(self.value_key(value))
                if kv is None or Holder.decode(kv.value).uid != uid:
                    break
                try:
                    await self.store.delete(self.value_key(value), kv.mod_revision)
                    if self._known is not None:
                        self._known.discard(value)
                    break
                except NotFoundError:
                    break
                except ConflictError:
                    continue
            else:
                raise ConflictError(self.value_key(value), 0, 0)
