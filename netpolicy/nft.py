"""Writing the agent's table with `nft` without blocking the event loop: one `nft -f -` process per
transaction (atomic: a refused script changes nothing), `-c` to ask whether the kernel would take one,
optionally inside a named network namespace (`ip netns exec`, how the tests keep the host's rules
untouched)."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass

from netpolicy.rules import FAMILY, TABLE


class NftError(Exception):
    """nft refused a transaction."""


@dataclass(frozen=True)
class NftTable:
    table: str = TABLE
    netns: str = ""

    async def _nft(self, *args: str, script: str | None = None) -> tuple[int, str]:
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        proc = await asyncio.create_subprocess_exec(
            *prefix,
            shutil.which("nft") or "/usr/sbin/nft",
            *args,
            stdin=asyncio.subprocess.PIPE if script is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await proc.communicate(script.encode() if script is not None else None)
        return proc.returncode or 0, err.decode(errors="replace").strip()

    async def write(self, script: str, check_only: bool = False) -> None:
        code, err = await self._nft(*(["-c"] if check_only else []), "-f", "-", script=script)
        if code != 0:
            raise NftError(err or f"nft exited {code}")

    async def remove(self) -> bool:
        """Delete the table; True if it was there."""
        code, _ = await self._nft("list", "table", FAMILY, self.table)
        if code != 0:
            return False
        await self.write(f"delete table {FAMILY} {self.table}\n")
        return True
