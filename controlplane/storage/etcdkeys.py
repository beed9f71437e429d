"""Where each of the store's keys lives in etcd: upstream's `/registry/<resource>/<ns>/<name>` layout.

The store speaks in buckets named after the served resource (`deployments.apps`, `nodes`); etcd holds
each under the path kube-apiserver writes it to, so that `etcdctl get --prefix /registry/pods/` and etcd
tooling written for Kubernetes find objects where they expect them. That path is a fact of each kind
(`Kind.etcd_prefix`, declared in its module): the API server hands the store a `KeyLayout` of them.
A bucket the layout does not name is laid out by upstream's generic rule, `<group>/<plural>` (what
apiextensions and the aggregator use, hence every custom resource), or its own name when it has no group
(the store's own records: `ranges/serviceips`, `masterleases`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

PREFIX = "/registry/"


def normal_prefix(prefix: str) -> str:
    """--etcd-prefix as given (`/registry`, `registry/`) with one leading and one trailing slash."""
    return "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"


def generic_name(bucket: str) -> str:
    """Upstream's generic resource prefix of a bucket: `<group>/<plural>`, or the bucket without a group."""
    plural, dot, group = bucket.partition(".")
    return f"{group}/{plural}" if dot else bucket


@dataclass(frozen=True)
class KeyLayout:
    """bucket -> its resource prefix in etcd (one or two path segments: `minions`, `services/specs`,
    `deployments`, `apiextensions.k8s.io/customresourcedefinitions`), for the buckets whose prefix is
    not `generic_name`'s."""

    names: Mapping[str, str] = field(default_factory=dict)
    _back: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        back: dict[str, str] = {}
        for bucket, name in self.names.items():
            if back.setdefault(name, bucket) != bucket:
                raise ValueError(f"{bucket} and {back[name]} would both be stored under {name}")
        object.__setattr__(self, "_back", back)

    def name(self, bucket: str) -> str:
        return self.names.get(bucket) or generic_name(bucket)

    def to_etcd(self, key: str, prefix: str = PREFIX) -> str:
        """A store key or key prefix (`/`, `/pods/`, `/pods/ns/`, `/pods/ns/name`) in etcd's layout, under
        `prefix` (upstream's --etcd-prefix, `/registry/` by default)."""
        bucket, sep, rest = key[1:].partition("/")
        if not bucket:
            return prefix
        return prefix + self.name(bucket) + sep + rest

    def from_etcd(self, key: str, prefix: str = PREFIX) -> str:
        """The store key of an etcd key under `prefix`."""
        first, _, tail = key[len(prefix) :].partition("/")
        second, _, tail2 = tail.partition("/")
        two = f"{first}/{second}"
        if two in self._back:  # services/specs, services/endpoints, <group>/<plural> named in the layout
            return f"/{self._back[two]}/{tail2}"
        if first in self._back:
            return f"/{self._back[first]}/{tail}"
        if "." in first:  # <group>/<plural>: a custom resource, or a resource served like one
            return f"/{second}.{first}/{tail2}"
        return f"/{first}/{tail}"


def prefix_end(prefix: bytes) -> bytes:
    """etcd's range end for a prefix: the prefix with its last byte incremented (b'' = to the end)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"
