"""The kinds a journey starts from or passes through: the names a person types (`deploy/web`,
`deployments.apps/web`, `svc/web`) and where each lives in the API. One table, read by the collector, the
timeline and the CLI."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    kind: str  # Deployment
    group_version: str  # apps/v1
    plural: str  # deployments
    aliases: tuple[str, ...] = ()
    namespaced: bool = True

    @property
    def base(self) -> str:
        return (
            f"/api/{self.group_version}" if "/" not in self.group_version else f"/apis/{self.group_version}"
        )

    def collection(self, namespace: str | None) -> str:
        if self.namespaced and namespace:
            return f"{self.base}/namespaces/{namespace}/{self.plural}"
        return f"{self.base}/{self.plural}"

    def path(self, namespace: str, name: str) -> str:
        return f"{self.collection(namespace)}/{name}"

    @property
    def resource(self) -> str:
        """`deployments.apps` (kubectl's resource.group)."""
        group = self.group_version.rpartition("/")[0]
        return f"{self.plural}.{group}" if group else self.plural

    @property
    def group(self) -> str:
        return self.group_version.rpartition("/")[0]


KINDS: tuple[Kind, ...] = (
    Kind("Deployment", "apps/v1", "deployments", ("deployment", "deploy")),
    Kind("ReplicaSet", "apps/v1", "replicasets", ("replicaset", "rs")),
    Kind("StatefulSet", "apps/v1", "statefulsets", ("statefulset", "sts")),
    Kind("DaemonSet", "apps/v1", "daemonsets", ("daemonset", "ds")),
    Kind("Job", "batch/v1", "jobs", ("job",)),
    Kind("CronJob", "batch/v1", "cronjobs", ("cronjob", "cj")),
    Kind("Pod", "v1", "pods", ("pod", "po")),
    Kind("Service", "v1", "services", ("service", "svc")),
    Kind("EndpointSlice", "discovery.k8s.io/v1", "endpointslices", ("endpointslice",)),
    Kind("Ingress", "networking.k8s.io/v1", "ingresses", ("ingress", "ing")),
    Kind("HTTPRoute", "gateway.networking.k8s.io/v1", "httproutes", ("httproute",)),
    Kind("Event", "v1", "events", ("event", "ev")),
)
BY_KIND: dict[str, Kind] = {k.kind: k for k in KINDS}


def resolve(text: str) -> tuple[Kind, str]:
    """`KIND/NAME` -> (Kind, name); ValueError naming what was wrong."""
    kind_text, sep, name = text.partition("/")
    if not sep or not name or not kind_text:
        raise ValueError(f'expected KIND/NAME (e.g. deployment/web), got "{text}"')
    wanted = kind_text.lower()
    for kind in KINDS:
        names = {kind.kind.lower(), kind.plural, kind.resource, *kind.aliases}
        if wanted in names:
            return kind, name
    known = ", ".join(k.kind.lower() for k in KINDS if k.kind != "Event")
    raise ValueError(f'unknown kind "{kind_text}" (one of: {known})')
