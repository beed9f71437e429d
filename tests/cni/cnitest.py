"""Helpers of the CNI tests: namespaces, the test network, the plugin runner, a service thread.
Everything made here is removed again by its owner's close()/remove()."""

from __future__ import annotations

import ipaddress
import itertools
import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent.cni import nat
from agent.cni.service import BackgroundService

NETNS_DIR = Path("/var/run/netns")
_net_counter = itertools.count(200)


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: creates network namespaces, bridges and nftables rules")


def sh(*argv: str, check: bool = True, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=timeout)


def in_ns(ns: str, *argv: str, check: bool = True, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return sh("ip", "netns", "exec", ns, *argv, check=check, timeout=timeout)


# -- namespaces ---------------------------------------------------------------------------------


class Namespaces:
    """Creates named network namespaces and processes inside them; close() removes all of them."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def new(self) -> str:
        name = f"pkc-{uuid.uuid4().hex[:10]}"
        sh("ip", "netns", "add", name)
        self.names.append(name)
        return name

    def delete(self, name: str) -> None:
        sh("ip", "netns", "del", name, check=False)
        if name in self.names:
            self.names.remove(name)

    def spawn(self, ns: str | None, *argv: str, cwd: str | None = None) -> subprocess.Popen[bytes]:
        cmd = (["ip", "netns", "exec", ns] if ns else []) + list(argv)
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(timeout=10)
        for name in list(self.names):
            self.delete(name)


@dataclass
class PodNetwork:
    """One bridge network on a private range that exists only on the test's own bridge."""

    name: str
    bridge: str
    subnet: ipaddress.IPv4Network
    data_dir: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        return self.subnet.network_address + 1

    def conf(self, **overrides: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "cniVersion": "1.0.0",
            "name": self.name,
            "type": "pykubelet-cni",
            "bridge": self.bridge,
            "isGateway": True,
            "isDefaultGateway": True,
            "ipMasq": False,
            "hairpinMode": True,
            "dataDir": str(self.data_dir),
            "ipam": {"ranges": [[{"subnet": str(self.subnet)}]]},
        }
        conf.update(self.extra)
        conf.update(overrides)
        return conf

    @property
    def ipam_dir(self) -> Path:
        return self.data_dir / self.name

    def ip_files(self) -> list[str]:
        if not self.ipam_dir.is_dir():
            return []
        return sorted(n for n in os.listdir(self.ipam_dir) if n[0].isdigit())

    def bridge_ports(self) -> list[str]:
        out = sh("ip", "-j", "link", "show", "master", self.bridge, check=False)
        return [link["ifname"] for link in json.loads(out.stdout or "[]")] if out.returncode == 0 else []

    def nat_rules(self) -> list[str]:
        """DNAT rules into this network's subnet (their attachment keys)."""
        return [
            k
            for _, k, target in nat.hostport_rules()
            if target and ipaddress.ip_address(target) in self.subnet
        ]

    def remove(self) -> None:
        sh("ip", "link", "del", self.bridge, check=False)
        nat.remove_network(self.subnet)
        shutil.rmtree(self.data_dir, ignore_errors=True)


def new_network(tmp_path: Path) -> PodNetwork:
    n = next(_net_counter)
    if n > 250:
        raise RuntimeError("too many test networks in one session")
    return PodNetwork(
        name=f"pkctest{n}",
        bridge=f"pkcbr{n}",
        subnet=ipaddress.IPv4Network(f"10.244.{n}.0/24"),
        data_dir=tmp_path / f"ipam{n}",
    )


# the tests host the service the way tools do; the agent awaits NetworkService.start() instead
ServiceThread = BackgroundService


class CniFailed(Exception):
    def __init__(self, code: int, error: dict[str, Any], stderr: str) -> None:
        super().__init__(f"CNI error {error} ({stderr.strip()})")
        self.exit_code = code
        self.error = error


@dataclass
class Plugin:
    """Invokes a CNI executable exactly as a runtime does: CNI_* env vars, config on stdin."""

    executable: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    def run(
        self,
        command: str,
        conf: dict[str, Any] | bytes,
        container_id: str = "",
        netns: str = "",
        ifname: str = "eth0",
    ) -> tuple[int, str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": container_id,
            "CNI_NETNS": netns,
            "CNI_IFNAME": ifname,
            "CNI_PATH": str(self.executable.parent),
            **self.extra_env,
        }
        data = conf if isinstance(conf, bytes) else json.dumps(conf).encode()
        proc = subprocess.run([str(self.executable)], input=data, env=env, capture_output=True, timeout=60)
        return proc.returncode, proc.stdout.decode(), proc.stderr.decode()

    def call(
        self,
        command: str,
        conf: dict[str, Any],
        container_id: str = "",
        netns: str = "",
        ifname: str = "eth0",
    ) -> Any:
        code, out, err = self.run(command, conf, container_id, netns, ifname)
        if code != 0:
            try:
                error = json.loads(out)
            except ValueError:
                error = {"raw": out}
            raise CniFailed(code, error, err)
        return json.loads(out) if out.strip() else None

    def add(self, conf: dict[str, Any], container_id: str, ns: str, ifname: str = "eth0") -> Any:
        return self.call("ADD", conf, container_id, str(NETNS_DIR / ns), ifname)

    def delete(self, conf: dict[str, Any], container_id: str, ns: str, ifname: str = "eth0") -> None:
        self.call("DEL", conf, container_id, str(NETNS_DIR / ns), ifname)

    def check(
        self, conf: dict[str, Any], prev: Any, container_id: str, ns: str, ifname: str = "eth0"
    ) -> None:
        self.call("CHECK", {**conf, "prevResult": prev}, container_id, str(NETNS_DIR / ns), ifname)
