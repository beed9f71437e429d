"""Side by side with the reference bridge + host-local (+ loopback) plugins: the same netconf shape
on two bridges must give pods the same interfaces, addresses (relative to the range), gateway,
routes, host-side wiring and IPAM files."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
from cnitest import NETNS_DIR, Namespaces, Plugin, PodNetwork, sh

from agent.cni import datapath

pytestmark = pytest.mark.integration


def rel(ip: str | ipaddress.IPv4Address, net: ipaddress.IPv4Network) -> int:
    """An address as its offset in the subnet, so two ranges compare equal."""
    return int(ipaddress.IPv4Address(str(ip).split("/")[0])) - int(net.network_address)


def normalise_result(result: dict[str, Any], net: PodNetwork) -> dict[str, Any]:
    ifaces = result["interfaces"]
    return {
        "cniVersion": result["cniVersion"],
        "interfaces": [
            (i["name"] == net.bridge, bool(i.get("sandbox")), i["name"] if i.get("sandbox") else "")
            for i in ifaces
        ],
        "ips": [
            (
                rel(ip["address"], net.subnet),
                ip["address"].split("/")[1],
                rel(ip["gateway"], net.subnet),
                ip["interface"],
            )
            for ip in result["ips"]
        ],
        "routes": sorted(
            (r["dst"], rel(r.get("gw", net.gateway), net.subnet)) for r in result.get("routes", [])
        ),
    }


def kernel_state(ns: str, net: PodNetwork, host_veth: str) -> dict[str, Any]:
    state = datapath.inspect_container(str(NETNS_DIR / ns), "eth0")
    assert state is not None
    bridge_addrs = sh("ip", "-4", "-o", "addr", "show", "dev", net.bridge).stdout.split()
    master = sh("ip", "-o", "link", "show", host_veth).stdout
    return {
        "up": state.up,
        "lo_up": state.lo_up,
        "mtu": state.mtu,
        "addresses": [(rel(a.ip, net.subnet), a.network.prefixlen) for a in state.addresses],
        "routes": sorted(
            (
                dst if dst == "0.0.0.0/0" else f"subnet/{dst.split('/')[1]}",
                rel(gw, net.subnet) if gw else None,
            )
            for dst, gw in state.routes
        ),
        "bridge_gateway": f"{net.gateway}/{net.subnet.prefixlen}" in bridge_addrs,
        "veth_on_bridge": f"master {net.bridge} " in master,
        "hairpin": Path(f"/sys/class/net/{host_veth}/brport/hairpin_mode").read_text().strip(),
    }


def ipam_state(net: PodNetwork) -> dict[str, Any]:
    return {
        "files": [rel(name, net.subnet) for name in net.ip_files()],
        "contents": [(net.ipam_dir / name).read_bytes().split(b"\r\n")[1] for name in net.ip_files()],
        "last_reserved": rel((net.ipam_dir / "last_reserved_ip.0").read_text(), net.subnet),
    }


def test_same_network_as_reference_plugins(
    plugin: Plugin, service: object, reference: Plugin, network_factory: Any, namespaces: Namespaces
) -> None:
    ours, ref = network_factory(), network_factory()
    our_conf = ours.conf()
    ref_conf = ref.conf(
        type="bridge",
        ipam={"type": "host-local", "dataDir": str(ref.data_dir), "ranges": [[{"subnet": str(ref.subnet)}]]},
    )
    ref_conf.pop("dataDir")
    loopback = Plugin(Path("/usr/lib/cni/loopback"))
    lo_conf = {"cniVersion": "1.0.0", "name": "lo", "type": "loopback"}

    our_ns, ref_ns = namespaces.new(), namespaces.new()
    our_result = plugin.add(our_conf, "side-by-side", our_ns)
    ref_result = reference.add(ref_conf, "side-by-side", ref_ns)
    loopback.add(lo_conf, "side-by-side", ref_ns)
    try:
        assert normalise_result(our_result, ours) == normalise_result(ref_result, ref)
        our_veth, ref_veth = our_result["interfaces"][1]["name"], ref_result["interfaces"][1]["name"]
        assert kernel_state(our_ns, ours, our_veth) == kernel_state(ref_ns, ref, ref_veth)
        assert ipam_state(ours) == ipam_state(ref)
        # CHECK with each other's tool is not meaningful; each plugin's own CHECK must pass
        plugin.check(our_conf, our_result, "side-by-side", our_ns)
        reference.check(ref_conf, ref_result, "side-by-side", ref_ns)
    finally:
        plugin.delete(our_conf, "side-by-side", our_ns)
        reference.delete(ref_conf, "side-by-side", ref_ns)
    # after DEL both leave only the bridge behind: no port, no address file
    assert (ours.bridge_ports(), ours.ip_files()) == (ref.bridge_ports(), ref.ip_files()) == ([], [])
