"""Security features' cost (issue 32): Secret create and get with aesgcm encryption at rest against
identity, and pod create with PodSecurity `restricted` enforced against a namespace without labels.
Figures are reported, never asserted.

  python bench/apiserver/security.py [--seconds 3 --rounds 3] [--out DIR]
  python bench/apiserver/security.py --smoke --out DIR

Two API servers (the rig: HTTPS, SQLite), one with `--encryption-provider-config` (Secrets: aesgcm,
then identity), one without but with `--authentication-config` (a JWT authenticator for a test OIDC
issuer): a SelfSubjectReview with the admin's client certificate against one with a JWT (the same one,
whose success the token cache keeps 10 s, and a new one each time, verified each time). Pods: on the plain server, a restricted-conforming pod created in a
namespace labelled `pod-security.kubernetes.io/enforce=restricted` and in one without labels. The two
requests of a pair run one after the other, their order swapped each time, so both meet the same load
(separate windows on a shared machine measured the neighbours). The figures of merit are throughput
ratios, mean latency against mean latency (goals: encrypted >= 0.8x identity, enforced >= 0.9x none).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import ssl
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.apiserver.run import RawConnection, pct, ssl_context
from bench.apiserver.webhooks import CLIENT_CPU, SERVER_CPU, _pin
from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.oidcissuer import Issuer, issuer

ENCRYPTION = """apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - aesgcm:
      keys:
      - {name: key1, secret: %s}
  - identity: {}
"""
ENFORCED, PLAIN = "enforced", "unlabelled"
SEEDED = "seeded"  # the Secret every get reads


def secret() -> bytes:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"s-{uuid.uuid4().hex[:12]}"},
        "data": {"password": base64.b64encode(os.urandom(48)).decode()},
    }
    return json.dumps(body).encode()


REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
SELF_REVIEW = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode()


def authentication_config(served: Issuer) -> dict:
    return {
        "apiVersion": "apiserver.config.k8s.io/v1beta1",
        "kind": "AuthenticationConfiguration",
        "jwt": [
            {
                "issuer": {
                    "url": served.url,
                    "audiences": ["bench"],
                    "certificateAuthority": served.ca_pem.decode(),
                },
                "claimValidationRules": [{"expression": 'claims.hd == "example.com"'}],
                "claimMappings": {
                    "username": {"claim": "email", "prefix": "oidc:"},
                    "groups": {"claim": "groups", "prefix": "oidc:"},
                },
            }
        ],
    }


def jwt_for(served: Issuer) -> str:
    return served.token(
        aud="bench", sub=uuid.uuid4().hex, email="a@example.com", hd="example.com", groups=["dev"]
    )


async def _wait_for_keys(conn: RawConnection, authorization: str, timeout: float = 30) -> None:
    """Until the server has fetched the issuer's keys (in the background, at start)."""
    deadline = time.monotonic() + timeout
    while True:
        status, text = await conn.request("POST", REVIEW, SELF_REVIEW, authorization=authorization)
        if status == 201:
            return
        assert time.monotonic() < deadline, text
        await asyncio.sleep(0.2)


def pod() -> bytes:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p-{uuid.uuid4().hex[:12]}"},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }
    return json.dumps(body).encode()


async def _post(conn: RawConnection, path: str, body: dict) -> None:
    status, text = await conn.request("POST", path, json.dumps(body).encode())
    assert status == 201, text


Case = tuple[RawConnection, str, str, Callable[[], bytes], Callable[[], str]]


def _none() -> str:
    return ""


async def paired(a: Case, b: Case, seconds: float) -> tuple[list[float], list[float]]:
    """The two requests one after the other, their order swapped each time, for `seconds`: both see the
    same moment of a busy machine, which separate windows do not."""
    out: tuple[list[float], list[float]] = ([], [])
    deadline = time.monotonic() + seconds
    flip = False
    while time.monotonic() < deadline:
        order = ((1, b), (0, a)) if flip else ((0, a), (1, b))
        for i, (conn, method, path, body, authorization) in order:
            payload, header = body(), authorization()
            t = time.perf_counter()
            status, text = await conn.request(method, path, payload, authorization=header)
            out[i].append((time.perf_counter() - t) * 1000)
            assert status < 300, text
        flip = not flip
    return out


def _figures(latencies: list[float]) -> dict:
    return {
        "requests": len(latencies),
        "p50_ms": round(pct(latencies, 50), 3),
        "p99_ms": round(pct(latencies, 99), 3),
        "mean_ms": round(sum(latencies) / max(len(latencies), 1), 3),
        "load_average_1m": os.getloadavg()[0],
    }


async def run(args: argparse.Namespace, tmp: Path) -> dict:
    (tmp / "enc.yaml").write_text(ENCRYPTION % base64.b64encode(os.urandom(32)).decode())
    issuer_cm = issuer(tmp)
    served = issuer_cm.__enter__()
    (tmp / "authn.yaml").write_text(json.dumps(authentication_config(served)))
    servers = {
        "identity": ApiServer(
            tmp / "identity", extra_args=["--authentication-config", str(tmp / "authn.yaml")]
        ),
        "aesgcm": ApiServer(
            tmp / "aesgcm", extra_args=["--encryption-provider-config", str(tmp / "enc.yaml")]
        ),
    }
    pairs: dict[str, tuple[str, str]] = {
        "secret create": ("identity", "aesgcm"),
        "secret get": ("identity", "aesgcm"),
        "pod create": ("no PodSecurity labels", "restricted enforced"),
        "self-subject review": ("client certificate", "JWT (cached success)"),
        "self-subject review, new JWT each time": ("client certificate", "JWT (verified each time)"),
    }
    results: dict[str, dict] = {}
    try:
        conns: dict[str, RawConnection] = {}
        for name, server in servers.items():
            server.start()
            _pin(server.pid, SERVER_CPU)
            conns[name] = await RawConnection.open("127.0.0.1", server.port, ssl_context(server))
            seeded = json.loads(secret())
            seeded["metadata"]["name"] = SEEDED
            await _post(conns[name], "/api/v1/namespaces/default/secrets", seeded)
        plain = conns["identity"]
        for ns, labels in ((ENFORCED, {"pod-security.kubernetes.io/enforce": "restricted"}), (PLAIN, {})):
            await _post(plain, "/api/v1/namespaces", {"metadata": {"name": ns, "labels": labels}})
        secrets = "/api/v1/namespaces/default/secrets"
        server = servers["identity"]
        bearer = await RawConnection.open(
            "127.0.0.1", server.port, ssl.create_default_context(cafile=str(server.ca_cert))
        )
        fixed = f"Bearer {jwt_for(served)}"
        await _wait_for_keys(bearer, fixed)
        review = ("POST", REVIEW, lambda: SELF_REVIEW)
        cases: dict[str, tuple[Case, Case]] = {
            "secret create": (
                (conns["identity"], "POST", secrets, secret, _none),
                (conns["aesgcm"], "POST", secrets, secret, _none),
            ),
            "secret get": (
                (conns["identity"], "GET", f"{secrets}/{SEEDED}", bytes, _none),
                (conns["aesgcm"], "GET", f"{secrets}/{SEEDED}", bytes, _none),
            ),
            "pod create": (
                (plain, "POST", f"/api/v1/namespaces/{PLAIN}/pods", pod, _none),
                (plain, "POST", f"/api/v1/namespaces/{ENFORCED}/pods", pod, _none),
            ),
            "self-subject review": ((plain, *review, _none), (bearer, *review, lambda: fixed)),
            "self-subject review, new JWT each time": (
                (plain, *review, _none),
                (bearer, *review, lambda: f"Bearer {jwt_for(served)}"),
            ),
        }
        for a, b in cases.values():  # warm-up
            await paired(a, b, min(1.0, args.seconds))
        for name, (a, b) in cases.items():
            first, second = await paired(a, b, args.seconds * args.rounds)
            base, other = pairs[name]
            results[name] = {
                base: _figures(first),
                other: _figures(second),
                "throughput_ratio": round(
                    (sum(first) / max(len(first), 1)) / max(sum(second) / max(len(second), 1), 1e-9), 3
                ),
            }
        for conn in conns.values():
            conn.close()
    finally:
        for server in servers.values():
            server.stop()
        issuer_cm.__exit__(None, None, None)
    return {
        "seconds": args.seconds * args.rounds,
        "results": results,
        "goals": {
            "secret create": 0.8,
            "secret get": 0.8,
            "pod create": 0.9,
        },
    }


def markdown(report: dict) -> str:
    lines = [
        "# Security features: request cost",
        "",
        f"One keep-alive TLS connection per server, the two requests of a pair one after the other (order "
        f"swapped each time) for {report['seconds']:g} s per pair:",
        "",
        "| pair | case | requests | p50 ms | p99 ms | mean ms | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for pair, figures in report["results"].items():
        for case, x in figures.items():
            if isinstance(x, dict):
                lines.append(
                    f"| {pair} | {case} | {x['requests']} | {x['p50_ms']} | {x['p99_ms']} | {x['mean_ms']} | "
                    f"{x['load_average_1m']:.1f} |"
                )
    lines += [
        "",
        "Throughput ratio (mean latency of the first case over the second's; goals in brackets):",
        "",
    ]
    lines += [
        f"- {pair}: **{figures['throughput_ratio']}**"
        + (f" (>= {report['goals'][pair]})" if pair in report["goals"] else " (no goal: p99 reported)")
        for pair, figures in report["results"].items()
    ]
    return "\n".join(lines)


def svg_plot(report: dict) -> str:
    bars = [
        (f"{pair}, {case} p50", x["p50_ms"])
        for pair, figures in report["results"].items()
        for case, x in figures.items()
        if isinstance(x, dict)
    ]
    return bar_svg("Encryption at rest and PodSecurity: request latency", bars, "ms")


SMOKE = {"seconds": 1.0, "rounds": 1}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved windows per case")
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    if args.smoke:
        vars(args).update(SMOKE)
    _pin(os.getpid(), CLIENT_CPU)
    with tempfile.TemporaryDirectory(prefix="bench-security-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    text = markdown(result)
    write_report(out, "apiserver-security", result, text, svg_plot(result))
    print(text)
