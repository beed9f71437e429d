"""`--node-labels`: the labels the agent registers its Node with, read and checked as upstream's kubelet does.

The flag is a list of `key=value` pairs separated by commas (component-base's MapStringString: a pair without
'=' is malformed). Before anything starts, the labels are checked as cmd/kubelet's ValidateKubeletFlags
does: a key of the reserved kubernetes.io / k8s.io domains must be one a kubelet may set (the list
NodeRestriction enforces on the API side, kubeclient.kubeletlabels), else the agent refuses to start rather
than loop on the 403 its registration would get; then every key must be a qualified name and every value a
label value, with apimachinery's messages.
"""

from __future__ import annotations

from kubeclient.kubeletlabels import (
    KUBELET_LABEL_NAMESPACES,
    KUBELET_LABELS,
    is_kubelet_label,
    is_kubernetes_label,
)
from kubeclient.names import label_value, qualified_name


class NodeLabelError(ValueError):
    """A --node-labels value the agent refuses, with upstream's text."""


def parse_node_labels(text: str) -> dict[str, str]:
    """`k1=v1,k2=v2` (spaces around keys and values trimmed, empty items skipped)."""
    labels: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise NodeLabelError(
                f'invalid argument "{text}" for "--node-labels" flag: malformed pair, expect string=string'
            )
        labels[key.strip()] = value.strip()
    return labels


def validate_node_labels(labels: dict[str, str]) -> None:
    """Raise NodeLabelError with upstream's message when a label may not be registered."""
    unknown = sorted(k for k in labels if is_kubernetes_label(k) and not is_kubelet_label(k))
    if unknown:
        raise NodeLabelError(
            f"unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [{' '.join(unknown)}]\n"
            "--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix "
            f"({', '.join(KUBELET_LABEL_NAMESPACES)}) or be in the specifically allowed set "
            f"({', '.join(KUBELET_LABELS)})"
        )
    invalid: dict[str, list[str]] = {}
    for key, value in sorted(labels.items()):
        if problems := qualified_name(key):
            invalid.setdefault(key, []).extend(problems)
        if problems := label_value(value):
            invalid.setdefault(value, []).extend(problems)
    if invalid:
        parts = [f"'{what}' - {', '.join(problems)}" for what, problems in invalid.items()]
        raise NodeLabelError(f"invalid node labels: {'; '.join(parts)}")
