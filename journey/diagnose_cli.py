"""`pykubelet diagnose KIND/NAME [-n NS] [-v] [--json] [--no-dataplane]`: read the facts (who am I, may I
read the journey, the journey, its nodes and their Leases, the namespace's NetworkPolicies, for an Ingress
the IngressClasses and whether its TLS Secrets exist), try the Services' traffic from inside a pod
(`dataplane.py`), and print the first boundary that stalled. Exit status: 0
healthy (or progressing with nothing stalled), 1 stalled, 2 cannot tell."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from journey import auditlog, dataplane, graph
from journey.connect import add_common, open_client, target
from journey.diagnose import Facts, controller_needs, diagnose, render
from journey.kinds import BY_KIND, Kind
from journey.routes import tls_secrets
from kubeclient.client import KubeClient
from kubeclient.config import ConfigError
from kubeclient.errors import ApiError

SSR = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
INGRESS_CLASSES = "/apis/networking.k8s.io/v1/ingressclasses"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="print every boundary's evidence")
    parser.add_argument(
        "--audit-log",
        metavar="PATH",
        default=None,
        help="the API server's audit log, for writes refused in admission (default: the audit.log beside "
        "the kubeconfig, as `pykubelet up` keeps it, if there is one)",
    )
    parser.add_argument(
        "--no-dataplane",
        action="store_true",
        help="do not try the Services' traffic from inside a pod (the dataplane boundary then reads skipped)",
    )


async def _whoami(client: KubeClient, facts: Facts) -> None:
    try:
        review = await client.create(
            SSR, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
        facts.user = ((review.get("status") or {}).get("userInfo")) or {}
    except ApiError as err:
        if err.unreachable:
            facts.api_error = err.message or "unreachable"
        elif err.status == 401:
            facts.auth_error = err.message or "Unauthorized"
        elif err.status in (403, 404):  # reviews not served or not allowed: /version tells reachability
            await client.get("/version")


async def _can(client: KubeClient, verb: str, kind: Kind, namespace: str, name: str = "") -> str | None:
    """None if allowed, else "VERB RESOURCE" (kubectl auth can-i's words)."""
    attrs = {"verb": verb, "group": kind.group, "resource": kind.plural, "namespace": namespace}
    if name:
        attrs["name"] = name
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attrs},
    }
    try:
        review = await client.create(SSAR, body)
    except ApiError:
        return None  # reviews not served: the reads below say what is forbidden
    if (review.get("status") or {}).get("allowed"):
        return None
    return f"{verb} {kind.resource}{'/' + name if name else ''} -n {namespace}"


async def _access(client: KubeClient, kind: Kind, name: str, namespace: str, facts: Facts) -> None:
    checks = [_can(client, "get", kind, namespace, name)]
    checks += [_can(client, "list", BY_KIND[k], namespace) for k in graph.POOLS]
    facts.denied = [d for d in await asyncio.gather(*checks) if d]


async def _controller_may(
    client: KubeClient, sa: str, verb: str, group: str, resource: str, namespace: str, facts: Facts
) -> None:
    """A SubjectAccessReview of what an owning controller's ServiceAccount needs. Only for identities
    that exist (a controller manager without --use-service-account-credentials has none) and only when
    the caller may ask (else nothing is concluded)."""
    user = f"system:serviceaccount:kube-system:{sa}"
    try:
        await client.get(f"/api/v1/namespaces/kube-system/serviceaccounts/{sa}")
        review = await client.create(
            SAR,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user,
                    "groups": [
                        "system:serviceaccounts",
                        "system:serviceaccounts:kube-system",
                        "system:authenticated",
                    ],
                    "resourceAttributes": {
                        "verb": verb,
                        "group": group,
                        "resource": resource,
                        "namespace": namespace,
                    },
                },
            },
        )
    except ApiError:
        return
    facts.controllers_checked.append(user)
    if not (review.get("status") or {}).get("allowed"):
        plural = f"{resource}.{group}" if group else resource
        facts.controller_denied.append(f"{user} may not {verb} {plural} -n {namespace}")


async def _controllers(client: KubeClient, facts: Facts) -> None:
    assert facts.journey is not None
    needs = controller_needs(facts.journey)
    await asyncio.gather(*(_controller_may(client, *need, facts) for need in needs))


def _audit_log(args: argparse.Namespace) -> Path | None:
    if args.audit_log:
        path = Path(args.audit_log)
        if not path.is_file():
            raise ValueError(f"--audit-log {path}: no such file")
        return path
    return auditlog.find_stack_log(args.kubeconfig)


def _rejections(log: Path | None, kind: Kind, name: str, namespace: str, facts: Facts) -> None:
    """The audit log's admission refusals of the journey's writes, or of the root's own creation when it
    does not exist. A refusal of an object that a later write changed all the same is history, not a
    stall: only refusals after an object's last successful write count."""
    if log is None:
        return
    journey = facts.journey
    objects = (
        [(BY_KIND[str(o.get("kind"))].plural, str(graph.meta(o).get("name"))) for o in journey.objects]
        if journey
        else [(kind.plural, name)]
    )
    wanted = set(objects)
    refused = [r for r in auditlog.read_rejections(log, namespace) if (r.resource, r.name) in wanted]
    if not refused:
        return
    last_write: dict[tuple[str, str], object] = {}
    for w in auditlog.read_writes(log, namespace):
        last_write[(w.resource, w.name)] = w.time
    for r in refused:
        written = last_write.get((r.resource, r.name))
        if written is None or written < r.time:  # type: ignore[operator]
            facts.rejections.append(r.describe())


async def _nodes(client: KubeClient, facts: Facts) -> None:
    assert facts.journey is not None
    names = sorted({(p.get("spec") or {}).get("nodeName") for p in facts.journey.of_kind("Pod")} - {None, ""})

    async def one(node: str) -> None:
        got = await asyncio.gather(
            client.get(f"/api/v1/nodes/{node}"), client.get(f"{LEASES}/{node}"), return_exceptions=True
        )
        if isinstance(got[0], dict):
            facts.nodes[node] = got[0]
        if isinstance(got[1], dict):
            facts.leases[node] = got[1]

    await asyncio.gather(*(one(n) for n in names))


async def _policies(client: KubeClient, namespace: str, facts: Facts) -> None:
    try:
        facts.policies, _ = await client.list(
            f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"
        )
    except ApiError as err:
        facts.policies_note = (
            f"cannot list networkpolicies.networking.k8s.io -n {namespace}: {err.message or err}"
        )


async def _route(client: KubeClient, namespace: str, facts: Facts) -> None:
    """For an Ingress: the IngressClasses, and which of its TLS Secrets do not exist (asked for by name;
    what the API server answers is dropped, never shown)."""
    assert facts.journey is not None
    root = facts.journey.root
    if root.get("kind") != "Ingress":
        return
    try:
        facts.routes.classes, _ = await client.list(INGRESS_CLASSES)
    except ApiError as err:
        facts.routes.notes.append(f"IngressClasses not read: {err.message or err}")
    for name in tls_secrets(root):
        try:
            await client.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        except ApiError as err:
            if err.status == 404:
                facts.routes.missing_secrets.append(name)
            else:
                facts.routes.notes.append(f"Secret {name} not read: {err.message or err}")


async def gather_facts(
    client: KubeClient,
    kind: Kind,
    name: str,
    namespace: str,
    log: Path | None = None,
    try_dataplane: bool = True,
) -> Facts:
    facts = Facts(server=client.server)
    try:
        await _whoami(client, facts)
    except ApiError as err:
        facts.api_error = err.message or str(err)
    if facts.api_error or facts.auth_error:
        return facts
    await _access(client, kind, name, namespace, facts)
    if facts.denied:
        return facts
    try:
        facts.journey = await graph.collect(client, kind, name, namespace)
    except ApiError as err:
        if err.status == 404:
            facts.missing = f"{kind.resource} {name} not found in namespace {namespace}"
            _rejections(log, kind, name, namespace, facts)
        elif err.status == 403:
            facts.denied = [err.message]
        else:
            facts.missing = f"reading {kind.kind} {name}: {err.message or err}"
        return facts
    _rejections(log, kind, name, namespace, facts)
    await asyncio.gather(
        _nodes(client, facts),
        _controllers(client, facts),
        _policies(client, namespace, facts),
        _route(client, namespace, facts),
    )
    if try_dataplane:
        await dataplane.probe(client, facts)
    else:
        facts.probes_note = "not tried (--no-dataplane)"
    return facts


async def _diagnose(args: argparse.Namespace) -> int:
    kind, name, namespace = target(args)
    log = _audit_log(args)
    client, _ = open_client(args)
    async with client:
        facts = await gather_facts(client, kind, name, namespace, log, not args.no_dataplane)
    verdict = diagnose(facts)
    if args.json:
        print(json.dumps(verdict.to_dict(), indent=2))
    else:
        print(render(verdict, args.verbose), end="")
    return verdict.exit_code


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_diagnose(args))
    except (ValueError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
