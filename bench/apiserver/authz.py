"""Authorization benchmark (issue 13): what Node,RBAC costs. Figures are reported, never asserted.

  python bench/apiserver/authz.py [--roles 1000 --seconds 10 --connections 16] [--out DIR]
  python bench/apiserver/authz.py --smoke --out DIR      # 50 roles, 1 s per mode

(a) API throughput: the same mixed load (get 50 %, list 20 %, update 20 %, create+delete 10 % of
    ConfigMaps in the user's namespace) by a user bound through a RoleBinding, with 1 000 other Roles and
    RoleBindings stored, against a server in mode Node,RBAC and against one in AlwaysAllow, their load
    windows interleaved; the throughput ratio is the figure (goal >= 0.9), with the ratio of server CPU
    per operation beside it (less disturbed by the machine's other load). Closed loop over keep-alive
    TLS connections; the servers run as subprocesses through the rig, pinned to one core, the load
    generator to the other.
(b) authorization cost: the server's own authorizer chain (privileged groups, Node, RBAC) over a
    resolver holding 1 000 Roles, ClusterRoles and their bindings, in process: per-decision latency
    for allowed and denied requests of bound users, a node's request, and the first request of a user
    after the RBAC objects changed (the resolution is recomputed); p50 and p99 (goal p99 < 0.2 ms).
(c) token cost: signing a pod-bound service-account token (TokenRequest), validating one (RS256
    signature, issuer, audience, expiry, the account and pod still there with their UIDs, looked up as
    the server looks them up in its watch cache), and authenticating one seen within the last 10 s
    (kube-apiserver's token cache), in process; p50 and p99.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import ssl
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.apiserver.run import RawConnection, cpu_seconds, pct
from bench.reporting import bar_svg, run_and_report
from controlplane.apiserver.authmodes import Authorization
from controlplane.apiserver.authn import Authenticator, UserInfo
from controlplane.apiserver.authz import Attributes
from controlplane.apiserver.sakeys import ensure_signing_key
from controlplane.apiserver.satokens import DEFAULT_ISSUER, TokenIssuer, TokenValidator
from pykubelet.rig.apiserver import ApiServer

NAMESPACE = "bench"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def user_context(server: ApiServer, cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(server.ca_cert))
    ctx.load_cert_chain(cert, key)
    return ctx


def admin_context(server: ApiServer) -> ssl.SSLContext:
    return user_context(server, server.data_dir / "pki" / "admin.crt", server.data_dir / "pki" / "admin.key")


async def call(conn: RawConnection, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    return await conn.request(method, path, json.dumps(body).encode() if body is not None else b"")


def role(namespace: str, name: str, verbs: list[str]) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}],
    }


def binding(namespace: str, name: str, role_name: str, user: str) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}],
    }


async def populate(server: ApiServer, roles: int, connections: int) -> None:
    """The user's namespace and binding, and `roles` other Roles and RoleBindings in 20 namespaces."""
    ctx = admin_context(server)
    conns = [await RawConnection.open("127.0.0.1", server.port, ctx) for _ in range(connections)]
    others = [f"other-{i}" for i in range(20)]
    for ns in [NAMESPACE, *others]:
        status, body = await call(
            conns[0],
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        )
        assert status == 201, body
    writes = [
        (
            f"{RBAC}/namespaces/{NAMESPACE}/roles",
            role(NAMESPACE, "cm-editor", ["get", "list", "create", "update", "delete"]),
        ),
        (
            f"{RBAC}/namespaces/{NAMESPACE}/rolebindings",
            binding(NAMESPACE, "cm-editor", "cm-editor", "bench-user"),
        ),
    ]
    for i in range(roles):
        ns = others[i % len(others)]
        writes.append((f"{RBAC}/namespaces/{ns}/roles", role(ns, f"r{i}", ["get", "list"])))
        writes.append((f"{RBAC}/namespaces/{ns}/rolebindings", binding(ns, f"b{i}", f"r{i}", f"user-{i}")))

    async def worker(conn: RawConnection) -> None:
        while writes:
            path, body = writes.pop()
            status, text = await call(conn, "POST", path, body)
            assert status == 201, text

    await asyncio.gather(*(worker(c) for c in conns))
    for conn in conns:
        conn.close()


async def mixed_load(server: ApiServer, ctx: ssl.SSLContext, seconds: float, connections: int) -> dict:
    conns = [await RawConnection.open("127.0.0.1", server.port, ctx) for _ in range(connections)]
    base = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
    for i in range(connections):
        status, text = await call(
            conns[0],
            "POST",
            base,
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}"}, "data": {"n": "0"}},
        )
        assert status in (201, 409), text
    done = 0
    errors = 0
    latencies: list[float] = []
    pid = server.pid
    assert pid is not None
    cpu0 = cpu_seconds(pid)
    deadline = time.monotonic() + seconds

    async def worker(i: int, conn: RawConnection) -> None:
        nonlocal done, errors
        rng = random.Random(i)
        n = 0
        while time.monotonic() < deadline:
            n += 1
            pick = rng.random()
            start = time.perf_counter()
            if pick < 0.5:
                status, _ = await call(conn, "GET", f"{base}/cm-{i}")
                ok = status == 200
            elif pick < 0.7:
                status, _ = await call(conn, "GET", base)
                ok = status == 200
            elif pick < 0.9:
                status, _ = await call(
                    conn,
                    "PUT",
                    f"{base}/cm-{i}",
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": f"cm-{i}"},
                        "data": {"n": str(n)},
                    },
                )
                ok = status == 200
            else:
                name = f"tmp-{i}-{n}"
                status, _ = await call(
                    conn, "POST", base, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
                )
                ok = status == 201
                status, _ = await call(conn, "DELETE", f"{base}/{name}")
                ok = ok and status == 200
            latencies.append(time.perf_counter() - start)
            done += 1
            errors += not ok

    started = time.monotonic()
    await asyncio.gather(*(worker(i, c) for i, c in enumerate(conns)))
    elapsed = time.monotonic() - started
    cpu = cpu_seconds(pid) - cpu0
    for conn in conns:
        conn.close()
    return {
        "operations": done,
        "errors": errors,
        "ops_per_s": round(done / elapsed, 1),
        "p50_ms": round(pct(latencies, 50) * 1000, 2),
        "p99_ms": round(pct(latencies, 99) * 1000, 2),
        "server_cpu_ms_per_op": round(cpu / max(done, 1) * 1000, 3),
        "load_average_1m": os.getloadavg()[0],
    }


async def throughput(
    modes: tuple[str, ...], roles: int, seconds: float, connections: int, rounds: int
) -> dict:
    """Both servers up at once, populated alike, their load windows interleaved (A B A B ...) so that
    drift in the machine's other load falls on both modes alike."""
    with tempfile.TemporaryDirectory(prefix="authz-bench-") as tmp:
        servers = {
            m: ApiServer(Path(tmp) / m.replace(",", "-"), extra_args=["--authorization-mode", m])
            for m in modes
        }
        try:
            contexts = {}
            for mode, server in servers.items():
                server.start()
                _pin(server.pid, SERVER_CPU)
                await populate(server, roles, connections)
                kubeconfig = server.client_kubeconfig(
                    "bench-user", (), Path(tmp) / f"user-{server.port}" / "kubeconfig"
                )
                contexts[mode] = user_context(
                    server, kubeconfig.parent / "bench-user.crt", kubeconfig.parent / "bench-user.key"
                )
            for mode in modes:  # warm up (connections, caches, the first resolutions): not counted
                await mixed_load(servers[mode], contexts[mode], min(2.0, seconds / rounds), connections)
            windows: dict[str, list[dict]] = {m: [] for m in modes}
            for _ in range(rounds):
                for mode in modes:
                    windows[mode].append(
                        await mixed_load(servers[mode], contexts[mode], seconds / rounds, connections)
                    )
            return {mode: _combine(mode, w) for mode, w in windows.items()}
        finally:
            for server in servers.values():
                server.stop()


SERVER_CPU, CLIENT_CPU = 0, 1


def _pin(pid: int | None, cpu: int) -> None:
    """Servers on one core, the load generator on the other (when there are two): the two modes then
    compete with each other's load less, and the figures move less with the machine's other work."""
    if pid is not None and os.cpu_count() and os.cpu_count() > 1:  # type: ignore[operator]
        try:
            os.sched_setaffinity(pid, {cpu})
        except OSError:
            pass


def _combine(mode: str, windows: list[dict]) -> dict:
    ops = sum(w["operations"] for w in windows)
    elapsed = sum(w["operations"] / w["ops_per_s"] for w in windows if w["ops_per_s"])
    return {
        "mode": mode,
        "operations": ops,
        "errors": sum(w["errors"] for w in windows),
        "ops_per_s": round(ops / elapsed, 1) if elapsed else 0.0,
        "p50_ms": round(sorted(w["p50_ms"] for w in windows)[len(windows) // 2], 2),
        "p99_ms": round(max(w["p99_ms"] for w in windows), 2),
        "server_cpu_ms_per_op": round(
            sum(w["server_cpu_ms_per_op"] * w["operations"] for w in windows) / max(ops, 1), 3
        ),
        "load_average_1m": max(w["load_average_1m"] for w in windows),
        "windows": windows,
    }


def decision_costs(roles: int, samples: int) -> dict:
    """(b): the chain in process, fed the objects the way the watch cache feeds it."""
    authorization = Authorization(("Node", "RBAC"))
    resolver = authorization.resolver
    namespaces = [f"ns-{i}" for i in range(50)]
    for i in range(roles):
        ns = namespaces[i % len(namespaces)]
        resolver.apply(
            f"/roles.rbac.authorization.k8s.io/{ns}/r{i}", role(ns, f"r{i}", ["get", "list", "watch"])
        )
        resolver.apply(
            f"/rolebindings.rbac.authorization.k8s.io/{ns}/b{i}", binding(ns, f"b{i}", f"r{i}", f"user-{i}")
        )
        resolver.apply(
            f"/clusterroles.rbac.authorization.k8s.io/c{i}",
            {
                "metadata": {"name": f"c{i}"},
                "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}],
            },
        )
        resolver.apply(
            f"/clusterrolebindings.rbac.authorization.k8s.io/cb{i}",
            {
                "metadata": {"name": f"cb{i}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"c{i}"},
                "subjects": [
                    {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": f"group-{i}"}
                ],
            },
        )
    from controlplane.apiserver.rbac.policy import cluster_role_bindings, cluster_roles

    for obj in cluster_roles():
        resolver.apply(f"/clusterroles.rbac.authorization.k8s.io/{obj['metadata']['name']}", obj)
    for obj in cluster_role_bindings():
        resolver.apply(f"/clusterrolebindings.rbac.authorization.k8s.io/{obj['metadata']['name']}", obj)
    chain = authorization.chain
    rng = random.Random(13)

    def user(i: int) -> UserInfo:
        return UserInfo(f"user-{i}", groups=(f"group-{i}", "system:authenticated"))

    cases = {
        "allowed (RoleBinding)": lambda i: Attributes(
            user(i), "list", "", "v1", "configmaps", namespace=namespaces[i % 50]
        ),
        "allowed (ClusterRoleBinding)": lambda i: Attributes(
            user(i), "get", "apps", "v1", "deployments", namespace="x", name="d"
        ),
        "denied": lambda i: Attributes(
            user(i), "delete", "", "v1", "secrets", namespace=namespaces[i % 50], name="s"
        ),
        "non-resource (discovery)": lambda i: Attributes(
            user(i), "get", path="/apis/apps/v1", resource_request=False
        ),
        "node (system:node rules)": lambda i: Attributes(
            UserInfo(f"system:node:n{i}", groups=("system:nodes", "system:authenticated")),
            "list",
            "",
            "v1",
            "services",
        ),
    }
    out: dict = {}
    for label, make in cases.items():
        requests = [make(rng.randrange(roles)) for _ in range(samples)]
        for attrs in requests[:200]:
            chain.authorize(attrs)  # warm the per-user resolution
        times = []
        for attrs in requests:
            start = time.perf_counter_ns()
            chain.authorize(attrs)
            times.append(time.perf_counter_ns() - start)
        out[label] = {"p50_us": round(pct(times, 50) / 1000, 1), "p99_us": round(pct(times, 99) / 1000, 1)}
    # A cold resolution: the first request of a user after any RBAC object changed.
    cold = []
    for _ in range(min(samples, 2000)):
        resolver.invalidate()  # as any write of an RBAC object does
        attrs = cases["allowed (RoleBinding)"](rng.randrange(roles))
        start = time.perf_counter_ns()
        chain.authorize(attrs)
        cold.append(time.perf_counter_ns() - start)
    out["first request after an RBAC change"] = {
        "p50_us": round(pct(cold, 50) / 1000, 1),
        "p99_us": round(pct(cold, 99) / 1000, 1),
    }
    return {"roles_and_bindings": roles, "samples_per_case": samples, "cases": out}


def token_costs(samples: int) -> dict:
    """(c): TokenIssuer.sign and TokenValidator.authenticate with the server's key type (RSA 2048)."""
    with tempfile.TemporaryDirectory() as pki:
        key = ensure_signing_key(Path(pki))
    account = {
        "metadata": {"name": "default", "namespace": "bench", "uid": "11111111-2222-3333-4444-555555555555"}
    }
    pod = {"metadata": {"name": "p", "namespace": "bench", "uid": "66666666-7777-8888-9999-000000000000"}}
    objects = {("serviceaccounts", "bench", "default"): account, ("pods", "bench", "p"): pod}
    issuer = TokenIssuer(key)
    validator = TokenValidator(
        [key], [DEFAULT_ISSUER], [DEFAULT_ISSUER], lambda r, ns, n: objects.get((r, ns, n))
    )

    def timed(fn: Callable[[], object], n: int) -> dict:
        fn()
        times = []
        for _ in range(n):
            start = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - start)
        return {"p50_us": round(pct(times, 50) / 1000, 1), "p99_us": round(pct(times, 99) / 1000, 1)}

    token = issuer.sign(issuer.claims(account, [DEFAULT_ISSUER], 3607, pod=pod))
    assert validator.authenticate(token).pod_name == "p"
    authenticator = Authenticator(service_accounts=validator, api_audiences=(DEFAULT_ISSUER,))
    n = max(samples // 10, 100)
    return {
        "samples": n,
        "cases": {
            "sign (TokenRequest)": timed(
                lambda: issuer.sign(issuer.claims(account, [DEFAULT_ISSUER], 3607, pod=pod)), n
            ),
            "validate (a token not seen in the last 10 s)": timed(lambda: validator.authenticate(token), n),
            "authenticate (the same token again: the 10 s cache)": timed(
                lambda: authenticator.authenticate_token(token), n
            ),
        },
    }


async def main(args: argparse.Namespace) -> dict:
    _pin(os.getpid(), CLIENT_CPU)
    report: dict = {
        "b_decision_cost": decision_costs(args.roles, args.samples),
        "c_token_cost": token_costs(args.samples),
    }
    print(json.dumps(report["b_decision_cost"]), flush=True)
    print(json.dumps(report["c_token_cost"]), flush=True)
    runs = await throughput(
        ("AlwaysAllow", "Node,RBAC"), args.roles, args.seconds, args.connections, args.rounds
    )
    for run in runs.values():
        print(json.dumps({k: v for k, v in run.items() if k != "windows"}), flush=True)
    allow, rbac = runs["AlwaysAllow"], runs["Node,RBAC"]
    report["a_throughput"] = {
        "roles_and_bindings": args.roles,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "connections": args.connections,
        "runs": runs,
        "ratio_rbac_to_allow_all": round(rbac["ops_per_s"] / max(allow["ops_per_s"], 1e-9), 3),
        "server_cpu_per_op_ratio": round(
            rbac["server_cpu_ms_per_op"] / max(allow["server_cpu_ms_per_op"], 1e-9), 3
        ),
    }
    return report


def markdown(report: dict) -> str:
    a, b = report["a_throughput"], report["b_decision_cost"]
    allow, rbac = a["runs"]["AlwaysAllow"], a["runs"]["Node,RBAC"]
    lines = [
        "# Authorization benchmark",
        "",
        f"(a) mixed ConfigMap load by a RoleBinding-bound user, {a['roles_and_bindings']} other Roles and RoleBindings "
        f"stored, {a['connections']} connections, {a['seconds']:g} s per mode in {a['rounds']} interleaved windows:",
        "",
        "| mode | ops/s | p50 ms | p99 ms | server CPU ms/op | errors | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in (allow, rbac):
        lines.append(
            f"| {r['mode']} | {r['ops_per_s']} | {r['p50_ms']} | {r['p99_ms']} | {r['server_cpu_ms_per_op']} | "
            f"{r['errors']} | {r['load_average_1m']:.1f} |"
        )
    lines += [
        "",
        f"Node,RBAC / AlwaysAllow throughput: **{a['ratio_rbac_to_allow_all']}** (goal >= 0.9); server CPU per "
        f"operation, Node,RBAC / AlwaysAllow: {a['server_cpu_per_op_ratio']}",
        "",
        f"(b) one decision of the server's chain, {b['roles_and_bindings']} Roles, ClusterRoles and bindings of each kind:",
        "",
        "| request | p50 us | p99 us |",
        "| --- | --- | --- |",
    ]
    for label, figures in b["cases"].items():
        lines.append(f"| {label} | {figures['p50_us']} | {figures['p99_us']} |")
    lines.append("\nGoal: p99 < 200 us per decision.")
    c = report["c_token_cost"]
    lines += [
        "",
        f"(c) one service-account token (RS256, RSA 2048, pod-bound), {c['samples']} samples:",
        "",
        "| operation | p50 us | p99 us |",
        "| --- | --- | --- |",
    ]
    for label, figures in c["cases"].items():
        lines.append(f"| {label} | {figures['p50_us']} | {figures['p99_us']} |")
    return "\n".join(lines)


def svg_plot(report: dict) -> str:
    bars = [(f"(b) {label} p99", f["p99_us"]) for label, f in report["b_decision_cost"]["cases"].items()]
    return bar_svg("Authorization: one decision", bars, "us")


SMOKE = {"roles": 50, "seconds": 1.0, "rounds": 1, "connections": 2, "samples": 500}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--roles", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4, help="interleaved load windows per mode")
    parser.add_argument("--samples", type=int, default=20_000)
    run_and_report(parser, "apiserver-authz", main, markdown, svg_plot, SMOKE)
