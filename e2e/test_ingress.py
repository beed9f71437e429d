"""Ingress through the cluster's ingress controller, from the host: Deployments behind Services, an
Ingress created by `kubectl create ingress`, requests with a Host header (curl) reaching the right pod
for Exact and Prefix rules, TLS chosen by SNI from a Secret and a rotated certificate picked up, and a
bad Ingress (a missing Service, a broken TLS Secret) beside a good one: the good one served, the bad ones
reported with a Warning event and served as ingress-nginx serves them (503 for the missing Service, the
host without its certificate).

The address is the Ingress's `status.loadBalancer.ingress[0].ip`; the ports 80 and 443 unless that
entry lists others (HTTP first), as the project's stack does where several clusters share a host. The
Ingresses name no class: the cluster's default IngressClass takes them (DefaultIngressClass)."""

from __future__ import annotations

import base64
import datetime
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client

from e2e.probing import exec_action, fast
from e2e.waiting import wait_for

pytestmark = pytest.mark.integration

# Every file a backend serves holds the pod's Deployment name, so a body says which Service answered.
FILES = ("index.html", "x", "xy", "px", "p/x")


def deployment(name: str, node: str, image: str) -> dict[str, Any]:
    files = " ".join(f"/www/{f}" for f in FILES)
    serve = (
        f"mkdir -p /www/p && for f in {files}; do echo {name} > $f; done && "
        "(httpd -f -p 8080 -h /www &) && touch /tmp/ready && sleep 3600"
    )
    container = {
        "name": "main",
        "image": image,
        "command": ["sh", "-c", serve],
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": fast(exec_action("cat /tmp/ready")),
    }
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "containers": [container]},
            },
        },
    }


def service(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }


def path(p: str, kind: str, svc: str) -> dict[str, Any]:
    return {"path": p, "pathType": kind, "backend": {"service": {"name": svc, "port": {"number": 80}}}}


def ingress(name: str, host: str, *paths: dict[str, Any], tls: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"rules": [{"host": host, "http": {"paths": list(paths)}}]}
    if tls:
        spec["tls"] = [{"hosts": [host], "secretName": tls}]
    return {"metadata": {"name": name}, "spec": spec}


def kubectl(kubeconfig: Path, *args: str) -> str:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def address(net: client.NetworkingV1Api, namespace: str, name: str) -> tuple[str, int, int] | None:
    """(ip, http port, https port) from the Ingress's status, once the controller wrote it."""
    lb = net.read_namespaced_ingress_status(name, namespace).status.load_balancer
    entry = next((e for e in (lb.ingress or []) if e.ip), None) if lb else None
    if entry is None:
        return None
    ports = [p.port for p in entry.ports or []] or [80, 443]
    return entry.ip, ports[0], ports[1]


def curl(url: str, host: str, ip: str, port: int, *extra: str) -> tuple[int, str]:
    """(status code, body) of one request for `host` sent to ip:port (SNI too, for https)."""
    out = subprocess.run(
        ["curl", "-sS", "-m", "5", "--resolve", f"{host}:{port}:{ip}", "-w", "\n%{http_code}", *extra, url],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if out.returncode != 0:
        return 0, out.stderr.strip()
    body, _, code = out.stdout.rpartition("\n")
    return int(code), body.strip()


def answers(host: str, target: tuple[str, int, int], p: str, *extra: str, https: bool = False) -> str:
    ip, http_port, https_port = target
    port = https_port if https else http_port
    code, body = curl(f"{'https' if https else 'http'}://{host}:{port}{p}", host, ip, port, *extra)
    return body if code == 200 else f"<{code}>"


def expect(
    host: str, target: tuple[str, int, int], p: str, want: str, *extra: str, https: bool = False
) -> None:
    """`want` answered for host and path, waited for: nginx takes a new configuration by a graceful reload,
    during which a worker of the previous one may still take a connection."""
    wait_for(
        lambda: answers(host, target, p, *extra, https=https) == want, timeout=30, what=f"{host}{p} -> {want}"
    )


def certificate(host: str, tmp: Path, stem: str) -> tuple[bytes, bytes, Path]:
    """A self-signed certificate for `host`: (cert PEM, key PEM, the cert's file for curl --cacert)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path = tmp / f"{stem}.crt"
    path.write_bytes(cert_pem)
    return cert_pem, key_pem, path


def tls_secret(name: str, cert: bytes, key: bytes) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": base64.b64encode(cert).decode(), "tls.key": base64.b64encode(key).decode()},
    }


def ready_replicas(apps: client.AppsV1Api, namespace: str, name: str) -> int:
    status = apps.read_namespaced_deployment_status(name, namespace).status
    return (status.ready_replicas or 0) if status else 0


@pytest.fixture
def backends(
    api_client: Any, kube: Any, namespace: str, node_name: str, image: str
) -> client.NetworkingV1Api:
    apps = client.AppsV1Api(api_client)
    for name in ("web-a", "web-b"):
        apps.create_namespaced_deployment(namespace, deployment(name, node_name, image))
        kube.create_namespaced_service(namespace, service(name))
    for name in ("web-a", "web-b"):
        wait_for(
            lambda n=name: ready_replicas(apps, namespace, n) == 1,
            timeout=120,
            what=f"{name} ready",
        )
    return client.NetworkingV1Api(api_client)


def test_exact_and_prefix_rules_reach_the_right_pods(backends, namespace, kubeconfig):
    net = backends
    out = kubectl(kubeconfig, "-n", namespace, "create", "ingress", "web", "--rule=web.example/*=web-a:80")
    assert out.strip() == "ingress.networking.k8s.io/web created"
    net.create_namespaced_ingress(
        namespace,
        ingress(
            "rules",
            "rules.example",
            path("/", "Prefix", "web-a"),
            path("/x", "Exact", "web-b"),
            path("/p", "Prefix", "web-b"),
        ),
    )
    target = wait_for(
        lambda: address(net, namespace, "rules"), timeout=60, what="the Ingress's address in its status"
    )
    assert wait_for(
        lambda: answers("web.example", target, "/") == "web-a", timeout=30, what="web.example served"
    )
    wait_for(
        lambda: answers("rules.example", target, "/x") == "web-b", timeout=30, what="rules.example served"
    )
    expect("rules.example", target, "/", "web-a")
    expect("rules.example", target, "/xy", "web-a")  # Exact /x is not a prefix of /xy
    expect("rules.example", target, "/p/x", "web-b")  # Prefix /p matches by path element ...
    expect("rules.example", target, "/px", "web-a")  # ... so /px is not under it
    expect("unknown.example", target, "/", "<404>")  # no rule, no default backend
    rows = kubectl(kubeconfig, "-n", namespace, "get", "ingress", "rules", "--no-headers").split()
    assert rows[2] == "rules.example" and rows[3] == target[0] and rows[4] == "80", rows
    # The backends are the EndpointSlices' ready pods: none left, the controller answers 503; back, served.
    kubectl(kubeconfig, "-n", namespace, "scale", "deployment", "web-b", "--replicas=0")
    wait_for(
        lambda: answers("rules.example", target, "/x") == "<503>", timeout=60, what="503 without backends"
    )
    kubectl(kubeconfig, "-n", namespace, "scale", "deployment", "web-b", "--replicas=1")
    wait_for(lambda: answers("rules.example", target, "/x") == "web-b", timeout=120, what="web-b back")


def test_tls_by_sni_and_a_rotated_certificate(backends, kube, namespace, tmp_path):
    net = backends
    first, key, first_ca = certificate("tls.example", tmp_path, "first")
    kube.create_namespaced_secret(namespace, tls_secret("tls", first, key))
    net.create_namespaced_ingress(
        namespace, ingress("tls", "tls.example", path("/", "Prefix", "web-b"), tls="tls")
    )
    target = wait_for(lambda: address(net, namespace, "tls"), timeout=60, what="the Ingress's address")
    wait_for(
        lambda: answers("tls.example", target, "/", "--cacert", str(first_ca), https=True) == "web-b",
        timeout=30,
        what="tls.example over HTTPS with its own certificate",
    )
    # Plain HTTP is redirected to HTTPS, as ingress-nginx's ssl-redirect does (waited for too: while a reload
    # goes on, a worker of the previous configuration may still take a connection).
    wait_for(
        lambda: curl(f"http://tls.example:{target[1]}/", "tls.example", *target[:2])[0] == 308,
        timeout=30,
        what="HTTP redirected",
    )
    second, second_key, second_ca = certificate("tls.example", tmp_path, "second")
    kube.patch_namespaced_secret("tls", namespace, tls_secret("tls", second, second_key))
    wait_for(
        lambda: answers("tls.example", target, "/", "--cacert", str(second_ca), https=True) == "web-b",
        timeout=30,
        what="the rotated certificate served",
    )
    expect("tls.example", target, "/", "<0>", "--cacert", str(first_ca), https=True)  # the old one is gone


def warnings(kube: Any, namespace: str, name: str) -> list[str]:
    events = kube.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [
        f"{e.reason}: {e.message}"
        for e in events
        if e.type == "Warning" and e.involved_object.kind == "Ingress"
    ]


def test_a_bad_ingress_beside_a_good_one(backends, kube, namespace, tmp_path):
    net = backends
    net.create_namespaced_ingress(
        namespace, ingress("missing", "missing.example", path("/", "Prefix", "nope"))
    )
    cert, _, _ = certificate("broken.example", tmp_path, "broken")
    _, other_key, _ = certificate("broken.example", tmp_path, "other")
    kube.create_namespaced_secret(
        namespace, tls_secret("broken", cert, other_key)
    )  # the key is not the cert's
    net.create_namespaced_ingress(
        namespace, ingress("broken", "broken.example", path("/", "Prefix", "web-a"), tls="broken")
    )
    net.create_namespaced_ingress(namespace, ingress("good", "good.example", path("/", "Prefix", "web-a")))
    target = wait_for(lambda: address(net, namespace, "good"), timeout=60, what="the good Ingress's address")
    wait_for(lambda: answers("good.example", target, "/") == "web-a", timeout=30, what="good.example served")
    for name in ("missing", "broken"):
        said = wait_for(
            lambda n=name: warnings(kube, namespace, n), timeout=30, what=f"a Warning event on {name}"
        )
        assert any("nope" in s or "broken" in s for s in said), said
    # As ingress-nginx: a missing Service's paths answer 503; a host whose TLS Secret is unusable is still
    # served (over HTTPS with the default certificate; ingress-nginx may first redirect HTTP to it).
    expect("missing.example", target, "/", "<503>")
    wait_for(
        lambda: answers("broken.example", target, "/") in ("web-a", "<308>"),
        timeout=30,
        what="broken.example",
    )
