"""The labels a kubelet may put on its own Node (upstream's k8s.io/kubelet/pkg/apis well-known labels).

Two sides read the one list: the agent, which refuses to start with a `--node-labels` outside it (as
upstream's kubelet validates its flags), and the API server's NodeRestriction admission, which refuses a
node's write that sets one. Labels of the kubernetes.io and k8s.io domains are reserved: a kubelet may set
only those named here or in the kubelet.kubernetes.io and node.kubernetes.io namespaces (so a node can
never steer privileged workloads to itself with, say, node-role.kubernetes.io/control-plane).
"""

from __future__ import annotations

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
# kubeletapis.KubeletLabels(): the reserved-domain keys a kubelet may set, listed as upstream sorts them.
KUBELET_LABELS = (
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    REGION_LABEL,
    ZONE_LABEL,
)
# kubeletapis.KubeletLabelNamespaces(): namespaces (and their subdomains) a kubelet may use freely.
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
RESERVED_DOMAINS = ("kubernetes.io", "k8s.io")


def label_namespace(key: str) -> str:
    """The prefix before the '/', "" for a key without one."""
    prefix, sep, _ = key.partition("/")
    return prefix if sep else ""


def in_domain(namespace: str, domain: str) -> bool:
    """The domain itself or one of its subdomains."""
    return namespace == domain or namespace.endswith("." + domain)


def is_kubernetes_label(key: str) -> bool:
    """A key of the reserved kubernetes.io or k8s.io domains (or their subdomains)."""
    namespace = label_namespace(key)
    return any(in_domain(namespace, domain) for domain in RESERVED_DOMAINS)


def is_kubelet_label(key: str) -> bool:
    """IsKubeletLabel: a key a kubelet may set on its own Node."""
    namespace = label_namespace(key)
    return key in KUBELET_LABELS or any(in_domain(namespace, d) for d in KUBELET_LABEL_NAMESPACES)
