"""Run inside a fresh network and mount namespace (`unshare --net --mount`, see
test_stub_resolvers.py): serve the cluster zone of one ExternalName Service on 127.0.0.1:53, forwarding
to an upstream zone on 127.0.0.2:53 that knows the target, point /etc/resolv.conf at it (a bind mount
only this namespace sees), and print what glibc's stub resolver (`getent ahostsv4`, getaddrinfo) gets
for the Service's name."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

from clusterdns.records import Zone, build
from clusterdns.server import Resolver, serve

SERVICE = {
    "metadata": {"name": "ext", "namespace": "shop"},
    "spec": {"type": "ExternalName", "externalName": "www.example.test"},
}


async def main(name: str) -> int:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "addr", "add", "127.0.0.2/8", "dev", "lo"], check=False)
    with tempfile.TemporaryDirectory() as tmp:
        resolv = Path(tmp, "resolv.conf")
        resolv.write_text("nameserver 127.0.0.1\noptions timeout:2 attempts:1\n")
        subprocess.run(["mount", "--bind", str(resolv), "/etc/resolv.conf"], check=True)
        upstream_zone = Zone("example.test")
        upstream_zone.add("www.example.test", "A", "192.0.2.80")
        upstream = await serve(Resolver(lambda: upstream_zone, []), "127.0.0.2", 53)
        cluster = build([SERVICE], [])
        servers = await serve(Resolver(lambda: cluster, ["127.0.0.2:53"]), "127.0.0.1", 53)
        try:
            done = await asyncio.create_subprocess_exec(
                "getent", "ahostsv4", name, stdout=asyncio.subprocess.PIPE
            )
            out, _ = await done.communicate()
            print(out.decode(), end="")
            return done.returncode or 0
        finally:
            await servers.close()
            await upstream.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
