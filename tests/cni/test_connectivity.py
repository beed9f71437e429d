"""Pods on our bridge network talk to each other, to the host and through hostPorts (real netns,
real kernel, busybox for ICMP and HTTP)."""

from __future__ import annotations

import ipaddress
import json
import sys
import time
from pathlib import Path

import pytest
from cnitest import Namespaces, Plugin, PodNetwork, in_ns, sh

pytestmark = pytest.mark.integration


def wait_http(ns: str | None, url: str, timeout: float = 10.0) -> str:
    """GET url (from inside ns, or from the host when ns is None) until the server is up."""
    deadline = time.monotonic() + timeout
    while True:
        # (busybox wget crashes on this Debian build; Python's urllib is always at hand)
        argv = [sys.executable, "-c", _GET, url]
        proc = in_ns(ns, *argv, check=False) if ns else sh(*argv, check=False)
        if proc.returncode == 0 or time.monotonic() > deadline:
            return proc.stdout if proc.returncode == 0 else f"FAILED: {proc.stderr}"
        time.sleep(0.1)


_GET = "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())"


_ECHO_PEER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.client_address[0].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("0.0.0.0", int(sys.argv[1])), H).serve_forever()
"""


def ping(ns: str | None, ip: str) -> bool:
    argv = ["busybox", "ping", "-c", "1", "-W", "2", ip]
    proc = in_ns(ns, *argv, check=False) if ns else sh(*argv, check=False)
    return proc.returncode == 0


def serve(namespaces: Namespaces, ns: str | None, root: Path, port: int, text: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "index.html").write_text(text)
    namespaces.spawn(ns, "busybox", "httpd", "-f", "-p", str(port), "-h", str(root))


def host_address() -> str:
    """The host's own primary IPv4 address (a route lookup; no packet is sent)."""
    routes = json.loads(sh("ip", "-j", "-4", "route", "show", "default").stdout or "[]")
    if not routes:
        pytest.skip("host has no default route to take its address from")
    dev = routes[0]["dev"]
    addrs = json.loads(sh("ip", "-j", "-4", "addr", "show", "dev", dev).stdout)
    return addrs[0]["addr_info"][0]["local"]


def pod_ip(result: dict) -> str:
    return str(ipaddress.ip_interface(result["ips"][0]["address"]).ip)


def test_two_pods_host_and_back(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces, tmp_path: Path
) -> None:
    conf = network.conf()
    a, b = namespaces.new(), namespaces.new()
    ra = plugin.add(conf, "pod-a", a)
    rb = plugin.add(conf, "pod-b", b)
    ip_a, ip_b = pod_ip(ra), pod_ip(rb)
    assert ip_a != ip_b and {ipaddress.ip_address(ip_a), ipaddress.ip_address(ip_b)} <= set(network.subnet)
    try:
        # ICMP: pod <-> pod, host -> pod, pod -> host (its gateway is a host address)
        assert ping(a, ip_b) and ping(b, ip_a)
        assert ping(None, ip_a)
        assert ping(a, str(network.gateway))
        # HTTP: pod -> pod, host -> pod, pod -> host
        serve(namespaces, b, tmp_path / "b", 8080, "hello from b")
        assert wait_http(a, f"http://{ip_b}:8080/") == "hello from b"
        assert wait_http(None, f"http://{ip_b}:8080/") == "hello from b"
        serve(namespaces, None, tmp_path / "host", 18931, "hello from host")
        assert wait_http(a, f"http://{network.gateway}:18931/") == "hello from host"
    finally:
        plugin.delete(conf, "pod-a", a)
        plugin.delete(conf, "pod-b", b)
    assert not ping(None, ip_a)


def link_address(name: str) -> tuple[str, str]:
    """A host link's MAC and how the kernel got it (addr_assign_type: 3 is set by hand)."""
    sysfs = Path("/sys/class/net") / name
    return (sysfs / "address").read_text().strip(), (sysfs / "addr_assign_type").read_text().strip()


def test_the_gateway_keeps_its_mac_while_pods_come_and_go(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces
) -> None:
    """A bridge left to choose its own MAC takes its lowest port's: deleting the pod whose veth lent it
    changed the gateway's MAC under every other pod, whose ARP cache then pointed at nothing for half
    a minute (a pod lost the API server while another namespace was being deleted). The bridge's MAC
    is set once; a bridge made by someone else is pinned at the MAC it has."""
    sh("ip", "link", "add", network.bridge, "type", "bridge")
    found, how = link_address(network.bridge)
    assert how != "3"  # the kernel's choice, as any bridge made without an address
    conf = network.conf()
    pods = {name: namespaces.new() for name in ("a", "b", "c")}
    veths = {name: plugin.add(conf, name, ns)["interfaces"][1]["mac"] for name, ns in pods.items()}
    try:
        assert link_address(network.bridge) == (found, "3")
        for ns in pods.values():
            assert ping(ns, str(network.gateway))  # each pod caches the gateway's MAC
        # The pod whose veth has the lowest MAC goes: the one a kernel-chosen address would follow.
        lowest = min(veths, key=lambda name: bytes.fromhex(veths[name].replace(":", "")))
        plugin.delete(conf, lowest, pods.pop(lowest))
        assert link_address(network.bridge) == (found, "3")
        for ns in pods.values():
            assert ping(ns, str(network.gateway))  # at once, not after the ARP entry goes stale
    finally:
        for name, ns in pods.items():
            plugin.delete(conf, name, ns)


def one_address(network: PodNetwork, n: int, name: str = "") -> dict:
    """The network's conf with a range of one address (the subnet's n-th), under its own IPAM name."""
    ip = str(network.subnet.network_address + n)
    ranges = [[{"subnet": str(network.subnet), "rangeStart": ip, "rangeEnd": ip}]]
    return network.conf(ipam={"ranges": ranges}, **({"name": name} if name else {}))


def test_a_reused_pod_ip_is_announced(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces
) -> None:
    """Pod IPs come round again once the range wraps. The host still held the last owner's MAC for the
    IP (its entry stays usable for half a minute after it was last confirmed) and sent the new pod's
    first packets (the kubelet's probes, Service traffic) to a MAC that was gone. ADD announces the
    address (a gratuitous ARP, as upstream's bridge plugin sends), so the host reaches the new pod at
    once. A range of one address makes the reuse immediate; a bystander pod keeps the bridge's carrier
    up (a bridge left without ports drops its neighbours, which would hide the stale entry)."""
    conf, only = one_address(network, 9), str(network.subnet.network_address + 9)
    other = one_address(network, 10, f"{network.name}x")
    first, second, bystander = namespaces.new(), namespaces.new(), namespaces.new()
    plugin.add(other, "bystander", bystander)
    try:
        assert pod_ip(plugin.add(conf, "first", first)) == only
        assert ping(None, only)  # the host now holds the first pod's MAC for the IP, confirmed
        plugin.delete(conf, "first", first)
        result = plugin.add(conf, "second", second)
        assert pod_ip(result) == only
        neighbour = json.loads(sh("ip", "-j", "neigh", "show", only, "dev", network.bridge).stdout)
        assert [n["lladdr"] for n in neighbour] == [result["interfaces"][2]["mac"]]
        assert ping(None, only)  # at once: not after the host's entry for the old MAC ages out
    finally:
        plugin.delete(conf, "second", second)  # DEL of what is not there succeeds, as CNI says
        plugin.delete(other, "bystander", bystander)


def test_host_port_reachable_on_host_address(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces, tmp_path: Path
) -> None:
    host_ip = host_address()
    web, client = namespaces.new(), namespaces.new()
    mapped = network.conf(
        runtimeConfig={
            "portMappings": [
                {"HostPort": 18932, "ContainerPort": 80, "Protocol": "tcp", "HostIP": ""},
                {"HostPort": 18933, "ContainerPort": 80, "Protocol": "tcp", "HostIP": str(network.gateway)},
            ]
        }
    )
    plugin.add(mapped, "web", web)
    plugin.add(network.conf(), "client", client)
    try:
        serve(namespaces, web, tmp_path / "web", 80, "hostport ok")
        # from the host itself to its own address, and from another pod through the host address
        assert wait_http(None, f"http://{host_ip}:18932/") == "hostport ok"
        assert wait_http(client, f"http://{host_ip}:18932/") == "hostport ok"
        # hairpin: the pod reaches itself through its own hostPort
        assert wait_http(web, f"http://{host_ip}:18932/") == "hostport ok"
        # localhost on the host, as the portmap plugin allows
        assert wait_http(None, "http://127.0.0.1:18932/") == "hostport ok"
        # a mapping bound to one host address answers there only
        assert wait_http(None, f"http://{network.gateway}:18933/") == "hostport ok"
        assert "hostport ok" not in wait_http(None, f"http://{host_ip}:18933/", timeout=0)
        assert network.nat_rules() == ["web/eth0", "web/eth0"]
    finally:
        plugin.delete(mapped, "web", web)
        plugin.delete(network.conf(), "client", client)
    assert network.nat_rules() == []
    assert "hostport ok" not in wait_http(None, f"http://{host_ip}:18932/", timeout=0)


def test_masquerade_to_outside(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces, tmp_path: Path
) -> None:
    """A pod reaching a network that is not the pod range is seen with the host's address there.
    The "outside" is one more namespace wired to the host with a veth on a private /30."""
    outside = namespaces.new()
    host_end = f"pko{network.bridge[-3:]}"
    sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", outside)
    try:
        sh("ip", "addr", "add", "192.168.251.1/30", "dev", host_end)
        sh("ip", "link", "set", host_end, "up")
        in_ns(outside, "ip", "addr", "add", "192.168.251.2/30", "dev", "eth0")
        in_ns(outside, "ip", "link", "set", "eth0", "up")
        pod = namespaces.new()
        conf = network.conf(ipMasq=True)
        plugin.add(conf, "masq", pod)
        try:
            # the outside server answers with the client address it saw
            namespaces.spawn(outside, sys.executable, "-c", _ECHO_PEER, "8081")
            assert wait_http(pod, "http://192.168.251.2:8081/") == "192.168.251.1"
        finally:
            plugin.delete(conf, "masq", pod)
    finally:
        sh("ip", "link", "del", host_end, check=False)
