"""From the ruleset last written to the one wanted: one `nft -f` transaction holding only what changed,
so a policy or pod change costs the kernel the chains and set elements it touches, not the whole
table (rewriting all of it took most of a change's second at 500 policies).

A transaction is atomic, so no packet ever meets a half-written state: a pod's chain is filled in the
same transaction that adds its address to a verdict map (a pod becoming isolated never jumps to an
empty chain, whose end would admit everything), and set elements of selector peers change one by one.
The order inside it is nft's: sets and chains exist before rules name them; map elements go before the
chains they jump to are flushed and deleted; sets go last, once no rule names them."""

from __future__ import annotations

from netpolicy.rules import EGRESS_MAP, FAMILY, INGRESS_MAP, TABLE, Ruleset, address_set, map_lines, set_lines


def delta(old: Ruleset, new: Ruleset, table: str = TABLE) -> str:
    """The transaction turning a table holding `old` into one holding `new` ("" when they are equal)."""
    at = f"{FAMILY} {table}"
    lines: list[str] = []
    was_sets, now_sets = {**old.guards, **old.sets}, {**new.guards, **new.sets}
    for name, ips in now_sets.items():
        if name not in was_sets:
            lines += set_lines(at, name, ips)
            continue
        gone, came = was_sets[name] - ips, ips - was_sets[name]
        if gone:
            lines.append(f"delete element {at} {name} {address_set(gone)}")
        if came:
            lines.append(f"add element {at} {name} {address_set(came)}")
    for name, rules in new.chains.items():
        before = old.chains.get(name)
        if before == rules:
            continue
        lines.append(f"{'flush' if before is not None else 'add'} chain {at} {name}")
        lines += [f"add rule {at} {name} {rule}" for rule in rules]
    for map_name, was, now in ((INGRESS_MAP, old.ingress, new.ingress), (EGRESS_MAP, old.egress, new.egress)):
        stale = {ip: chain for ip, chain in was.items() if now.get(ip) != chain}
        fresh = {ip: chain for ip, chain in now.items() if was.get(ip) != chain}
        lines += map_lines(at, "delete", map_name, stale)
        lines += map_lines(at, "add", map_name, fresh)
    for name in old.chains:
        if name not in new.chains:
            lines += [f"flush chain {at} {name}", f"delete chain {at} {name}"]
    lines += [f"delete set {at} {name}" for name in was_sets if name not in now_sets]
    return "\n".join(lines) + "\n" if lines else ""
