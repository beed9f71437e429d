"""NetworkPolicies enforced for real: the real API server, the agent as its own process (`pykubelet
netpolicy`, on its own identity and RBAC) writing real nftables rules, and real TCP connections between
pods that are network namespaces wired as the CNI wires them: veths on a bridge per node (two nodes
here, so both bridged and routed pod traffic are met), all inside a "host" namespace of the test's own
so the machine's rules are never touched. The pods exist in the API with their node and IP, as the
kubelet reports them.

A default deny blocks connections that worked; podSelector, namespaceSelector, both combined, ipBlock
with except, a port rule, a named port, a port range, egress isolation; an established connection
survives a new deny; deleting a policy restores access; stopping the agent keeps its rules and
`--cleanup` removes its table; pods whose addresses the API learns after they run get their rules and
join the peer sets when it does. The lab is dual-stack (each pod has an IPv4 and an IPv6 address, both
in its status.podIPs): a default deny, a podSelector, an IPv6 ipBlock with except, egress and the guard
for late addresses hold for IPv6 connections too, and neighbour discovery reaches isolated pods. One lab and one agent for the module."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from e2e.waiting import wait_for
from tests.netpolicy.podlab import (
    CONNECT,
    ECHO,
    HOLD,
    SERVER,
    SERVER_PORTS,
    UDP_ECHO,
    PodLab,
    agent_argv,
    lab_beside_api,
    report_pod,
    running_agent,
    sh,
    v6,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and nftables"),
]

# Pods: (name, namespace key, node/bridge, ip, labels)
SERVER_IP, CLIENT_IP, OTHER_IP, FAR_IP, FAR_OTHER_IP = (
    "10.77.0.2",
    "10.77.0.3",
    "10.77.0.4",
    "10.77.1.2",
    "10.77.1.3",
)
PODS = [
    ("server", "a", 0, SERVER_IP, {"app": "server"}),
    ("client", "a", 0, CLIENT_IP, {"role": "client"}),
    ("other", "a", 0, OTHER_IP, {"role": "other"}),
    ("far", "b", 1, FAR_IP, {"role": "client"}),
    ("far-other", "b", 1, FAR_OTHER_IP, {"role": "other"}),
]


@dataclass
class World:
    lab: PodLab
    net: client.NetworkingV1Api
    ns: dict[str, str]
    agent: subprocess.Popen[str]
    kubeconfig: Path
    core: client.CoreV1Api

    def table(self) -> subprocess.CompletedProcess[str]:
        return self.lab.table()

    def policy(self, name: str, ns: str = "a", **spec: object) -> None:
        body: dict = {"metadata": {"name": name}, "spec": {"podSelector": {"matchLabels": {"app": "server"}}}}
        body["spec"].update(spec)
        self.net.create_namespaced_network_policy(self.ns[ns], body)

    def delete(self, name: str, ns: str = "a") -> None:
        self.net.delete_namespaced_network_policy(name, self.ns[ns])

    def reach(self, pod: str, port: int = 8080, ip: str = SERVER_IP) -> str:
        return self.lab.connect(pod, ip, port)

    def expect(self, want: dict[tuple[str, int], str], ip: str = SERVER_IP) -> None:
        """Wait (bounded) until every (client, port) pair gets the wanted answer at once."""

        def matrix() -> dict[tuple[str, int], str]:
            return {(pod, port): self.reach(pod, port, ip) for pod, port in want}

        seen: dict = {}

        def holds() -> bool:
            seen.update(matrix())
            return seen == want

        try:
            wait_for(holds, timeout=20, interval=0.2, what="the policy's effect")
        except AssertionError:
            raise AssertionError(f"wanted {want}, saw {seen}\n{self.table().stdout}") from None


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("netpol")
    with lab_beside_api(root) as (lab, server, api):
        core = client.CoreV1Api(api)
        names = {"a": f"np-a-{lab.tag}", "b": f"np-b-{lab.tag}"}
        for key, name in names.items():
            core.create_namespace({"metadata": {"name": name, "labels": {"team": key}}})
            core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
        ports = [{"name": "http", "containerPort": 8080}, {"name": "alt", "containerPort": 8081}]
        for pod, key, node, ip, labels in PODS:
            lab.add_pod(pod, node, ip)
            report_pod(core, names[key], pod, f"n{node}", ip, labels=labels, ports=ports)
        lab.start("server", SERVER, *map(str, SERVER_PORTS))
        lab.start("far", SERVER, "8080")
        lab.start("server", ECHO)
        lab.start("server", UDP_ECHO)
        with running_agent(server, lab, root, "n0", "n1") as (agent, kubeconfig):
            yield World(lab, client.NetworkingV1Api(api), names, agent, kubeconfig, core)


@pytest.fixture(autouse=True)
def no_policies_left(world: World) -> Iterator[None]:
    yield
    for ns in world.ns.values():
        world.net.delete_collection_namespaced_network_policy(ns)
    world.expect({("client", 8080): "ok", ("other", 8080): "ok", ("far", 8080): "ok"})


def test_default_deny_then_deletion_restores(world: World) -> None:
    world.expect({("client", 8080): "ok", ("other", 8080): "ok", ("far", 8080): "ok"})
    world.policy("deny", podSelector={})
    world.expect({("client", 8080): "blocked", ("other", 8080): "blocked", ("far", 8080): "blocked"})
    # pods of another namespace are not isolated by it; the node itself still reaches the pod
    world.expect({("client", 8080): "ok"}, ip=FAR_IP)
    assert (
        sh(
            "ip", "netns", "exec", world.lab.host, sys.executable, "-c", CONNECT, SERVER_IP, "8080"
        ).stdout.strip()
        == "ok"
    )
    world.delete("deny")
    world.expect({("client", 8080): "ok", ("other", 8080): "ok", ("far", 8080): "ok"})


def test_pod_selector_admits_one_client_and_not_another(world: World) -> None:
    world.policy("clients", ingress=[{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}])
    # "far" is labelled role=client too, but in another namespace: a bare podSelector means this namespace
    world.expect({("client", 8080): "ok", ("other", 8080): "blocked", ("far", 8080): "blocked"})


def test_namespace_selector_alone_and_with_a_pod_selector(world: World) -> None:
    world.policy("from-b", ingress=[{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}])
    world.expect({("client", 8080): "blocked", ("far", 8080): "ok", ("far-other", 8080): "ok"})
    world.delete("from-b")
    both = {
        "namespaceSelector": {"matchLabels": {"team": "b"}},
        "podSelector": {"matchLabels": {"role": "client"}},
    }
    world.policy("client-in-b", ingress=[{"from": [both]}])
    world.expect({("client", 8080): "blocked", ("far", 8080): "ok", ("far-other", 8080): "blocked"})


def test_ip_block_with_except(world: World) -> None:
    block = {"ipBlock": {"cidr": "10.77.0.0/16", "except": ["10.77.0.4/32", "10.77.1.0/24"]}}
    world.policy("block", ingress=[{"from": [block]}])
    world.expect({("client", 8080): "ok", ("other", 8080): "blocked", ("far", 8080): "blocked"})


def test_ports_by_number_name_and_range(world: World) -> None:
    world.policy("port", ingress=[{"ports": [{"port": 8081}]}])
    world.expect({("client", 8081): "ok", ("client", 8080): "blocked", ("client", 9001): "blocked"})
    world.delete("port")
    world.policy("named", ingress=[{"ports": [{"port": "http"}]}])
    world.expect({("client", 8080): "ok", ("client", 8081): "blocked"})
    world.delete("named")
    world.policy("range", ingress=[{"ports": [{"port": 8081, "endPort": 9001}]}])
    world.expect({("client", 8080): "blocked", ("client", 8081): "ok", ("client", 9001): "ok"})
    world.delete("range")
    world.policy("udp-only", ingress=[{"ports": [{"port": 5353, "protocol": "UDP"}]}])
    world.expect({("client", 8080): "blocked"})
    assert world.lab.ask_udp("client", SERVER_IP, 5353) == "ok"
    world.delete("udp-only")
    world.policy("tcp-only", ingress=[{"ports": [{"port": 5353}]}])  # TCP by default
    wait_for(
        lambda: world.lab.ask_udp("client", SERVER_IP, 5353) == "blocked", timeout=20, what="UDP refused"
    )


def test_egress_isolation_with_a_named_port(world: World) -> None:
    to_server = {"podSelector": {"matchLabels": {"app": "server"}}}
    world.policy(
        "client-out",
        podSelector={"matchLabels": {"role": "client"}},
        policyTypes=["Egress"],
        egress=[{"to": [to_server], "ports": [{"port": "http"}]}],
    )
    world.expect({("client", 8080): "ok", ("client", 8081): "blocked", ("other", 8081): "ok"})
    # egress to a pod of another node (routed): not allowed by the rule
    world.expect({("client", 8080): "blocked"}, ip=FAR_IP)
    # the server is not isolated by it: others still reach it
    world.expect({("far", 8080): "ok"}, ip=SERVER_IP)


def test_an_established_connection_survives_a_new_deny(world: World) -> None:
    held = world.lab.start("client", HOLD, SERVER_IP, "7000")
    assert held.stdin is not None and held.stdout is not None
    world.policy("deny", podSelector={})
    world.expect({("client", 7000): "blocked"})
    held.stdin.write("ping\n")
    held.stdin.flush()
    assert held.stdout.readline().strip() == "ping"


def test_pods_get_their_rules_and_join_peer_sets_when_their_address_appears(world: World) -> None:
    """A client and a server selected before the API knows their addresses (already running, as
    between sandbox and status): the server is unreachable even then (the guard on its node's pod CIDR,
    known from the Node), and each takes its part in the one transaction that follows the address."""
    late = {"late-client": ("10.77.0.6", {"role": "client"}), "late-server": ("10.77.0.7", {"app": "server"})}
    cidrs = ["10.77.0.0/24", "fd77:0::/64"]
    world.core.create_node({"metadata": {"name": "n0"}, "spec": {"podCIDR": cidrs[0], "podCIDRs": cidrs}})
    for name, (ip, labels) in late.items():
        world.lab.add_pod(name, 0, ip)
        body = {
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": "n0", "containers": [{"name": "c", "image": "busybox"}]},
        }
        world.core.create_namespaced_pod(world.ns["a"], body)
    world.lab.start("late-server", SERVER, "8080")
    try:
        world.policy("clients", ingress=[{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}])
        world.expect({("client", 8080): "ok", ("other", 8080): "blocked", ("late-client", 8080): "blocked"})
        # not yet known, already guarded: no client reaches the new server before its rules exist
        world.expect({("client", 8080): "blocked", ("other", 8080): "blocked"}, ip=late["late-server"][0])
        world.expect({("client", 8080): "blocked"}, ip=v6(late["late-server"][0]))  # its IPv6 CIDR too
        world.expect({("client", 8080): "ok"}, ip=FAR_IP)  # a known pod of another node: unguarded
        world.expect({("client", 8080): "ok"}, ip=v6(FAR_IP))
        for name, (ip, _) in late.items():
            status = {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}, {"ip": v6(ip)}]}}
            world.core.patch_namespaced_pod_status(name, world.ns["a"], status)
        world.expect({("client", 8080): "ok", ("other", 8080): "blocked", ("late-client", 8080): "ok"})
        want = {("client", 8080): "ok", ("other", 8080): "blocked", ("late-client", 8080): "ok"}
        world.expect(want, ip=late["late-server"][0])
        world.expect(want, ip=v6(late["late-server"][0]))
    finally:
        for name in late:
            world.core.delete_namespaced_pod(name, world.ns["a"], grace_period_seconds=0)
        world.core.delete_node("n0")


def test_ipv6_default_deny_pod_selector_ip_block_and_egress(world: World) -> None:
    """The pods' IPv6 addresses (the second of their status.podIPs) are isolated as their IPv4 ones:
    bridged (client, other) and routed (far) IPv6 connections to the server's IPv6 address."""
    server6 = v6(SERVER_IP)
    everyone = {("client", 8080): "ok", ("other", 8080): "ok", ("far", 8080): "ok"}
    world.expect(everyone, ip=server6)
    world.policy("deny", podSelector={})
    world.expect(
        {("client", 8080): "blocked", ("other", 8080): "blocked", ("far", 8080): "blocked"}, ip=server6
    )
    world.delete("deny")
    world.policy("clients", ingress=[{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}])
    world.expect({("client", 8080): "ok", ("other", 8080): "blocked", ("far", 8080): "blocked"}, ip=server6)
    world.delete("clients")
    block = {"ipBlock": {"cidr": "fd77::/16", "except": [f"{v6(OTHER_IP)}/128", "fd77:1::/64"]}}
    world.policy("block6", ingress=[{"from": [block]}])
    world.expect({("client", 8080): "ok", ("other", 8080): "blocked", ("far", 8080): "blocked"}, ip=server6)
    # an IPv6 block admits no IPv4 connection
    world.expect({("client", 8080): "blocked"})
    world.delete("block6")
    world.policy(
        "client-out",
        podSelector={"matchLabels": {"role": "client"}},
        policyTypes=["Egress"],
        egress=[{"to": [{"podSelector": {"matchLabels": {"app": "server"}}}], "ports": [{"port": "http"}]}],
    )
    world.expect({("client", 8080): "ok", ("client", 8081): "blocked", ("other", 8081): "ok"}, ip=server6)
    world.expect({("client", 8080): "blocked"}, ip=v6(FAR_IP))


def test_ipv6_neighbour_discovery_passes_to_isolated_pods(world: World) -> None:
    """IPv6 finds a neighbour with ICMPv6 (IPv4 with ARP, which the forward hook never sees): with the
    client isolated for ingress, the server's neighbour advertisement to it must still pass, or an
    allowed IPv6 connection fails as soon as the client has to ask for the server's link address."""
    world.policy("deny-in", podSelector={})  # every pod of a isolated for ingress, the client too
    world.policy("clients", ingress=[{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}])
    server6 = v6(SERVER_IP)
    world.expect({("client", 8080): "ok", ("other", 8080): "blocked"}, ip=server6)
    for pod in ("client", "server"):
        sh("ip", "-n", world.lab.ns(pod), "-6", "neigh", "flush", "all")
    world.expect({("client", 8080): "ok"}, ip=server6)


def test_stop_keeps_the_rules_and_cleanup_removes_the_table(world: World) -> None:
    """Last: it ends the module's agent."""
    world.policy("deny", podSelector={})
    world.expect({("client", 8080): "blocked"})
    world.agent.send_signal(signal.SIGTERM)
    assert world.agent.wait(20) == 0
    assert world.reach("client", 8080) == "blocked"
    done = sh(*agent_argv(world.kubeconfig, world.lab.host, "--cleanup"))
    assert done.returncode == 0
    assert world.table().returncode != 0
    world.expect({("client", 8080): "ok"})
