"""`--authorization-mode`: which authorizers make up the server's chain, built from its watch cache.

Node,RBAC is the default (kubeadm's and kind's): the privileged-group authorizer first (system:masters
may do anything), then the Node authorizer, then RBAC. AlwaysAllow lets every authenticated request
through (the benchmarks' baseline, or a server run on purpose without authorization). The RBAC
resolver is always kept, since escalation checks of RBAC writes read it whatever the mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controlplane.apiserver.authz import AllowAll, AuthorizerChain
from controlplane.apiserver.nodeauthz.authorizer import NodeAuthorizer
from controlplane.apiserver.nodeauthz.graph import NodeGraph
from controlplane.apiserver.rbac.authorizer import PrivilegedGroups, RBACAuthorizer
from controlplane.apiserver.rbac.resolver import RuleResolver

if TYPE_CHECKING:
    from controlplane.storage.cache import WatchCache

MODES = ("AlwaysAllow", "Node", "RBAC")
DEFAULT_MODES = ("Node", "RBAC")


def parse_modes(text: str) -> tuple[str, ...]:
    """`Node,RBAC` -> ("Node", "RBAC"); ValueError naming an unknown or repeated mode."""
    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f'authorization-mode "{mode}" is not a valid mode (valid: {", ".join(MODES)})')
    if len(set(modes)) != len(modes):
        raise ValueError(f'authorization-mode "{text}" has a mode specified more than once')
    if not modes:
        raise ValueError("at least one authorization-mode must be passed")
    return modes


@dataclass
class Authorization:
    """The chain and the indexes its authorizers read; `start` after the watch cache has loaded."""

    modes: tuple[str, ...] = DEFAULT_MODES
    resolver: RuleResolver = field(default_factory=RuleResolver)
    graph: NodeGraph | None = None
    chain: AuthorizerChain = field(init=False)

    def __post_init__(self) -> None:
        authorizers: list[Any] = []
        if "RBAC" in self.modes or "Node" in self.modes:
            authorizers.append(PrivilegedGroups())
        for mode in self.modes:
            if mode == "AlwaysAllow":
                authorizers.append(AllowAll())
            elif mode == "Node":
                self.graph = NodeGraph()
                authorizers.append(NodeAuthorizer(self.graph))
            elif mode == "RBAC":
                authorizers.append(RBACAuthorizer(self.resolver))
        self.chain = AuthorizerChain(authorizers)

    def start(self, cache: WatchCache) -> None:
        self.resolver.start(cache)
        if self.graph is not None:
            self.graph.start(cache)


__all__ = ["DEFAULT_MODES", "MODES", "Authorization", "parse_modes"]
