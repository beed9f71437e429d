"""The node IPAM controller against the real API server, as kube-controller-manager runs it with
--allocate-node-cidrs: nodes without a CIDR get the next block (podCIDR and podCIDRs), a node that
already has one keeps it and its block is never handed out again (also one recorded before the
controller started), a deleted node's block returns to the pool, and an exhausted range gives the
node upstream's CIDRNotAvailable event from cidrAllocator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.controllers.conftest import eventually, running
from tests.controllers.kubeletplay import delete_node

pytestmark = pytest.mark.integration

# Two /24 blocks: small enough to run out of.
IPAM = {"allocate_node_cidrs": True, "cluster_cidr": "10.123.0.0/23", "node_cidr_mask_size": 24}


@pytest.fixture
def nodes(v1: client.CoreV1Api) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        delete_node(v1, None, name)


def make(v1: client.CoreV1Api, nodes: list[str], name: str, cidr: str = "") -> None:
    spec = {"podCIDR": cidr, "podCIDRs": [cidr]} if cidr else {}
    v1.create_node({"metadata": {"name": name}, "spec": spec})
    nodes.append(name)


def cidr_of(v1: client.CoreV1Api, name: str) -> tuple[str, list[str]] | None:
    node = v1.read_node(name)
    return (node.spec.pod_cidr, node.spec.pod_cidrs) if node.spec.pod_cidr else None


async def test_allocates_recovers_releases_and_reports_exhaustion(apiserver, v1, nodes) -> None:
    make(v1, nodes, "ipam-old", "10.123.0.0/24")  # there before the controller: recovered, kept
    async with running(apiserver, "nodeipam", **IPAM):
        make(v1, nodes, "ipam-a")
        got = await eventually(lambda: cidr_of(v1, "ipam-a"), what="ipam-a's CIDR")
        assert got == ("10.123.1.0/24", ["10.123.1.0/24"])
        assert cidr_of(v1, "ipam-old") == ("10.123.0.0/24", ["10.123.0.0/24"])

        make(v1, nodes, "ipam-b")  # the range is full

        def not_available() -> list[client.CoreV1Event]:
            return [
                e
                for e in v1.list_namespaced_event("default").items
                if e.involved_object.name == "ipam-b" and e.reason == "CIDRNotAvailable"
            ]

        (event,) = (await eventually(not_available, what="CIDRNotAvailable"))[:1]
        assert event.message == "Node ipam-b status is now: CIDRNotAvailable"
        assert event.source.component == "cidrAllocator"
        assert event.type == "Normal"
        assert cidr_of(v1, "ipam-b") is None

        v1.delete_node("ipam-a")  # its block goes back; ipam-b gets it on its next update
        v1.patch_node("ipam-b", {"metadata": {"labels": {"touched": "yes"}}})
        got = await eventually(lambda: cidr_of(v1, "ipam-b"), what="ipam-b's CIDR after the release")
        assert got == ("10.123.1.0/24", ["10.123.1.0/24"])
