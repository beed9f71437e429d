"""The agent's sync without a cluster: caches filled by hand and an nft stand-in that refuses what a
test names, to show that one bad policy never breaks the others (it is found, kept isolating its pods
with nothing admitted, reported once) and that an unchanged ruleset is not rewritten."""

from __future__ import annotations

from dataclasses import dataclass, field

from kubeclient.client import KubeClient
from kubeclient.config import ClusterConfig
from netpolicy.agent import NOT_PROGRAMMED, AgentConfig, PolicyAgent
from netpolicy.nft import NftError, NftTable


@dataclass(frozen=True)
class RefusingNft(NftTable):
    """Refuses any script holding `poison`; records what it applied."""

    poison: str = ""
    applied: list[str] = field(default_factory=list, hash=False, compare=False)

    async def write(self, script: str, check_only: bool = False) -> None:
        if self.poison and self.poison in script:
            raise NftError("Error: Could not process rule")
        if not check_only:
            self.applied.append(script)


def obj(kind: str, name: str, ns: str = "a", rv: str = "1", **fields: object) -> dict:
    meta = {"name": name, "namespace": ns, "resourceVersion": rv, "uid": f"{kind}-{name}"}
    return {"kind": kind, "apiVersion": "v1", "metadata": meta, **fields}


def pod(name: str, ip: str, **labels: str) -> dict:
    body = obj(
        "Pod", name, spec={"nodeName": "n1", "containers": []}, status={"podIP": ip, "phase": "Running"}
    )
    body["metadata"]["labels"] = labels
    return body


def agent(nft: RefusingNft) -> PolicyAgent:
    client = KubeClient(ClusterConfig(server="https://127.0.0.1:1"))
    built = PolicyAgent(client, AgentConfig(frozenset({"n1"}), nft=nft))
    for item in (pod("web", "10.0.0.2", app="web"), pod("db", "10.0.0.3", app="db")):
        built.pods.store[f"a/{item['metadata']['name']}"] = item
    built.namespaces.store["a"] = {"metadata": {"name": "a", "labels": {}}}
    return built


def policy(name: str, app: str, cidr: str, rv: str = "1") -> dict:
    spec = {
        "podSelector": {"matchLabels": {"app": app}},
        "ingress": [{"from": [{"ipBlock": {"cidr": cidr}}]}],
    }
    return obj("NetworkPolicy", name, rv=rv, spec=spec)


async def test_a_policy_nft_refuses_is_withheld_and_the_others_are_written() -> None:
    nft = RefusingNft(poison="10.66.0.0/16")
    built = agent(nft)
    built.policies.store["a/good"] = policy("good", "web", "10.55.0.0/16")
    built.policies.store["a/bad"] = policy("bad", "db", "10.66.0.0/16")
    assert await built.sync() is True
    [script] = nft.applied
    assert "add rule inet pykubelet-netpol ingress-a/web ip saddr 10.55.0.0/16 return" in script
    assert "add rule inet pykubelet-netpol ingress-a/db drop" in script  # still isolated: fail closed
    assert "10.66.0.0/16" not in script
    assert built.withheld == frozenset({"a/bad"})
    assert [(r[2], r[3].split(":")[0]) for r in built.recorder.recorded] == [
        (NOT_PROGRAMMED, "NetworkPolicy not programmed")
    ]
    # nothing changed: no rewrite, no second event
    assert await built.sync() is True
    assert len(nft.applied) == 1 and len(built.recorder.recorded) == 1
    # the bad policy changes (a new version): tried again
    built.policies.store["a/bad"] = policy("bad", "db", "10.77.0.0/16", rv="2")
    assert await built.sync() is True
    assert built.withheld == frozenset() and "ingress-a/db ip saddr 10.77.0.0/16 return" in nft.applied[-1]


async def test_a_policy_that_cannot_be_parsed_isolates_with_nothing_admitted() -> None:
    nft = RefusingNft()
    built = agent(nft)
    broken = policy("broken", "web", "10.55.0.0/16")
    broken["spec"]["ingress"][0]["ports"] = [{"port": 80, "protocol": "ICMP"}]
    built.policies.store["a/broken"] = broken
    assert await built.sync() is True
    assert "add rule inet pykubelet-netpol ingress-a/web drop" in nft.applied[-1]
    assert "10.55.0.0/16" not in nft.applied[-1]
    assert built.recorder.recorded[0][2] == NOT_PROGRAMMED


async def test_after_the_first_whole_table_only_what_changed_is_written() -> None:
    nft = RefusingNft()
    built = agent(nft)
    built.policies.store["a/clients"] = {
        **obj("NetworkPolicy", "clients"),
        "spec": {
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}],
        },
    }
    assert await built.sync() is True
    assert nft.applied[-1].startswith("add table inet pykubelet-netpol\ndelete table")
    assert built.applied is not None
    [name] = built.applied.sets
    # a client pod whose address is not known yet takes no part; once it is, one set element
    late = pod("late", "", role="client")
    built.pods.store["a/late"] = late
    assert await built.sync() is True and len(nft.applied) == 1
    built.pods.store["a/late"] = pod("late", "10.0.0.9", role="client")
    assert await built.sync() is True
    assert nft.applied[-1] == f"add element inet pykubelet-netpol {name} {{ 10.0.0.9 }}\n"
    # the periodic resync (the last transaction forgotten) writes the whole table again
    built.last_script = ""
    assert await built.sync() is True
    assert nft.applied[-1].startswith("add table inet pykubelet-netpol\ndelete table")


def test_an_agent_of_one_node_watches_only_that_node() -> None:
    """On a joined host the agent runs on its node's credential, which the Node authorizer lets read its
    own Node only (a list or watch pinned by metadata.name); an agent of several nodes reads them all."""
    from kubeclient.client import KubeClient
    from kubeclient.config import ClusterConfig
    from netpolicy.agent import AgentConfig, PolicyAgent

    client = KubeClient(ClusterConfig(server="https://127.0.0.1:1"))
    one = PolicyAgent(client, AgentConfig(frozenset({"n1"})))
    several = PolicyAgent(client, AgentConfig(frozenset({"n1", "n2"})))
    assert one.nodes.field_selector == "metadata.name=n1"
    assert several.nodes.field_selector is None
