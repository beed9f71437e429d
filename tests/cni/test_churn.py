"""Many pods coming and going at once: no address handed out twice, nothing left behind; and a
restarted service keeps the pods it did not create."""

from __future__ import annotations

import ipaddress
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from cnitest import Namespaces, Plugin, PodNetwork, ServiceThread, in_ns, sh

pytestmark = pytest.mark.integration

CYCLES = 200
PARALLEL = 10


def test_200_add_del_cycles_10_at_a_time_leave_nothing(
    plugin: Plugin, service: ServiceThread, network: PodNetwork
) -> None:
    live: dict[str, str] = {}  # ip -> container id, for the pods that exist right now
    lock = threading.Lock()
    problems: list[str] = []

    def cycle(i: int) -> None:
        ns = f"pkc-churn-{i + 1}"
        sh("ip", "netns", "add", ns)
        cid = f"churn-{i + 1}"
        conf = network.conf(
            ipMasq=True,
            runtimeConfig={"portMappings": [{"HostPort": 20001 + i, "ContainerPort": 80, "Protocol": "tcp"}]},
        )
        try:
            result = plugin.add(conf, cid, ns)
            ip = str(ipaddress.ip_interface(result["ips"][0]["address"]).ip)
            with lock:
                if ip in live:
                    problems.append(f"{ip} given to {cid} while {live[ip]} holds it")
                live[ip] = cid
            shown = json.loads(in_ns(ns, "ip", "-j", "-4", "addr", "show", "eth0").stdout)
            if [a["local"] for a in shown[0]["addr_info"]] != [ip]:
                problems.append(f"{cid}: {ip} not on eth0")
            with lock:
                del live[ip]
            plugin.delete(conf, cid, ns)
        finally:
            sh("ip", "netns", "del", ns, check=False)

    cycle(-1)  # warm-up, so the service's worker threads exist before counting
    fds, threads = len(os.listdir("/proc/self/fd")), threading.active_count()
    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(cycle, range(CYCLES)))
    assert problems == []
    # the service runs in this process: 400 calls must not leave descriptors or threads behind
    # (other session fixtures in this process may close descriptors meanwhile, never open ours)
    assert len(os.listdir("/proc/self/fd")) <= fds
    assert threading.active_count() <= threads + service.service.max_workers  # the pool may grow, no more
    assert network.bridge_ports() == []
    assert network.ip_files() == []
    assert network.nat_rules() == []
    veths = sh("ip", "-o", "link", "show", "type", "veth").stdout
    assert "master " + network.bridge not in veths


def test_restarted_service_keeps_existing_pods(
    plugin: Plugin, socket_path: str, network: PodNetwork, namespaces: Namespaces
) -> None:
    conf = network.conf()
    first = ServiceThread(socket_path).start()
    a = namespaces.new()
    try:
        ra = plugin.add(conf, "before-restart", a)
    finally:
        first.stop()
    ip_a = ipaddress.ip_interface(ra["ips"][0]["address"]).ip
    second = ServiceThread(socket_path).start()  # a new agent process would start a new service
    try:
        b = namespaces.new()
        rb = plugin.add(conf, "after-restart", b)
        ip_b = ipaddress.ip_interface(rb["ips"][0]["address"]).ip
        assert ip_b != ip_a
        plugin.check(conf, ra, "before-restart", a)  # the old pod kept its address and IPAM entry
        assert in_ns(b, "busybox", "ping", "-c", "1", "-W", "2", str(ip_a), check=False).returncode == 0
        plugin.delete(conf, "before-restart", a)
        plugin.delete(conf, "after-restart", b)
    finally:
        second.stop()
