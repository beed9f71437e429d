"""The transaction from the table last written to the one wanted holds only what changed: a pod joining
a selection adds one set element, a pod becoming isolated gets its filled chain and its map element in
one transaction, a pod leaving goes with its chain and elements in the order nft needs; an unchanged
ruleset is no transaction at all."""

from __future__ import annotations

from netpolicy.delta import delta
from netpolicy.model import parse_pod, parse_policy
from netpolicy.rules import Cluster, Ruleset, build

AT = "inet pykubelet-netpol"
SPACES = {"a": {}}


def pod(name: str, ip: str, **labels: str) -> dict:
    meta = {"name": name, "namespace": "a", "labels": labels}
    return {"metadata": meta, "spec": {"nodeName": "n1"}, "status": {"phase": "Running", "podIP": ip}}


FROM_CLIENTS = {
    "metadata": {"name": "from-clients", "namespace": "a"},
    "spec": {
        "podSelector": {"matchLabels": {"app": "server"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}],
    },
}


def built(*pods: dict, policies: tuple[dict, ...] = (FROM_CLIENTS,)) -> Ruleset:
    parsed = tuple(p for p in (parse_pod(o) for o in pods) if p is not None)
    return build(Cluster(tuple(parse_policy(p) for p in policies), parsed, SPACES, frozenset({"n1"})))


SERVER, CLIENT = pod("server", "10.0.0.2", app="server"), pod("client", "10.0.0.3", role="client")


def test_nothing_changed_is_no_transaction() -> None:
    assert delta(built(SERVER, CLIENT), built(SERVER, CLIENT)) == ""


def test_a_pod_joining_a_selection_changes_one_set_element_only() -> None:
    old = built(SERVER, CLIENT)
    [name] = old.sets
    script = delta(old, built(SERVER, CLIENT, pod("late", "10.0.0.9", role="client")))
    assert script == f"add element {AT} {name} {{ 10.0.0.9 }}\n"
    assert delta(built(SERVER, CLIENT), built(SERVER)) == f"delete element {AT} {name} {{ 10.0.0.3 }}\n"


def test_a_pod_whose_ip_appears_gets_its_filled_chain_with_its_map_element() -> None:
    pending = pod("server2", "", app="server")
    old = built(SERVER, CLIENT, pending)
    assert "ingress-a/server2" not in old.chains  # no address: nothing to match it by yet
    script = delta(old, built(SERVER, CLIENT, pod("server2", "10.0.0.7", app="server"))).splitlines()
    [name] = old.sets
    assert script == [
        f"add chain {AT} ingress-a/server2",
        f"add rule {AT} ingress-a/server2 ip saddr @{name} return",
        f"add rule {AT} ingress-a/server2 drop",
        f"add element {AT} ingress-pods {{ 10.0.0.7 : jump ingress-a/server2 }}",
    ]


def test_a_pod_leaving_goes_map_element_first_then_chain_then_unused_sets() -> None:
    old = built(SERVER, CLIENT)
    [name] = old.sets
    assert delta(old, built(CLIENT)).splitlines() == [
        f"delete element {AT} ingress-pods {{ 10.0.0.2 }}",
        f"flush chain {AT} ingress-a/server",
        f"delete chain {AT} ingress-a/server",
        f"delete set {AT} {name}",
    ]


def test_a_changed_policy_rewrites_only_the_chains_of_the_pods_it_selects() -> None:
    other = pod("db", "10.0.0.4", app="db")
    deny_db = {
        "metadata": {"name": "deny-db", "namespace": "a"},
        "spec": {"podSelector": {"matchLabels": {"app": "db"}}},
    }
    changed = {**FROM_CLIENTS, "spec": {**FROM_CLIENTS["spec"], "ingress": [{"ports": [{"port": 80}]}]}}
    old = built(SERVER, CLIENT, other, policies=(FROM_CLIENTS, deny_db))
    script = delta(old, built(SERVER, CLIENT, other, policies=(changed, deny_db))).splitlines()
    [name] = old.sets
    assert script == [
        f"flush chain {AT} ingress-a/server",
        f"add rule {AT} ingress-a/server meta l4proto tcp th dport 80 return",
        f"add rule {AT} ingress-a/server drop",
        f"delete set {AT} {name}",
    ]


def test_the_guard_goes_up_and_down_with_a_pending_pod_in_one_transaction_each() -> None:
    def with_pending(*pending: dict) -> Ruleset:
        parsed = tuple(p for p in (parse_pod(o) for o in (SERVER, CLIENT)) if p is not None)
        waiting = tuple(p for p in (parse_pod(o, pending=True) for o in pending) if p is not None)
        cluster = Cluster((parse_policy(FROM_CLIENTS),), parsed, SPACES, frozenset({"n1"}), waiting, CIDRS)
        return build(cluster)

    CIDRS = {"n1": ("10.0.0.0/24",)}
    down, up = with_pending(), with_pending(pod("server2", "", app="server"))
    assert delta(down, up).splitlines() == [
        f"add element {AT} known-pods {{ 10.0.0.2, 10.0.0.3 }}",
        f"add element {AT} pending-ingress {{ 10.0.0.0/24 }}",
    ]
    assert delta(up, down).splitlines() == [
        f"delete element {AT} known-pods {{ 10.0.0.2, 10.0.0.3 }}",
        f"delete element {AT} pending-ingress {{ 10.0.0.0/24 }}",
    ]


def test_dual_stack_pods_move_in_both_families_at_once() -> None:
    """A dual-stack client joins the selection: one element in each family's peer set; a dual-stack
    server going away leaves both verdict maps in the same transaction."""

    def dual(name: str, ip: str, ip6: str, **labels: str) -> dict:
        body = pod(name, ip, **labels)
        body["status"]["podIPs"] = [{"ip": ip}, {"ip": ip6}]
        return body

    server, client = (
        dual("server", "10.0.0.2", "fd00::2", app="server"),
        dual("client", "10.0.0.3", "fd00::3", role="client"),
    )
    old = built(server, client)
    name = next(n for n in old.sets if not n.endswith("-v6"))
    joined = delta(old, built(server, client, dual("late", "10.0.0.9", "fd00::9", role="client")))
    assert joined == f"add element {AT} {name} {{ 10.0.0.9 }}\nadd element {AT} {name}-v6 {{ fd00::9 }}\n"
    gone = delta(old, built(client)).splitlines()
    assert gone[:2] == [
        f"delete element {AT} ingress-pods {{ 10.0.0.2 }}",
        f"delete element {AT} ingress-pods-v6 {{ fd00::2 }}",
    ]
    assert f"delete chain {AT} ingress-a/server" in gone
