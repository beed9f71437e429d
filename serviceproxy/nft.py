"""Running `nft` (and reading its table back) without blocking the event loop: one `nft -f -`
process per transaction, the script on stdin. `netns` runs it inside a named network namespace
(`ip netns exec`), which is how tests keep the host's rules untouched."""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass
from typing import Any

from serviceproxy.ruleset import Existing


class NftError(Exception):
    """nft refused a transaction (nothing of it was applied)."""


@dataclass(frozen=True)
class Nft:
    table: str = "kube-proxy"
    family: str = "ip"
    netns: str = ""

    def argv(self, *args: str) -> list[str]:
        nft = shutil.which("nft") or "/usr/sbin/nft"
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        return [*prefix, nft, *args]

    async def _run(self, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            *self.argv(*args),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
        return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")

    async def apply(self, script: str) -> None:
        """One atomic transaction."""
        code, _, err = await self._run("-f", "-", stdin=script)
        if code != 0:
            raise NftError(err.strip() or f"nft exited {code}")

    async def check(self, script: str) -> None:
        """Whether the kernel would take the transaction (`nft -c`: checked, nothing applied)."""
        code, _, err = await self._run("-c", "-f", "-", stdin=script)
        if code != 0:
            raise NftError(err.strip() or f"nft exited {code}")

    async def table_json(self) -> list[dict[str, Any]] | None:
        """`nft -j list table`'s objects, None when the table does not exist."""
        code, out, err = await self._run("-j", "list", "table", self.family, self.table)
        if code != 0:
            if "No such file" in err or "does not exist" in err:
                return None
            raise NftError(err.strip())
        return json.loads(out).get("nftables", [])

    async def existing(self) -> Existing:
        objects = await self.table_json() or []
        chains = frozenset(o["chain"]["name"] for o in objects if "chain" in o)
        sets = []
        for o in objects:
            for keyword in ("set", "map"):
                if keyword in o:
                    sets.append((o[keyword]["name"], keyword, o[keyword].get("timeout")))
        return Existing(chains, tuple(sets))

    async def listing(self) -> str:
        code, out, err = await self._run("list", "table", self.family, self.table)
        if code != 0:
            raise NftError(err.strip())
        return out

    async def delete_table(self) -> bool:
        """Remove the table (True if it was there)."""
        if await self.table_json() is None:
            return False
        await self.apply(f"delete table {self.family} {self.table}\n")
        return True
