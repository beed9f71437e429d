"""Flushing stale UDP conntrack entries (upstream's pkg/proxy/conntrack, through Debian's `conntrack`
tool): a UDP "connection" has no end, so once an endpoint goes away its entries would keep sending a
client's datagrams to the gone pod, and datagrams sent while a Service had no endpoints would keep
being answered with rejections. After each sync the proxier asks for both to be cleared."""

from __future__ import annotations

import asyncio
import logging
import shutil
from dataclasses import dataclass

log = logging.getLogger("proxy.conntrack")


@dataclass(frozen=True)
class Conntrack:
    netns: str = ""

    def argv(self, *args: str) -> list[str] | None:
        tool = shutil.which("conntrack")
        if tool is None:
            return None
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        return [*prefix, tool, *args]

    async def delete(self, *filters: str) -> None:
        """`conntrack -D <filters>`; finding nothing to delete is no error."""
        argv = self.argv("-D", *filters)
        if argv is None:
            log.warning("conntrack is not installed; stale UDP entries stay filters=%s", " ".join(filters))
            return
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        _, err = await proc.communicate()
        text = err.decode(errors="replace")
        if proc.returncode not in (0, 1) or (proc.returncode == 1 and "0 flow entries" not in text):
            log.warning("conntrack delete failed filters=%s error=%s", " ".join(filters), text.strip())

    async def clear_service(self, cluster_ip: str) -> None:
        await self.delete("-p", "udp", "--orig-dst", cluster_ip)

    async def clear_node_port(self, node_port: int) -> None:
        await self.delete("-p", "udp", "--dport", str(node_port))

    async def clear_nat(self, cluster_ip: str, endpoint_ip: str) -> None:
        await self.delete("-p", "udp", "--orig-dst", cluster_ip, "--dst-nat", endpoint_ip)

    async def clear_port_nat(self, node_port: int, endpoint_ip: str) -> None:
        await self.delete("-p", "udp", "--dport", str(node_port), "--dst-nat", endpoint_ip)
