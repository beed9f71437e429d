"""The ingress controller's pure parts: which Ingresses are ours, how paths, hosts, default backends
and TLS merge (the older Ingress wins a conflict, Exact beats Prefix, a bad Ingress is left out whole
and the rest served), the ready addresses taken from EndpointSlices, the certificate pair check, and
the nginx.conf text (checked by the real `nginx -t` where nginx is installed)."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest

from ingresscontroller import model
from ingresscontroller.nginxconf import Files, Listen, render, server_name
from ingresscontroller.tlscerts import check_pair
from kubeclient.serving import ensure_self_signed


def ing(
    name: str, *rules: dict, ns: str = "default", created: str = "2026-01-01T00:00:00Z", **spec: object
) -> dict:
    return {
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
        "spec": {"ingressClassName": "nginx", "rules": list(rules), **spec},
    }


def rule(host: str, *paths: tuple[str, str, str]) -> dict:
    return {
        "host": host,
        "http": {
            "paths": [
                {"path": p, "pathType": t, "backend": {"service": {"name": svc, "port": {"number": 80}}}}
                for p, t, svc in paths
            ]
        },
    }


def svc(name: str, ns: str = "default") -> dict:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"ports": [{"name": "http", "port": 80}]}}


def eps(name: str, *ips: str, ready: bool = True, ns: str = "default") -> dict:
    return {
        "metadata": {"name": f"{name}-x", "namespace": ns, "labels": {model.SERVICE_NAME_LABEL: name}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}} for ip in ips],
    }


def cluster(*names: str, secrets: dict | None = None) -> model.Cluster:
    return model.Cluster(
        services={f"default/{n}": svc(n) for n in names},
        slices={
            f"default/{n}": [eps(n, "10.0.0.1", "10.0.0.2"), eps(n, "10.0.0.9", ready=False)] for n in names
        },
        secrets=secrets or {},
    )


def ok(_cert: bytes, _key: bytes) -> str | None:
    return None


def test_classes_and_ownership() -> None:
    classes = [
        {
            "metadata": {"name": "nginx", "annotations": {model.DEFAULT_CLASS_ANNOTATION: "true"}},
            "spec": {"controller": "pykubelet.io/ingress-nginx"},
        },
        {"metadata": {"name": "other"}, "spec": {"controller": "example.com/other"}},
    ]
    names, default = model.our_classes(classes, "pykubelet.io/ingress-nginx")
    assert names == {"nginx"} and default
    assert model.is_ours(ing("a"), names)
    legacy = ing("b")
    del legacy["spec"]["ingressClassName"]
    legacy["metadata"]["annotations"] = {model.LEGACY_CLASS_ANNOTATION: "nginx"}
    assert model.is_ours(legacy, names)
    assert not model.is_ours(ing("c", ingressClassName="other"), names)


def test_paths_merge_by_age_and_exact_beats_prefix() -> None:
    older = ing("old", rule("web.example", ("/api", "Prefix", "a"), ("/", "Prefix", "a")))
    newer = ing(
        "new",
        rule(
            "web.example",
            ("/api", "Exact", "b"),
            ("/api/", "Prefix", "b"),
            ("/docs", "ImplementationSpecific", "b"),
        ),
        created="2026-01-02T00:00:00Z",
    )
    config = model.build([newer, older], cluster("a", "b"), ok)
    locations = config.servers["web.example"].locations
    assert locations[(False, "/api")].upstream == "default_a_80"  # the older Ingress keeps its Prefix /api
    assert locations[(True, "/api")].upstream == "default_b_80" and not locations[(True, "/api")].implied
    assert locations[(False, "/docs")].upstream == "default_b_80"  # ImplementationSpecific served as Prefix
    assert config.upstreams["default_a_80"].addresses == ("10.0.0.1:8080", "10.0.0.2:8080")
    assert config.served == ["default/old", "default/new"]


def test_a_missing_service_or_secret_is_served_as_ingress_nginx_serves_it() -> None:
    """A missing Service: its paths go to an upstream without endpoints (nginx answers 503); a missing
    or unusable TLS Secret: the host is served without its certificate (the default one). Both are
    reported; an unsupported backend leaves the Ingress out whole."""
    good = ing("good", rule("good.example", ("/", "Prefix", "a")))
    missing = ing("missing", rule("bad.example", ("/", "Prefix", "a"), ("/x", "Prefix", "nope")))
    no_secret = ing(
        "nosecret",
        rule("tls.example", ("/", "Prefix", "a")),
        tls=[{"hosts": ["tls.example"], "secretName": "gone"}],
    )
    resource = ing("resource", rule("res.example", ("/", "Prefix", "a")))
    resource["spec"]["rules"][0]["http"]["paths"][0]["backend"] = {
        "resource": {"kind": "Bucket", "name": "b"}
    }
    config = model.build([good, missing, no_secret, resource], cluster("a"), ok)
    assert config.served == ["default/good", "default/missing", "default/nosecret"]
    assert set(config.servers) == {"good.example", "bad.example", "tls.example"}
    assert config.servers["bad.example"].locations[(False, "/x")].upstream == "default_nope_80"
    assert config.upstreams["default_nope_80"].addresses == ()
    assert config.servers["tls.example"].certificate == ""
    assert {(p.ingress, p.reason) for p in config.problems} == {
        ("default/missing", "ServiceNotFound"),
        ("default/nosecret", "SecretNotFound"),
        ("default/resource", "UnsupportedBackend"),
    }
    assert [p.message for p in config.problems if p.reason == "ServiceNotFound"] == [
        'Service "default/nope" not found'
    ]
    excluded = model.build([good], cluster("a"), ok, excluded=frozenset({"default/good"}))
    assert excluded.served == [] and excluded.servers == {}


def test_default_backend_and_tls() -> None:
    secret = {
        "metadata": {"name": "cert", "namespace": "default"},
        "data": {"tls.crt": base64.b64encode(b"C").decode(), "tls.key": base64.b64encode(b"K").decode()},
    }
    with_default = ing(
        "d",
        rule("web.example", ("/app", "Prefix", "a")),
        defaultBackend={"service": {"name": "b", "port": {"number": 80}}},
        tls=[{"hosts": ["web.example"], "secretName": "cert"}],
    )
    config = model.build([with_default], cluster("a", "b", secrets={"default/cert": secret}), ok)
    assert config.servers["web.example"].default_upstream == "default_b_80"
    assert config.servers[""].default_upstream == "default_b_80"
    assert config.servers["web.example"].certificate == "default_cert"
    assert config.certificates["default_cert"].cert == b"C"
    refused = model.build(
        [with_default], cluster("a", "b", secrets={"default/cert": secret}), lambda c, k: "no good"
    )
    assert [(p.reason, p.message) for p in refused.problems] == [
        ("InvalidCertificate", 'TLS Secret "default/cert": no good')
    ]


def test_named_port_and_missing_port() -> None:
    named = ing("n", rule("x.example", ("/", "Prefix", "a")))
    named["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"] = {"name": "http"}
    assert model.build([named], cluster("a"), ok).upstreams["default_a_http"].addresses
    wrong = ing("w", rule("x.example", ("/", "Prefix", "a")))
    wrong["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"] = {"number": 81}
    assert [p.message for p in model.build([wrong], cluster("a"), ok).problems] == [
        'Service "default/a" has no port 81'
    ]


def test_certificate_pair_check(tmp_path: Path) -> None:
    cert, key = ensure_self_signed(tmp_path / "a", "a.example", [], "a")
    other_cert, other_key = ensure_self_signed(tmp_path / "b", "b.example", [], "b")
    assert check_pair(cert.read_bytes(), key.read_bytes()) is None
    assert (
        check_pair(cert.read_bytes(), other_key.read_bytes())
        == "tls.key does not match the certificate in tls.crt"
    )
    assert check_pair(b"junk", key.read_bytes()) == "tls.crt is not a PEM certificate"
    assert check_pair(other_cert.read_bytes(), b"junk") == "tls.key is not an unencrypted PEM private key"


def test_server_names() -> None:
    assert server_name("") == "_"
    assert server_name("web.example") == "web.example"
    assert server_name("*.example.com") == '"~^[^.]+\\\\.example\\\\.com$"'


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed")
def test_rendered_configuration_passes_nginx_t(tmp_path: Path) -> None:
    cert, key = ensure_self_signed(tmp_path / "certs", "ingress.local", [], "default-fake")
    for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp_path / "tmp" / sub).mkdir(parents=True, exist_ok=True)
    files = Files(tmp_path, cert, key)
    secret = {
        "metadata": {"name": "c", "namespace": "default"},
        "data": {
            "tls.crt": base64.b64encode(cert.read_bytes()).decode(),
            "tls.key": base64.b64encode(key.read_bytes()).decode(),
        },
    }
    ingresses = [
        ing(
            "a",
            rule(
                "web.example",
                ("/", "Prefix", "a"),
                ("/odd path;{x}", "ImplementationSpecific", "a"),
                ("/e", "Exact", "b"),
            ),
        ),
        ing(
            "w",
            rule("*.wild.example", ("/", "Prefix", "b")),
            tls=[{"hosts": ["*.wild.example"], "secretName": "c"}],
        ),
    ]
    config = model.build(ingresses, cluster("a", "b", secrets={"default/c": secret}), check_pair)
    for certificate in config.certificates.values():
        files.cert(certificate.name).write_bytes(certificate.cert)
        files.key(certificate.name).write_bytes(certificate.key)
    conf = tmp_path / "nginx.conf"
    conf.write_text(render(config, Listen("127.0.0.1", 18080, 18443), files))
    out = subprocess.run(
        ["nginx", "-t", "-c", str(conf), "-p", str(tmp_path), "-e", str(tmp_path / "e.log")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    text = conf.read_text()
    assert (
        'location = "/e"' in text
        and 'location "/odd path;{x}/"' in text
        and "return 308 https://$host:18443$request_uri;" in text
    )
    # ingress-nginx's defaults for the proxy hop: a worker per CPU, answers passed on unbuffered, and
    # per worker 320 idle connections to an upstream kept for up to 10 000 requests and 60 s idle.
    assert "worker_processes auto;" in text and "    proxy_buffering off;" in text
    assert text.count("        keepalive 320;") == text.count("    upstream ") == 2
    assert (
        text.count("        keepalive_requests 10000;") == text.count("        keepalive_timeout 60s;") == 2
    )


def test_only_an_update_the_configuration_reads_wakes_a_sync() -> None:
    old = {"metadata": {"name": "r", "resourceVersion": "1", "generation": 1}, "spec": {"a": 1}}
    status_only = {**old, "metadata": {**old["metadata"], "resourceVersion": "2"}, "status": {"x": 1}}
    assert not model.changes_config(old, status_only)
    assert model.changes_config(old, {**old, "spec": {"a": 2}})
    assert model.changes_config(old, {**old, "metadata": {**old["metadata"], "labels": {"k": "v"}}})
    assert model.changes_config(old, {**old, "data": {"tls.crt": "new"}})  # a Secret's data
