"""The labels each node of a stack registers with: what `pykubelet up --node-labels` gives every node and
`--zones` deals out, round-robin, as `topology.kubernetes.io/zone`.

This is how kind's cluster config (a node's `labels`) and kubeadm's `kubeletExtraArgs: node-labels` label a
node: through the kubelet's own `--node-labels` at registration, so the labels are on the Node from its
first moment and a node can set only what NodeRestriction lets a kubelet set. Node 1 gets the first zone,
node 2 the second, and so on around the list: three nodes in zones a,b are a, b, a. No region is made up:
kind and kubeadm set none; `--node-labels topology.kubernetes.io/region=...` gives one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agent.nodelabels import NodeLabelError, parse_node_labels, validate_node_labels
from kubeclient.kubeletlabels import ZONE_LABEL
from kubeclient.names import label_value


def parse_zones(text: str) -> tuple[str, ...]:
    """`zone-a,zone-b`: each a label value (NodeLabelError with apimachinery's message if not)."""
    zones = tuple(z.strip() for z in text.split(",") if z.strip())
    for zone in zones:
        if problems := label_value(zone):
            raise NodeLabelError(f"invalid zone '{zone}': {', '.join(problems)}")
    return zones


def checked_labels(text: str, zones: Sequence[str]) -> dict[str, str]:
    """`--node-labels` as the agent will read and check it, refused here already (NodeLabelError) so `up`
    fails before it starts anything rather than at a node's agent."""
    labels = parse_node_labels(text)
    validate_node_labels(labels)
    if zones and ZONE_LABEL in labels:
        raise NodeLabelError(f"--zones and a {ZONE_LABEL} in --node-labels: give one of them")
    return labels


def labels_of(index: int, labels: Mapping[str, str], zones: Sequence[str]) -> dict[str, str]:
    """Node `index`'s (1, 2, ...): every node's labels, and its zone when zones are given."""
    out = dict(labels)
    if zones:
        out[ZONE_LABEL] = zones[(index - 1) % len(zones)]
    return out


def node_labels_flag(labels: Mapping[str, str]) -> str:
    """The `--node-labels` value: `k1=v1,k2=v2`, in key order ("" for none)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def node_labels_args(flag: str) -> list[str]:
    """The agent's flag for a `--node-labels` value, none for ""."""
    return ["--node-labels", flag] if flag else []
