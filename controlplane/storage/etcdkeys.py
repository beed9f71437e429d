"""Where each of the store's keys lives in etcd: upstream's `/registry/<resource>/<ns>/<name>` layout.

The store speaks in buckets named after the served resource (`deployments.apps`, `nodes`); kube-apiserver
writes most resources under their plain resource name and a few under historical names (nodes as
`minions`, services as `services/specs`, endpoints as `services/endpoints`, replication controllers as
`controllers`). Keeping upstream's layout means `etcdctl get --prefix /registry/pods/` and etcd tooling
written for Kubernetes find objects where they expect them. The mapping is one table both ways.
"""

from __future__ import annotations

PREFIX = "/registry/"


def normal_prefix(prefix: str) -> str:
    """--etcd-prefix as given (`/registry`, `registry/`) with one leading and one trailing slash."""
    return "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"


# Store bucket -> upstream's etcd resource prefix, where they differ beyond dropping the group.
_UPSTREAM: dict[str, str] = {
    "nodes": "minions",
    "services": "services/specs",
    "endpoints": "services/endpoints",
    "replicationcontrollers": "controllers",
}
_GROUPED = (
    "deployments.apps",
    "replicasets.apps",
    "controllerrevisions.apps",
    "daemonsets.apps",
    "statefulsets.apps",
    "jobs.batch",
    "cronjobs.batch",
    "leases.coordination.k8s.io",
    "priorityclasses.scheduling.k8s.io",
    "runtimeclasses.node.k8s.io",
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "clusterroles.rbac.authorization.k8s.io",
    "clusterrolebindings.rbac.authorization.k8s.io",
    "endpointslices.discovery.k8s.io",
    "poddisruptionbudgets.policy",
)
_UPSTREAM.update({bucket: bucket.split(".", 1)[0] for bucket in _GROUPED})
_BACK: dict[str, str] = {etcd: bucket for bucket, etcd in _UPSTREAM.items()}


def to_etcd(key: str, prefix: str = PREFIX) -> str:
    """A store key or key prefix (`/`, `/pods/`, `/pods/ns/`, `/pods/ns/name`) in etcd's layout, under
    `prefix` (upstream's --etcd-prefix, `/registry/` by default)."""
    bucket, sep, rest = key[1:].partition("/")
    if not bucket:
        return prefix
    return prefix + _UPSTREAM.get(bucket, bucket) + sep + rest


def from_etcd(key: str, prefix: str = PREFIX) -> str:
    """The store key of an etcd key under `prefix`."""
    rest = key[len(prefix) :]
    first, _, tail = rest.partition("/")
    if first == "services":  # two-level prefixes: services/specs, services/endpoints
        second, _, tail = tail.partition("/")
        return f"/{_BACK.get(first + '/' + second, first)}/{tail}"
    return f"/{_BACK.get(first, first)}/{tail}"


def prefix_end(prefix: bytes) -> bytes:
    """etcd's range end for a prefix: the prefix with its last byte incremented (b'' = to the end)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"
