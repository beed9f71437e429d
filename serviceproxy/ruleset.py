"""An nftables table as data (chains with their rules, sets and maps with their elements) and the
`nft -f` transactions that write it: a full sync (every chain flushed and rewritten, every map
refilled, whatever the kernel holds beyond the wanted set deleted) or a partial sync (only what
differs from the last ruleset written). Either is one transaction: the kernel applies all of it or
none, so a failed sync leaves the previous ruleset in place.

Affinity sets are dynamic (the kernel fills them as clients connect); a sync declares them but never
flushes them, so ClientIP affinity survives resyncs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Chain:
    name: str
    rules: tuple[str, ...] = ()
    # "type nat hook prerouting priority dstnat" for base chains, "" for regular ones.
    hook: str = ""
    comment: str = ""


@dataclass(frozen=True)
class NftSet:
    """A set (`value` None for every element) or a verdict map."""

    name: str
    type: str
    is_map: bool = False
    flags: tuple[str, ...] = ()
    timeout: int | None = None
    comment: str = ""
    elements: tuple[tuple[str, str | None], ...] = ()
    dynamic: bool = False  # filled by the kernel (affinity): declared, never flushed

    @property
    def keyword(self) -> str:
        return "map" if self.is_map else "set"

    def declaration(self) -> str:
        parts = [f"type {self.type}" + (" : verdict" if self.is_map else "") + ";"]
        if self.flags:
            parts.append(f"flags {','.join(self.flags)};")
        if self.timeout is not None:
            parts.append(f"timeout {self.timeout}s;")
        if self.comment:
            parts.append(f"comment {quote(self.comment)};")
        return " ".join(parts)


@dataclass
class Ruleset:
    chains: dict[str, Chain] = field(default_factory=dict)
    sets: dict[str, NftSet] = field(default_factory=dict)

    def add_chain(self, chain: Chain) -> None:
        self.chains[chain.name] = chain

    def add_set(self, nft_set: NftSet) -> None:
        self.sets[nft_set.name] = nft_set


def quote(text: str) -> str:
    return '"' + text.replace("\\", "").replace('"', "") + '"'


def _element(key: str, value: str | None) -> str:
    return key if value is None else f"{key} : {value}"


@dataclass(frozen=True)
class Existing:
    """What the kernel's table holds now (from `nft -j list table`): chain names, and each set or
    map's keyword and timeout."""

    chains: frozenset[str] = frozenset()
    sets: tuple[tuple[str, str, int | None], ...] = ()  # (name, "set" | "map", timeout)

    def set_info(self) -> dict[str, tuple[str, int | None]]:
        return {name: (keyword, timeout) for name, keyword, timeout in self.sets}


class Writer:
    """Renders transactions for one table (`family` ip, `table` name)."""

    def __init__(self, table: str, family: str = "ip") -> None:
        self.table = table
        self.family = family
        self.at = f"{family} {table}"

    def _chain_decl(self, chain: Chain) -> str:
        body = []
        if chain.hook:
            body.append(f"{chain.hook}; policy accept;")
        if chain.comment:
            body.append(f"comment {quote(chain.comment)};")
        return f"add chain {self.at} {chain.name}" + (" { " + " ".join(body) + " }" if body else "")

    def _rules(self, chain: Chain) -> list[str]:
        return [f"add rule {self.at} {chain.name} {rule}" for rule in chain.rules]

    def _set_decl(self, nft_set: NftSet) -> str:
        return f"add {nft_set.keyword} {self.at} {nft_set.name} {{ {nft_set.declaration()} }}"

    def _add_elements(self, nft_set: NftSet, elements: list[tuple[str, str | None]]) -> list[str]:
        if not elements:
            return []
        return [
            f"add element {self.at} {nft_set.name} {{ "
            + ", ".join(_element(k, v) for k, v in elements)
            + " }"
        ]

    def full(self, wanted: Ruleset, existing: Existing) -> str:
        """Everything rewritten; what the kernel holds beyond `wanted` is deleted."""
        lines = [f"add table {self.at} {{ comment {quote('rules for kube-proxy')}; }}"]
        kernel_sets = existing.set_info()
        stale_chains = sorted(existing.chains - set(wanted.chains))
        for chain in wanted.chains.values():
            lines.append(self._chain_decl(chain))
        for name in sorted(set(wanted.chains) | existing.chains):
            lines.append(f"flush chain {self.at} {name}")
        for nft_set in wanted.sets.values():
            known = kernel_sets.get(nft_set.name)
            if known is not None and (
                known[0] != nft_set.keyword or (nft_set.dynamic and known[1] != nft_set.timeout)
            ):
                lines.append(f"delete {known[0]} {self.at} {nft_set.name}")  # its shape changed: made anew
            lines.append(self._set_decl(nft_set))
            if not nft_set.dynamic:
                lines.append(f"flush {nft_set.keyword} {self.at} {nft_set.name}")
        for chain in wanted.chains.values():
            lines += self._rules(chain)
        for nft_set in wanted.sets.values():
            if not nft_set.dynamic:
                lines += self._add_elements(nft_set, list(nft_set.elements))
        for name in stale_chains:
            lines.append(f"delete chain {self.at} {name}")
        for name, (keyword, _timeout) in sorted(kernel_sets.items()):
            if name not in wanted.sets:
                lines.append(f"delete {keyword} {self.at} {name}")
        return "\n".join(lines) + "\n"

    def partial(self, old: Ruleset, new: Ruleset) -> str:
        """Only what differs between the last ruleset written and the wanted one ("" when nothing)."""
        if any(
            c.name in old.chains
            and (old.chains[c.name].hook, old.chains[c.name].comment) != (c.hook, c.comment)
            for c in new.chains.values()
        ):
            return self.full(
                new,
                Existing(
                    frozenset(old.chains), tuple((s.name, s.keyword, s.timeout) for s in old.sets.values())
                ),
            )
        remade = {
            n for n, s in new.sets.items() if n in old.sets and old.sets[n].declaration() != s.declaration()
        }
        touched = [
            c
            for c in new.chains.values()
            if old.chains.get(c.name) != c or any(f"@{n}" in rule for n in remade for rule in c.rules)
        ]
        lines: list[str] = []
        for nft_set in new.sets.values():
            if nft_set.name not in old.sets:
                lines.append(self._set_decl(nft_set))
        for chain in new.chains.values():
            if chain.name not in old.chains:
                lines.append(self._chain_decl(chain))
        for chain in touched:
            if chain.name in old.chains:
                lines.append(f"flush chain {self.at} {chain.name}")
        removed = [name for name in old.chains if name not in new.chains]
        for name in removed:
            lines.append(f"flush chain {self.at} {name}")
        for name in sorted(remade):
            lines.append(f"delete {old.sets[name].keyword} {self.at} {name}")
            lines.append(self._set_decl(new.sets[name]))
        for chain in touched:
            lines += self._rules(chain)
        for nft_set in new.sets.values():
            if nft_set.dynamic:
                continue
            before = (
                {}
                if nft_set.name in remade
                else dict(old.sets[nft_set.name].elements)
                if nft_set.name in old.sets
                else {}
            )
            wanted = dict(nft_set.elements)
            gone = [k for k, v in before.items() if k not in wanted or wanted[k] != v]
            if gone:
                lines.append(f"delete element {self.at} {nft_set.name} {{ " + ", ".join(gone) + " }")
            fresh = [(k, v) for k, v in nft_set.elements if k not in before or before[k] != v]
            lines += self._add_elements(nft_set, fresh)
        for name in removed:
            lines.append(f"delete chain {self.at} {name}")
        for name, nft_set in old.sets.items():
            if name not in new.sets:
                lines.append(f"delete {nft_set.keyword} {self.at} {name}")
        return "\n".join(lines) + "\n" if lines else ""

    def delete_table(self) -> str:
        return f"add table {self.at}\ndelete table {self.at}\n"
