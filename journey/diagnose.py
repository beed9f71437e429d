"""Which boundary stopped making progress: walk them in the order a request and then a workload cross
them (API, authentication, authorization, the owning controller, scheduling, the node, the runtime,
probes, Service endpoints, the dataplane) and stop at the first that is stalled, with its evidence and a
plain next step.

`diagnose(facts)` is pure: the CLI reads the facts (an access review, the journey, the nodes and their
Leases) and this module judges them, one function per boundary, so each is tested on recorded objects.
A boundary answers ok, stalled, or skipped (nothing to judge: no pods yet, no Service, a dataplane
that could not be tried). The dataplane is the one boundary the CLI tries rather than reads: each
Service's cluster address, and one of its endpoints, connected to from inside a pod (`dataplane.py`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from journey.auditlog import is_admission_denial, is_rbac_denial
from journey.graph import Journey, Obj, label, meta, uid_of
from journey.policies import isolation
from journey.routes import GRACE, ROUTE_KINDS, RouteFacts, conditions, route_problem, summary
from journey.timeline import parse_time

OK, STALLED, SKIPPED = "ok", "stalled", "skipped"
HEALTHY, PROGRESSING, UNKNOWN = "healthy", "progressing", "cannot tell"
EXIT = {HEALTHY: 0, PROGRESSING: 0, STALLED: 1, UNKNOWN: 2}
RUNTIME_WAITING = (
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
    "PostStartHookError",
)
PRESSURE = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
CONTROLLED = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob")
# What each owning controller writes for a journey to go on, under its own identity (kube-controller-manager
# --use-service-account-credentials, as kubeadm runs it): kind -> (service account in kube-system, verb,
# group, resource).
CONTROLLER_NEEDS: dict[str, tuple[str, str, str, str]] = {
    "Deployment": ("deployment-controller", "create", "apps", "replicasets"),
    "ReplicaSet": ("replicaset-controller", "create", "", "pods"),
    "StatefulSet": ("statefulset-controller", "create", "", "pods"),
    "DaemonSet": ("daemon-set-controller", "create", "", "pods"),
    "Job": ("job-controller", "create", "", "pods"),
    "CronJob": ("cronjob-controller", "create", "batch", "jobs"),
    "Service": ("endpointslice-controller", "create", "discovery.k8s.io", "endpointslices"),
}


@dataclass
class Facts:
    """What the CLI read. `api_error`/`auth_error`: why the API or authentication failed (None: fine)."""

    server: str = ""
    api_error: str | None = None
    auth_error: str | None = None
    user: dict[str, Any] = field(default_factory=dict)
    denied: list[str] = field(default_factory=list)  # "list events" the caller may not do
    # What an owning controller's identity may not do ("system:serviceaccount:kube-system:x may not create
    # pods -n ns"), from SubjectAccessReviews; the identities checked.
    controller_denied: list[str] = field(default_factory=list)
    controllers_checked: list[str] = field(default_factory=list)
    rejections: list[str] = field(default_factory=list)  # admission refusals the audit log holds
    journey: Journey | None = None
    missing: str | None = None  # the root does not exist
    nodes: dict[str, Obj] = field(default_factory=dict)
    leases: dict[str, Obj] = field(default_factory=dict)
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    # The dataplane tried for real: each Service's traffic from inside a pod (dataplane.py), and why
    # nothing was tried when nothing was.
    probes: list[Probe] = field(default_factory=list)
    probes_note: str = ""
    # The NetworkPolicies of the journey's namespace (policies.py); why they could not be read.
    policies: list[Obj] = field(default_factory=list)
    policies_note: str = ""
    routes: RouteFacts = field(default_factory=RouteFacts)  # for an Ingress or HTTPRoute root


@dataclass(frozen=True)
class Probe:
    """One Service tried from inside a pod: its cluster address, and one of its ready endpoints the same
    way, so a proxy that does not forward is told apart from a pod that does not listen. `None`: could
    not be tried (`note` says why)."""

    service: str  # "Service web"
    address: str  # "10.96.4.2:80"
    endpoint: str  # "10.244.0.5:8080"
    from_pod: str  # "web-7d9c-a"
    node: str  # that pod's node
    service_answered: bool | None
    endpoint_answered: bool | None
    note: str = ""


@dataclass
class Finding:
    boundary: str
    state: str  # ok, stalled, skipped
    message: str
    evidence: list[str] = field(default_factory=list)
    next_step: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "boundary": self.boundary,
            "state": self.state,
            "message": self.message,
            "evidence": self.evidence,
            "next": self.next_step,
        }


@dataclass
class Verdict:
    status: str  # healthy, progressing, stalled, cannot tell
    findings: list[Finding]
    summary: str

    @property
    def exit_code(self) -> int:
        return EXIT[self.status]

    @property
    def stalled(self) -> Finding | None:
        return next((f for f in self.findings if f.state == STALLED), None)

    def to_dict(self) -> dict[str, Any]:
        stalled = self.stalled
        return {
            "status": self.status,
            "summary": self.summary,
            "boundary": stalled.boundary if stalled else None,
            "findings": [f.to_dict() for f in self.findings],
        }


def _ok(boundary: str, message: str, evidence: list[str] | None = None) -> Finding:
    return Finding(boundary, OK, message, evidence or [])


def _skip(boundary: str, message: str) -> Finding:
    return Finding(boundary, SKIPPED, message)


def _stall(boundary: str, message: str, evidence: list[str], next_step: str) -> Finding:
    return Finding(boundary, STALLED, message, evidence, next_step)


def _conditions(obj: Obj) -> dict[str, dict[str, Any]]:
    return {str(c.get("type")): c for c in (obj.get("status") or {}).get("conditions") or ()}


def _pods(facts: Facts) -> list[Obj]:
    return facts.journey.of_kind("Pod") if facts.journey else []


def _events(facts: Facts, uids: set[str], reasons: tuple[str, ...]) -> list[Obj]:
    if not facts.journey:
        return []
    found = [
        e
        for e in facts.journey.events
        if e.get("reason") in reasons and (e.get("involvedObject") or {}).get("uid") in uids
    ]
    return sorted(found, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


# --- the boundaries, in order --------------------------------------------------------------------------


def check_api(facts: Facts) -> Finding:
    if facts.api_error:
        return _stall(
            "api",
            f"cannot reach the API server {facts.server}: {facts.api_error}",
            [facts.api_error],
            "check the server address in the kubeconfig and that the API server runs",
        )
    return _ok("api", f"{facts.server} answers")


def check_authentication(facts: Facts) -> Finding:
    if facts.auth_error:
        return _stall(
            "authentication",
            f"the API server does not accept these credentials: {facts.auth_error}",
            [facts.auth_error],
            "renew the kubeconfig's certificate or token",
        )
    who = facts.user.get("username") or "?"
    return _ok(
        "authentication", f"authenticated as {who}", [f"groups: {', '.join(facts.user.get('groups') or ())}"]
    )


def check_authorization(facts: Facts) -> Finding:
    if facts.denied:
        first = facts.denied[0]
        return _stall(
            "authorization",
            f"{facts.user.get('username') or 'the caller'} may not {first}",
            [f"denied: {d}" for d in facts.denied],
            f"grant the caller a Role allowing {first} (kubectl auth can-i {first})",
        )
    if facts.controller_denied:
        first = facts.controller_denied[0]
        who, _, what = first.partition(" may not ")
        controller = who.rpartition(":")[2]
        return _stall(
            "authorization",
            first,
            [f"denied: {d}" for d in facts.controller_denied],
            f"restore the ClusterRole system:controller:{controller} and its ClusterRoleBinding "
            f"(kubectl auth can-i {what} --as={who})",
        )
    refused = _rbac_refusals(facts)
    if refused:
        return _stall(
            "authorization",
            refused[-1],
            refused[-3:],
            "restore the RBAC the controller's identity needs (its ClusterRole system:controller:<name> "
            "and the binding)",
        )
    checked = [f"{c} may do what the journey needs" for c in facts.controllers_checked]
    return _ok("authorization", "the caller may read every object of the journey", checked)


def _rbac_refusals(facts: Facts) -> list[str]:
    """FailedCreate events in which RBAC refused an owning controller's write (`is forbidden: User
    "system:serviceaccount:kube-system:replicaset-controller" cannot create resource "pods"`)."""
    if facts.journey is None:
        return []
    uids = {uid_of(o) for o in facts.journey.objects}
    return [
        f"{(ev.get('involvedObject') or {}).get('kind')} {(ev.get('involvedObject') or {}).get('name')}: "
        f"FailedCreate - {ev.get('message')}"
        for ev in _events(facts, uids, ("FailedCreate",))
        if is_rbac_denial(str(ev.get("message") or ""))
    ]


def controller_needs(journey: Journey) -> list[tuple[str, str, str, str, str]]:
    """(service account, verb, group, resource, namespace) each owning controller of the journey needs."""
    out: list[tuple[str, str, str, str, str]] = []
    for obj in journey.objects:
        need = CONTROLLER_NEEDS.get(str(obj.get("kind") or ""))
        if need is None or (obj.get("kind") == "Service" and not (obj.get("spec") or {}).get("selector")):
            continue
        entry = (*need, str(meta(obj).get("namespace") or ""))
        if entry not in out:
            out.append(entry)
    return out


def _admission_refusals(facts: Facts) -> list[str]:
    """Admission's refusals of the journey's writes: the owning controllers' FailedCreate events and
    ReplicaFailure/Failed conditions whose message is an admission refusal, and the audit log's."""
    found: list[str] = []
    journey = facts.journey
    if journey is not None:
        uids = {uid_of(o) for o in journey.objects}
        for ev in _events(facts, uids, ("FailedCreate",)):
            message = str(ev.get("message") or "")
            if is_admission_denial(message):
                involved = ev.get("involvedObject") or {}
                found.append(f"{involved.get('kind')} {involved.get('name')}: FailedCreate - {message}")
        for obj in journey.objects:
            for cond in _conditions(obj).values():
                message = str(cond.get("message") or "")
                failed = cond.get("type") in ("ReplicaFailure", "Failed") and cond.get("status") == "True"
                if failed and is_admission_denial(message):
                    found.append(f"{label(obj)} {cond.get('type')}=True: {message}")
    return found + facts.rejections


def _admission_next(message: str) -> str:
    if "webhook" in message:
        return (
            "the admission webhook named in the message refuses or cannot be reached: check its Service, "
            "its logs and its failurePolicy (kubectl get validatingwebhookconfigurations,"
            "mutatingwebhookconfigurations)"
        )
    if "exceeded quota" in message:
        return "raise the ResourceQuota or lower the requests (kubectl describe resourcequota)"
    if "PodSecurity" in message:
        return "make the pod template meet the namespace's Pod Security level, or change the level"
    return "change the object (or the admission configuration) so that what the message names is met"


def check_admission(facts: Facts) -> Finding:
    refusals = _admission_refusals(facts)
    if refusals:
        newest = refusals[-1]
        return _stall("admission", newest, refusals[-5:], _admission_next(newest))
    return _ok("admission", "no write of the journey was refused in admission")


def check_controller(facts: Facts) -> Finding:
    journey = facts.journey
    assert journey is not None
    controlled = [o for o in journey.objects if o.get("kind") in CONTROLLED]
    if not controlled:
        return _skip("controller", f"{label(journey.root)} has no owning controller")
    evidence: list[str] = []
    for obj in controlled:
        m, status = meta(obj), obj.get("status") or {}
        generation, observed = m.get("generation"), status.get("observedGeneration")
        if generation and observed is not None and observed < generation:
            return _stall(
                "controller",
                f"{label(obj)}: the controller has not observed generation {generation} "
                f"(observedGeneration {observed})",
                [f"generation {generation}, observed {observed}"],
                "check that kube-controller-manager runs and its logs for this object",
            )
        conds = _conditions(obj)
        prog = conds.get("Progressing")
        if prog and prog.get("status") == "False" and prog.get("reason") == "ProgressDeadlineExceeded":
            evidence.append(f"{label(obj)} Progressing=False: {prog.get('message')}")
            return _stall(
                "controller",
                f"{label(obj)}: ProgressDeadlineExceeded - {prog.get('message')}",
                evidence,
                "look at the newest ReplicaSet's pods: the boundaries below say why",
            )
        failure = conds.get("ReplicaFailure") or (conds.get("Failed") if obj.get("kind") == "Job" else None)
        if failure and failure.get("status") == "True":
            return _stall(
                "controller",
                f"{label(obj)}: {failure.get('reason')} - {failure.get('message')}",
                [f"{label(obj)} {failure.get('type')}=True"],
                "fix what the message names (a ResourceQuota, an admission policy, the pod template)",
            )
        evidence.append(f"{label(obj)} generation {generation}, observed {observed}")
    failed = _events(facts, {uid_of(o) for o in controlled}, ("FailedCreate",))
    if failed:
        ev = failed[-1]
        return _stall(
            "controller",
            f"{(ev.get('involvedObject') or {}).get('kind')} "
            f"{(ev.get('involvedObject') or {}).get('name')}: FailedCreate - {ev.get('message')}",
            [str(e.get("message")) for e in failed[-3:]],
            "fix what rejects the pods (quota, admission webhook, PodSecurity, a missing ServiceAccount)",
        )
    return _ok("controller", "the controllers have observed every generation", evidence)


def check_routes(facts: Facts) -> Finding:
    """An Ingress's or HTTPRoute's own state (routes.py); other roots skip it."""
    journey = facts.journey
    assert journey is not None
    root = journey.root
    if root.get("kind") not in ROUTE_KINDS:
        return _skip("routes", f"{label(root)} is not an Ingress or HTTPRoute")
    created = parse_time(meta(root).get("creationTimestamp"))
    young = created is not None and (facts.now - created[0]).total_seconds() < GRACE
    problem = route_problem(root, journey.of_kind("Service"), facts.routes, young)
    if problem is not None:
        return _stall("routes", f"{label(root)}: {problem.message}", problem.evidence, problem.next_step)
    return _ok("routes", f"{label(root)}: {summary(root)}", [*conditions(root), *facts.routes.notes])


def check_scheduling(facts: Facts) -> Finding:
    pods = [p for p in _pods(facts) if not meta(p).get("deletionTimestamp")]
    if not pods:
        return _skip("scheduling", "no pods")
    waiting = [
        (p, _conditions(p).get("PodScheduled")) for p in pods if not (p.get("spec") or {}).get("nodeName")
    ]
    stuck = [(p, c) for p, c in waiting if c and c.get("status") == "False"]
    if stuck:
        pod, cond = stuck[0]
        message = str(cond.get("message") or cond.get("reason"))
        return _stall(
            "scheduling",
            message,
            [f"{label(p)} PodScheduled=False {c.get('reason')}: {c.get('message')}" for p, c in stuck[:5]],
            "make a node fit: relax the nodeSelector/affinity/tolerations or resources, or add a node",
        )
    if waiting:
        return _ok(
            "scheduling", f"{len(waiting)} pods waiting for the scheduler", [label(p) for p, _ in waiting[:5]]
        )
    return _ok(
        "scheduling", f"{len(pods)} pods bound", sorted({f"node {p['spec']['nodeName']}" for p in pods})
    )


def _lease_age(lease: Obj, now: dt.datetime) -> tuple[float, int] | None:
    spec = lease.get("spec") or {}
    renewed = parse_time(spec.get("renewTime"))
    if not renewed:
        return None
    return (now - renewed[0]).total_seconds(), int(spec.get("leaseDurationSeconds") or 40)


def _node_problem(name: str, facts: Facts) -> tuple[str, list[str]] | None:
    node = facts.nodes.get(name)
    if node is None:
        return None
    evidence: list[str] = []
    conds = _conditions(node)
    ready = conds.get("Ready")
    lease = facts.leases.get(name)
    age = _lease_age(lease, facts.now) if lease else None
    if age:
        evidence.append(f"lease kube-node-lease/{name} renewed {age[0]:.0f} s ago (duration {age[1]} s)")
    taints = [f"{t.get('key')}:{t.get('effect')}" for t in (node.get("spec") or {}).get("taints") or ()]
    if taints:
        evidence.append(f"taints: {', '.join(taints)}")
    if not ready or ready.get("status") != "True":
        status = ready.get("status") if ready else "missing"
        return f"node {name} Ready={status}: {(ready or {}).get('message', '')}".rstrip(": "), evidence
    if age and age[0] > age[1]:
        return f"node {name}: its kubelet has not renewed its Lease for {age[0]:.0f} s", evidence
    for ctype in PRESSURE:
        cond = conds.get(ctype)
        if cond and cond.get("status") == "True":
            return f"node {name} {ctype}: {cond.get('message')}", evidence
    return None


def check_node(facts: Facts) -> Finding:
    names = sorted({(p.get("spec") or {}).get("nodeName") for p in _pods(facts)} - {None, ""})
    if not names:
        return _skip("node", "no pod is bound to a node")
    evidence: list[str] = []
    for name in names:
        if name not in facts.nodes:
            evidence.append(f"node {name}: not readable")
            continue
        problem = _node_problem(name, facts)
        if problem:
            return _stall(
                "node",
                problem[0],
                problem[1],
                f"check the kubelet on {name} (is it running? its logs) and the node's conditions",
            )
        evidence.append(f"node {name} Ready")
    return _ok("node", ", ".join(evidence), evidence)


def _statuses(pod: Obj) -> list[dict[str, Any]]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]


def check_runtime(facts: Facts) -> Finding:
    pods = [p for p in _pods(facts) if (p.get("spec") or {}).get("nodeName")]
    if not pods:
        return _skip("runtime", "no pod on a node yet")
    for pod in pods:
        for cs in _statuses(pod):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in RUNTIME_WAITING:
                reason, message = waiting["reason"], waiting.get("message") or ""
                return _stall(
                    "runtime",
                    f"{label(pod)} container {cs.get('name')}: {reason} - {message}".rstrip(" -"),
                    [
                        f"{label(p)} {c.get('name')}: {((c.get('state') or {}).get('waiting') or {}).get('reason')}"
                        for p in pods
                        for c in _statuses(p)
                        if (c.get("state") or {}).get("waiting")
                    ][:5],
                    _runtime_next(reason),
                )
    sandbox = _events(facts, {uid_of(p) for p in pods}, ("FailedCreatePodSandBox",))
    unstarted = [
        p
        for p in pods
        if not any((c.get("state") or {}).get("running") for c in _statuses(p))
        and (p.get("status") or {}).get("phase") == "Pending"
    ]
    if sandbox and unstarted:
        ev = sandbox[-1]
        return _stall(
            "runtime",
            f"{(ev.get('involvedObject') or {}).get('name')}: {ev.get('message')}",
            [str(e.get("message")) for e in sandbox[-3:]],
            "check the container runtime and the CNI plugin on the node",
        )
    running = sum(1 for p in pods if (p.get("status") or {}).get("phase") in ("Running", "Succeeded"))
    return _ok("runtime", f"{running}/{len(pods)} pods running")


def _runtime_next(reason: str) -> str:
    if reason in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"):
        return "check the image name and tag, and that the node can pull it (registry, credentials)"
    if reason == "CreateContainerConfigError":
        return "create the Secret/ConfigMap (or key) the pod references, or mark the reference optional"
    if reason == "CrashLoopBackOff":
        return "read the container's logs: kubectl logs --previous"
    return "read the pod's events: kubectl describe pod"


def check_probes(facts: Facts) -> Finding:
    pods = [p for p in _pods(facts) if (p.get("status") or {}).get("phase") == "Running"]
    if not pods:
        return _skip("probes", "no running pod")
    unready = [p for p in pods if (_conditions(p).get("Ready") or {}).get("status") != "True"]
    if not unready:
        return _ok("probes", f"{len(pods)} running pods Ready")
    failing = _events(facts, {uid_of(p) for p in unready}, ("Unhealthy",))
    if failing:
        ev = failing[-1]
        return _stall(
            "probes",
            f"{(ev.get('involvedObject') or {}).get('name')}: {ev.get('message')}",
            [
                f"{(e.get('involvedObject') or {}).get('name')}: {e.get('message')} (x{e.get('count') or 1})"
                for e in failing[-5:]
            ],
            "run the probe's command or request by hand in the container (kubectl exec) and fix what fails",
        )
    return _ok("probes", f"{len(unready)} running pods not Ready yet, no probe failure reported")


def _port_names(pods: list[Obj]) -> set[str]:
    return {
        str(p.get("name"))
        for pod in pods
        for c in (pod.get("spec") or {}).get("containers") or ()
        for p in c.get("ports") or ()
        if p.get("name")
    }


def _newest_ready_age(pods: list[Obj], now: dt.datetime) -> float:
    times = [parse_time((_conditions(p).get("Ready") or {}).get("lastTransitionTime")) for p in pods]
    stamps = [t[0] for t in times if t]
    return (now - max(stamps)).total_seconds() if stamps else float("inf")


def _service_problem(svc: Obj, journey: Journey, now: dt.datetime) -> Finding | None:
    spec = svc.get("spec") or {}
    selector = spec.get("selector") or {}
    name = meta(svc).get("name")
    if not selector:
        return None  # endpoints managed by hand (or ExternalName): nothing to judge
    pods = [
        p
        for p in journey.of_kind("Pod")
        if all((meta(p).get("labels") or {}).get(k) == v for k, v in selector.items())
    ]
    sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    if not pods:
        return _stall(
            "endpoints",
            f"Service {name}: selector {sel} matches no pods",
            [f"selector {sel}"],
            "make the selector match the pods' labels (kubectl get pods --show-labels)",
        )
    names = _port_names(pods)
    for port in spec.get("ports") or ():
        target = port.get("targetPort")
        if isinstance(target, str) and target not in names:
            return _stall(
                "endpoints",
                f"Service {name}: targetPort {target} is not a named port of its pods",
                [f"pod port names: {', '.join(sorted(names)) or 'none'}"],
                "name the container port or use its number as targetPort",
            )
    slices = [
        s
        for s in journey.of_kind("EndpointSlice")
        if (meta(s).get("labels") or {}).get("kubernetes.io/service-name") == name
    ]
    ready = sum(
        1 for s in slices for e in s.get("endpoints") or () if (e.get("conditions") or {}).get("ready")
    )
    ready_pods = sum(1 for p in pods if (_conditions(p).get("Ready") or {}).get("status") == "True")
    if ready == 0 and ready_pods and _newest_ready_age(pods, now) < PUBLISH_GRACE:
        return _ok(
            "endpoints",
            f"Service {name}: {ready_pods} pods became Ready in the last {PUBLISH_GRACE:.0f} s; "
            "the EndpointSlice controller has not published them yet",
        )
    if ready == 0 and ready_pods:
        return _stall(
            "endpoints",
            f"Service {name}: no ready endpoints though {ready_pods} pods are Ready",
            [f"{len(slices)} EndpointSlices"],
            "check that the EndpointSlice controller runs",
        )
    if ready == 0:
        return _stall(
            "endpoints",
            f"Service {name}: no ready endpoints (0 of {len(pods)} selected pods Ready)",
            [f"{len(slices)} EndpointSlices"],
            "the boundaries above say why the pods are not Ready",
        )
    return None


def check_endpoints(facts: Facts) -> Finding:
    journey = facts.journey
    assert journey is not None
    services = journey.of_kind("Service")
    if not services:
        return _skip("endpoints", "no Service selects these pods")
    for svc in services:
        problem = _service_problem(svc, journey, facts.now)
        if problem:
            return problem
    return _ok("endpoints", f"{len(services)} Services have ready endpoints")


def check_network_policy(facts: Facts) -> Finding:
    """Which NetworkPolicies select the journey's pods and what they isolate; a policy is the boundary
    when traffic the dataplane tried reached neither the Service nor its endpoint, and that endpoint is
    isolated for ingress (or the pod it came from for egress)."""
    pods = [p for p in _pods(facts) if not meta(p).get("deletionTimestamp")]
    if facts.policies_note:
        return _skip("network policy", facts.policies_note)
    if not pods:
        return _skip("network policy", "no pods")
    states = {str(meta(p).get("name")): isolation(p, facts.policies) for p in pods}
    by_ip = {str((p.get("status") or {}).get("podIP")): states[str(meta(p).get("name"))] for p in pods}
    evidence = [s.describe() for s in states.values()]
    for probe in facts.probes:
        if probe.service_answered is not False or probe.endpoint_answered is not False:
            continue
        target, source = by_ip.get(probe.endpoint.rpartition(":")[0]), states.get(probe.from_pod)
        blockers = []
        if target is not None and target.ingress_by:
            blockers.append(f"pod {target.pod}'s ingress is {target.ingress}")
        if source is not None and source.egress_by:
            blockers.append(f"pod {source.pod}'s egress is {source.egress}")
        if blockers:
            return _stall(
                "network policy",
                f"{probe.service}: connections from pod {probe.from_pod} to {probe.endpoint} do not arrive, "
                f"and {'; '.join(blockers)}",
                evidence,
                "a NetworkPolicy refuses this traffic: add a rule admitting it (from/to a podSelector or "
                "namespaceSelector on the port), or check the pods listen if the rules admit it",
            )
    if len(states) == 1:
        return _ok("network policy", evidence[0], evidence)
    under = sum(1 for s in states.values() if s.policies)
    return _ok("network policy", f"{under} of {len(states)} pods selected by NetworkPolicies", evidence)


def check_dataplane(facts: Facts) -> Finding:
    """Whether each Service's traffic arrives, from what was tried inside a pod: the cluster address not
    answering while an endpoint does is the service proxy's fault; neither answering, the pods'."""
    if not facts.probes:
        return _skip("dataplane", facts.probes_note or "no Service with ready endpoints to try")
    untried = []
    for probe in facts.probes:
        evidence = [
            f"from pod {probe.from_pod} on node {probe.node or '?'}: {probe.address} "
            f"{_answer(probe.service_answered)}, endpoint {probe.endpoint} {_answer(probe.endpoint_answered)}"
        ]
        if probe.service_answered is None:
            untried.append(f"{probe.service}: {probe.note}")
        elif not probe.service_answered and probe.endpoint_answered is False:
            return _stall(
                "dataplane",
                f"{probe.service}: neither {probe.address} nor its endpoint {probe.endpoint} accepts "
                f"connections from pod {probe.from_pod}",
                evidence,
                "the pods do not accept connections on the target port: compare the Service's targetPort "
                "with the port the container listens on (or look for a NetworkPolicy)",
            )
        elif not probe.service_answered:
            return _stall(
                "dataplane",
                f"{probe.service}: traffic to {probe.address} does not arrive from pod {probe.from_pod}"
                + (f", though its endpoint {probe.endpoint} answers" if probe.endpoint_answered else ""),
                evidence,
                f"the service proxy on node {probe.node or '?'} does not forward {probe.address}: check that "
                "kube-proxy runs there and its last sync",
            )
    if untried:
        return _skip("dataplane", "; ".join(untried))
    tried = ", ".join(f"{p.service} ({p.address})" for p in facts.probes)
    return _ok("dataplane", f"traffic arrives: {tried} answered from inside a pod")


def _answer(answered: bool | None) -> str:
    return {True: "answered", False: "did not answer", None: "not tried"}[answered]


BOUNDARIES: tuple[Callable[[Facts], Finding], ...] = (
    check_api,
    check_authentication,
    check_authorization,
    check_admission,
    check_routes,
    check_controller,
    check_scheduling,
    check_node,
    check_runtime,
    check_probes,
    check_endpoints,
    check_network_policy,
    check_dataplane,
)
REQUEST_SIDE = 3  # the first three need no journey
PUBLISH_GRACE = 15.0  # seconds a Ready pod may wait for its endpoint (the controller batches updates)


def _progress(journey: Journey) -> tuple[bool, str]:
    root = journey.root
    pods = [p for p in journey.of_kind("Pod") if not meta(p).get("deletionTimestamp")]
    ready = sum(
        1
        for p in pods
        if (_conditions(p).get("Ready") or {}).get("status") == "True"
        or (p.get("status") or {}).get("phase") == "Succeeded"
    )
    want = (root.get("spec") or {}).get("replicas")
    if root.get("kind") in ("Deployment", "ReplicaSet", "StatefulSet") and want is not None:
        return ready >= want and len(pods) == want, f"{ready}/{want} pods ready"
    if root.get("kind") == "DaemonSet":
        want = (root.get("status") or {}).get("desiredNumberScheduled") or 0
        return ready >= want, f"{ready}/{want} pods ready"
    return ready == len(pods), f"{ready}/{len(pods)} pods ready"


def diagnose(facts: Facts) -> Verdict:
    findings: list[Finding] = []
    for i, check in enumerate(BOUNDARIES):
        # A root that does not exist because admission refused it: the audit log says so.
        refused_root = check is check_admission and facts.rejections
        if i >= REQUEST_SIDE and facts.journey is None and not refused_root:
            why = facts.missing or "the workload could not be read"
            return Verdict(UNKNOWN, findings, f"cannot tell: {why}")
        finding = check(facts)
        findings.append(finding)
        if finding.state == STALLED:
            return Verdict(STALLED, findings, f"stalled at: {finding.boundary} - {finding.message}")
    assert facts.journey is not None
    done, progress = _progress(facts.journey)
    if done:
        return Verdict(HEALTHY, findings, f"healthy: {label(facts.journey.root)}, {progress}")
    return Verdict(
        PROGRESSING, findings, f"progressing: {label(facts.journey.root)}, {progress}; no boundary stalled"
    )


def render(verdict: Verdict, verbose: bool) -> str:
    lines = [verdict.summary]
    stalled = verdict.stalled
    if stalled and stalled.next_step:
        lines.append(f"next: {stalled.next_step}")
    if verbose:
        for f in verdict.findings:
            lines.append(f"  [{f.state:7}] {f.boundary}: {f.message}")
            lines.extend(f"            {e}" for e in f.evidence)
    return "\n".join(lines) + "\n"
