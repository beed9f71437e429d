"""What the scheduler needs to know about one pod, computed once per pod object, not once per node.

Resource requests follow upstream's PodRequests: the sum of the app containers, raised to the largest
init-container step (an init container needs its own request plus the restartable "sidecar" init
containers started before it; sidecars also run beside the app containers and so add to the sum), then
pod-level requests where set, then the RuntimeClass overhead. Scoring uses the "non-zero" variant that
counts a container without a cpu/memory request as 100m / 200Mi, so empty pods still spread out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from controlplane.scheduler.affinityterms import (
    DO_NOT_SCHEDULE,
    NO_AFFINITY,
    SCHEDULE_ANYWAY,
    PodAffinity,
    SelectorError,
    SpreadConstraint,
    parse_affinity,
    parse_spread,
)
from controlplane.scheduler.smallids import SmallIds
from controlplane.scheduler.taints import Toleration, parse_tolerations
from kubeclient.nodeaffinity import Term, any_term_matches
from kubeclient.quantity import milli_value, value

Resources = dict[str, int]

DEFAULT_MILLI_CPU_REQUEST = 100  # upstream DefaultMilliCPURequest
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024  # upstream DefaultMemoryRequest (200Mi)
SCHEDULER_NAME = "default-scheduler"


@dataclass(frozen=True, slots=True)
class HostPort:
    ip: str
    protocol: str
    port: int

    def conflicts(self, other: HostPort) -> bool:
        """Same port and protocol, and one side listens on every address or both on the same one."""
        if self.port != other.port or self.protocol != other.protocol:
            return False
        return self.ip == other.ip or self.ip == "0.0.0.0" or other.ip == "0.0.0.0"


@dataclass(slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    obj: dict[str, Any]
    requests: Resources
    nonzero_cpu: int
    nonzero_memory: int
    host_ports: tuple[HostPort, ...]
    tolerations: tuple[Toleration, ...]
    node_selector: dict[str, str]
    required_terms: tuple[Term, ...] | None  # None: no required node affinity
    preferred_terms: tuple[tuple[int, Term], ...]
    images: tuple[str, ...]
    node_name: str
    scheduler_name: str
    priority: int
    phase: str
    deleting: bool
    gated: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    # The labels as a hashable key: affinity terms are matched once per distinct (namespace, labels)
    # in a decision, as pods of one template share them.
    label_key: tuple[tuple[str, str], ...] = ()
    affinity: PodAffinity = NO_AFFINITY
    # The hard (DoNotSchedule) and soft (ScheduleAnyway) topology spread constraints; `spread_given`:
    # the pod has constraints of its own (else the cluster's defaults apply to scoring).
    spread_hard: tuple[SpreadConstraint, ...] = ()
    spread_soft: tuple[SpreadConstraint, ...] = ()
    spread_given: bool = False
    # A selector in the affinity terms or spread constraints that does not parse: the pod cannot be
    # scheduled, and this is why.
    parse_error: str = ""
    preempt_never: bool = False
    nominated_node: str = ""
    start_time: str = ""
    # Non-zero requests in the order NodeResourcesFit checks them: cpu, memory, ephemeral-storage, rest.
    fit_checks: tuple[tuple[str, int], ...] = ()
    # The claimNames of its persistentVolumeClaim volumes (what upstream's NodeInfo counts per claim),
    # and the volumes VolumeRestrictions checks for a disk shared with another pod of the node.
    claims: tuple[str, ...] = ()
    disk_volumes: tuple[dict[str, Any], ...] = ()
    # A number for the pod's (nodeSelector, required node affinity), 0 when it has neither: pods of one
    # template share it, so a node's verdict on it is remembered (`nodeinfo.fits_node_affinity`).
    node_affinity_id: int = 0
    # A number for the pod's requests (and their non-zero variant): what NodeResourcesFit's verdict and
    # the resource scores depend on besides the node, remembered per node (`NodeInfo.by_requests`).
    requests_id: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def best_effort(self) -> bool:
        return not any(self.requests.values())


def node_matches(pod: PodInfo, labels: dict[str, str], node_name: str) -> bool:
    """The pod's nodeSelector and required node affinity against a node's labels."""
    for key, want in pod.node_selector.items():
        if labels.get(key) != want:
            return False
    if pod.required_terms is not None and not any_term_matches(pod.required_terms, labels, node_name):
        return False
    return True


node_affinity_ids = SmallIds()
requests_ids = SmallIds()


def node_affinity_id(node_selector: dict[str, str], required_terms: tuple[Term, ...] | None) -> int:
    if not node_selector and required_terms is None:
        return 0
    return node_affinity_ids((tuple(sorted(node_selector.items())), required_terms))


def resource_amount(name: str, text: str | int | float) -> int:
    """The integer the scheduler keeps for resource `name`: millicores for cpu, units otherwise, both
    rounded up as upstream's MilliValue()/Value() (a request of "0.1m" still takes one millicore)."""
    return milli_value(text) if name == "cpu" else value(text)


def _container_requests(container: dict[str, Any]) -> Resources:
    reqs = ((container.get("resources") or {}).get("requests")) or {}
    return {name: resource_amount(name, q) for name, q in reqs.items()}


def _nonzero(reqs: Resources, present: dict[str, Any]) -> Resources:
    """Fill a *missing* cpu/memory request with upstream's defaults; an explicit 0 stays 0."""
    out = dict(reqs)
    if "cpu" not in present:
        out["cpu"] = DEFAULT_MILLI_CPU_REQUEST
    if "memory" not in present:
        out["memory"] = DEFAULT_MEMORY_REQUEST
    return out


def _add(into: Resources, more: Resources) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def _raise_to(into: Resources, other: Resources) -> None:
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


def pod_requests(spec: dict[str, Any], nonzero: bool = False) -> Resources:
    """Effective requests of a pod spec (see the module docstring for the rule)."""

    def reqs_of(c: dict[str, Any]) -> Resources:
        r = _container_requests(c)
        if nonzero:
            r = _nonzero(r, ((c.get("resources") or {}).get("requests")) or {})
        return r

    total: Resources = {}
    for c in spec.get("containers") or ():
        _add(total, reqs_of(c))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for c in spec.get("initContainers") or ():
        r = reqs_of(c)
        if c.get("restartPolicy") == "Always":
            _add(total, r)
            _add(sidecars, r)
            step = dict(sidecars)
        else:
            step = dict(r)
            _add(step, sidecars)
        _raise_to(init_peak, step)
    _raise_to(total, init_peak)
    pod_level = ((spec.get("resources") or {}).get("requests")) or {}
    for name in ("cpu", "memory"):  # upstream's supported pod-level resources
        if name in pod_level:
            total[name] = resource_amount(name, pod_level[name])
    _add(total, {k: resource_amount(k, v) for k, v in (spec.get("overhead") or {}).items()})
    return total


def normalize_image(name: str) -> str:
    """Canonical image reference so `busybox`, `busybox:latest` and `docker.io/library/busybox:latest`
    count as the same image in ImageLocality (node status lists fully qualified names)."""
    if "@" not in name and name.rfind(":") <= name.rfind("/"):
        name += ":latest"
    if "/" not in name:
        return f"docker.io/library/{name}"
    first = name.split("/", 1)[0]
    if "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if name.startswith("docker.io/") and name.count("/") == 1:
        name = "docker.io/library/" + name[len("docker.io/") :]
    return name


def _host_ports(spec: dict[str, Any]) -> tuple[HostPort, ...]:
    out: list[HostPort] = []
    for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        for p in c.get("ports") or ():
            port = int(p.get("hostPort") or 0)
            if port > 0:
                out.append(HostPort(str(p.get("hostIP") or "0.0.0.0"), str(p.get("protocol") or "TCP"), port))
    return tuple(out)


# The volume sources two pods of one node may conflict on (upstream's VolumeRestrictions).
DISK_SOURCES = ("gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi")


def _claims(spec: dict[str, Any]) -> tuple[str, ...]:
    out = []
    for v in spec.get("volumes") or ():
        source = v.get("persistentVolumeClaim")
        if isinstance(source, dict):
            out.append(str(source.get("claimName") or ""))
    return tuple(out)


def pod_info(pod: dict[str, Any]) -> PodInfo:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    requests = pod_requests(spec)
    nz = pod_requests(spec, nonzero=True)
    node_affinity = ((spec.get("affinity") or {}).get("nodeAffinity")) or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    required_terms = (
        tuple(Term.from_dict(t) for t in required.get("nodeSelectorTerms") or ())
        if isinstance(required, dict)
        else None
    )
    preferred = tuple(
        (int(p.get("weight") or 0), Term.from_dict(p.get("preference")))
        for p in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    )
    images = tuple(
        normalize_image(str(c["image"]))
        for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
        if c.get("image")
    )
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    namespace = str(meta.get("namespace") or "")
    node_selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    affinity, spread_hard, spread_soft, parse_error = NO_AFFINITY, (), (), ""
    constraints = spec.get("topologySpreadConstraints") or ()
    try:
        affinity = parse_affinity(namespace, labels, spec.get("affinity"))
        spread_hard = parse_spread(labels, constraints, DO_NOT_SCHEDULE)
        spread_soft = parse_spread(labels, constraints, SCHEDULE_ANYWAY)
    except (SelectorError, ValueError, TypeError, AttributeError) as err:
        parse_error = str(err)
    return PodInfo(
        uid=str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"),
        namespace=namespace,
        name=str(meta.get("name") or ""),
        obj=pod,
        requests=requests,
        nonzero_cpu=nz.get("cpu", 0),
        nonzero_memory=nz.get("memory", 0),
        host_ports=_host_ports(spec),
        tolerations=parse_tolerations(spec.get("tolerations")),
        node_selector=node_selector,
        required_terms=required_terms,
        preferred_terms=preferred,
        images=images,
        node_name=str(spec.get("nodeName") or ""),
        scheduler_name=str(spec.get("schedulerName") or SCHEDULER_NAME),
        priority=int(spec.get("priority") or 0),
        phase=str(status.get("phase") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        gated=bool(spec.get("schedulingGates")),
        fit_checks=fit_order(requests),
        labels=labels,
        label_key=tuple(sorted(labels.items())),
        affinity=affinity,
        spread_hard=spread_hard,
        spread_soft=spread_soft,
        spread_given=bool(constraints),
        parse_error=parse_error,
        preempt_never=spec.get("preemptionPolicy") == "Never",
        nominated_node=str(status.get("nominatedNodeName") or ""),
        start_time=str(status.get("startTime") or ""),
        claims=_claims(spec),
        disk_volumes=tuple(
            v for v in spec.get("volumes") or () if any(isinstance(v.get(k), dict) for k in DISK_SOURCES)
        ),
        node_affinity_id=node_affinity_id(node_selector, required_terms),
        requests_id=requests_ids((tuple(sorted(requests.items())), nz.get("cpu", 0), nz.get("memory", 0))),
    )


_ABSENT = object()
# The metadata `pod_info` reads; the rest (resourceVersion, managedFields...) changes nothing in PodInfo.
_READ_META = ("uid", "namespace", "name", "labels", "deletionTimestamp")


def rebound(info: PodInfo, pod: dict[str, Any]) -> PodInfo | None:
    """`pod_info(pod)` for `pod`, a later version of `info`'s pod, taken from `info` when nothing
    but spec.nodeName and the status changed (what a binding changes: the watch shows every pod the
    scheduler placed once more, bound, and parsing it afresh cost as much as a decision's scoring);
    None when anything else `pod_info` reads differs, for the caller to parse the pod."""
    meta, known_meta = pod.get("metadata") or {}, info.obj.get("metadata") or {}
    for key in _READ_META:
        if meta.get(key) != known_meta.get(key):
            return None
    spec, known_spec = pod.get("spec") or {}, info.obj.get("spec") or {}
    if len(spec) - ("nodeName" in spec) != len(known_spec) - ("nodeName" in known_spec):
        return None
    for key, item in spec.items():
        if key != "nodeName" and known_spec.get(key, _ABSENT) != item:
            return None
    status = pod.get("status") or {}
    return replace(
        info,
        obj=pod,
        node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or ""),
        nominated_node=str(status.get("nominatedNodeName") or ""),
        start_time=str(status.get("startTime") or ""),
    )


_FIRST = ("cpu", "memory", "ephemeral-storage")


def fit_order(requests: Resources) -> tuple[tuple[str, int], ...]:
    rest = sorted(k for k in requests if k not in _FIRST and k != "pods")
    return tuple((k, requests[k]) for k in (*_FIRST, *rest) if requests.get(k, 0) > 0)
