"""host-local compatible IP address management on the file system.

Layout (the same as the reference host-local plugin, so tools and operators find what they expect):
`<dataDir>/<network>/<ip>` holds "<containerID>\\r\\n<ifname>", `last_reserved_ip.0` remembers where the
round-robin stopped and `lock` is flock()ed around every change. State lives only on disk, so
allocations survive restarts of the network service, the agent and containerd.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agent.cni import errors
from agent.cni.errors import CniError
from agent.cni.netconf import IPRange

LINE_BREAK = "\r\n"
LAST_RESERVED = "last_reserved_ip.0"
LOCK = "lock"


@dataclass(frozen=True)
class Allocation:
    ip: ipaddress.IPv4Address
    range: IPRange

    @property
    def interface(self) -> ipaddress.IPv4Interface:
        return ipaddress.IPv4Interface(f"{self.ip}/{self.range.subnet.prefixlen}")


class HostLocalStore:
    """One network's allocations; safe across threads and processes thanks to flock."""

    def __init__(self, data_dir: str | os.PathLike[str], network: str) -> None:
        self.dir = Path(data_dir) / network

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the network's lock file; each call opens its own file description so flock
        also serialises threads of one process."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o755)
            fd = os.open(self.dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise CniError(errors.IO_FAILURE, "cannot open IPAM lock", f"{self.dir}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- reading -------------------------------------------------------------------------------

    def _owner(self, name: str, dir_fd: int | None = None) -> tuple[str, str] | None:
        # os.open/os.read: pathlib's read_bytes costs ~5x more, and DEL/ADD read every IP file
        try:
            if dir_fd is None:
                fd = os.open(os.path.join(self.dir, name), os.O_RDONLY | os.O_CLOEXEC)
            else:
                fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
        except (FileNotFoundError, IsADirectoryError):
            return None
        try:
            text = os.read(fd, 4096).decode(errors="replace")
        finally:
            os.close(fd)
        cid, _, ifname = text.partition(LINE_BREAK)
        return cid.strip(), ifname.strip()

    def _owners(self) -> Iterator[tuple[str, tuple[str, str]]]:
        """(file name, owner) of every file that may be an allocation, names not parsed: ADD reads all
        of them on every call, and parsing each name as an address cost more than reading the file."""
        try:
            dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            for name in os.listdir(dir_fd):
                if not name[:1].isdigit():
                    continue  # lock, last_reserved_ip.0, temporary files
                owner = self._owner(name, dir_fd)
                if owner is not None:
                    yield name, owner
        finally:
            os.close(dir_fd)

    @staticmethod
    def _address(name: str) -> ipaddress.IPv4Address | None:
        try:
            return ipaddress.IPv4Address(name)
        except ValueError:
            return None

    def entries(self) -> dict[ipaddress.IPv4Address, tuple[str, str]]:
        """Every allocated IP with its (container id, ifname); files that are not IPs are skipped."""
        out: dict[ipaddress.IPv4Address, tuple[str, str]] = {}
        for name, owner in self._owners():
            ip = self._address(name)
            if ip is not None:
                out[ip] = owner
        return out

    def find(self, container_id: str, ifname: str) -> list[ipaddress.IPv4Address]:
        return sorted(ip for ip, owner in self.entries().items() if owner == (container_id, ifname))

    # -- changing ------------------------------------------------------------------------------

    def allocate(self, container_id: str, ifname: str, ranges: list[IPRange]) -> Allocation:
        """Reserve the next free IP after the last reserved one, wrapping round the range set."""
        with self.locked():
            taken: set[str] = set()  # file names: an address is free when no file has its name
            for name, owner in self._owners():
                if owner == (container_id, ifname) and (ip := self._address(name)) is not None:
                    raise CniError(
                        errors.INTERNAL,
                        "duplicate allocation is not allowed",
                        f"{ip} has been allocated to {container_id}/{ifname}",
                    )
                taken.add(name)
            for ip, rng in self._order(ranges, self._last_reserved()):
                if str(ip) in taken:
                    continue
                if self._reserve(ip, container_id, ifname):
                    self._write_last_reserved(ip)
                    return Allocation(ip, rng)
            raise CniError(
                errors.INTERNAL,
                "no IP addresses available in range set",
                ", ".join(f"{r.start}-{r.end}" for r in ranges),
            )

    @staticmethod
    def _order(
        ranges: list[IPRange], last: ipaddress.IPv4Address | None
    ) -> Iterator[tuple[ipaddress.IPv4Address, IPRange]]:
        """Candidates in host-local's order: after the last reserved IP to the end of the range set,
        then from the start up to and including it; generated lazily."""
        pivot = next((i for i, r in enumerate(ranges) if last is not None and last in r), None)
        if pivot is None:
            for r in ranges:
                for ip in r.iter_from(r.start):
                    yield ip, r
            return
        assert last is not None
        after = ipaddress.IPv4Address(int(last) + 1)
        ordered = ranges[pivot:] + ranges[:pivot]
        for n, r in enumerate(ordered):
            for ip in r.iter_from(after if n == 0 else r.start):
                yield ip, r
        head = ranges[pivot]
        for ip in head.iter_from(head.start):
            if ip > last:
                break
            yield ip, head

    def _reserve(self, ip: ipaddress.IPv4Address, container_id: str, ifname: str) -> bool:
        path = self.dir / str(ip)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return False
        except OSError as exc:
            raise CniError(errors.IO_FAILURE, "cannot write IPAM file", f"{path}: {exc}") from exc
        try:
            os.write(fd, f"{container_id}{LINE_BREAK}{ifname}".encode())
        finally:
            os.close(fd)
        return True

    def _last_reserved(self) -> ipaddress.IPv4Address | None:
        try:
            return ipaddress.IPv4Address((self.dir / LAST_RESERVED).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _write_last_reserved(self, ip: ipaddress.IPv4Address) -> None:
        # written in place like host-local: a torn write only makes the next scan start at the
        # beginning of the range, and a rename would cost a directory update on every ADD. Cut to
        # length after the write rather than emptied before it: ext4 writes back a file emptied by
        # O_TRUNC when it is closed (auto_da_alloc), a disk write on every ADD.
        data = str(ip).encode()
        fd = os.open(self.dir / LAST_RESERVED, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)

    def release(
        self, container_id: str, ifname: str, hint: list[ipaddress.IPv4Address] | None = None
    ) -> list[ipaddress.IPv4Address]:
        """Free every IP held by id + ifname; releasing nothing is not an error (DEL is idempotent).

        `hint` (the addresses of the DEL's prevResult) lets the common case check only those files
        instead of reading every allocation; without a confirmed hint we scan like host-local."""
        with self.locked():
            if hint:
                confirmed = [ip for ip in hint if self._owner(str(ip)) == (container_id, ifname)]
                if confirmed:
                    for ip in confirmed:
                        self._remove(ip)
                    return confirmed
            freed = []
            for ip, owner in self.entries().items():
                if owner == (container_id, ifname):
                    self._remove(ip)
                    freed.append(ip)
            return freed

    def gc(self, valid: set[tuple[str, str]]) -> list[tuple[ipaddress.IPv4Address, str, str]]:
        """Free allocations whose attachment is not in `valid` (CNI 1.1 GC)."""
        with self.locked():
            freed = []
            for ip, owner in self.entries().items():
                if owner not in valid:
                    self._remove(ip)
                    freed.append((ip, *owner))
            return freed

    def _remove(self, ip: ipaddress.IPv4Address) -> None:
        try:
            os.unlink(self.dir / str(ip))
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise CniError(errors.IO_FAILURE, "cannot remove IPAM file", f"{ip}: {exc}") from exc

    def free_count(self, ranges: list[IPRange]) -> int:
        taken = set(self.entries())
        return sum(r.size for r in ranges) - sum(1 for ip in taken if any(ip in r for r in ranges))
