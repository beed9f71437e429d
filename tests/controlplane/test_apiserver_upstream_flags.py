"""The API server started with the flags people paste from kubeadm's manifest, in upstream's syntax, and
logging as component-base's JSON logger at -v=4: each flag has its effect (service IP and node port
ranges, anonymous auth off, the extra client CA) and every line the server and its scheduler child
write is one JSON object with upstream's keys, none holding a bearer token."""

from __future__ import annotations

import ipaddress
import json
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration

TOKEN = "s3cr3t-admin-token-0123456789abcdef"
WRONG_TOKEN = "wr0ng-token-fedcba9876543210"


def call(server: ApiServer, method: str, path: str, token: str | None, body: Any = None) -> tuple[int, Any]:
    context = ssl.create_default_context(cafile=str(server.ca_cert))
    context.check_hostname = False
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{server.url}{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def service(name: str, kind: str = "ClusterIP", node_port: int | None = None) -> dict[str, Any]:
    port: dict[str, Any] = {"port": 80}
    if node_port:
        port["nodePort"] = node_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"type": kind, "ports": [port]},
    }


def json_lines(path: Path) -> list[dict[str, Any]]:
    entries = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)  # every line: a JSON object, nothing else
        assert isinstance(entry["ts"], float) and entry["ts"] > 1e12, line  # epoch milliseconds
        assert isinstance(entry["msg"], str), line
        assert entry["caller"].rsplit(":", 1)[1].isdigit(), line
        assert list(entry)[:3] == ["ts", "caller", "msg"], line
        assert "v" in entry or "err" in entry or list(entry) == ["ts", "caller", "msg"], line
        entries.append(entry)
    return entries


def rsa_pair(directory: Path) -> tuple[Path, Path]:
    """kubeadm's sa.key and sa.pub."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private, public = directory / "sa.key", directory / "sa.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def test_kubeadm_flags_and_json_logs(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text(f'{TOKEN},admin,1,"system:masters"\n')
    sa_key, sa_pub = rsa_pair(tmp_path)
    args = [
        "--token-auth-file",
        str(tokens),
        "--logging-format=json",
        "-v=4",
        "--anonymous-auth=false",
        "--event-ttl",
        "1h",
        "--etcd-compaction-interval=5m",
        "--service-cluster-ip-range=10.97.0.0/24",
        "--service-node-port-range=31000-31010",
        "--enable-admission-plugins=NodeRestriction",
        "--watch-cache-sizes=pods#100",
        # the rest of kubeadm's manifest
        "--allow-privileged=true",
        "--authorization-mode=Node,RBAC",
        "--enable-bootstrap-token-auth=true",
        "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-username-headers=X-Remote-User",
        f"--service-account-signing-key-file={sa_key}",
        f"--service-account-key-file={sa_pub}",
    ]
    server = ApiServer(tmp_path / "api", scheduler=True, extra_args=args)
    with server:
        status, _ = call(server, "GET", "/api/v1/namespaces", None)
        assert status == 401  # --anonymous-auth=false
        status, _ = call(server, "GET", "/api/v1/namespaces", WRONG_TOKEN)
        assert status == 401
        status, kubernetes = call(server, "GET", "/api/v1/namespaces/default/services/kubernetes", TOKEN)
        assert status == 200 and kubernetes["spec"]["clusterIP"] == "10.97.0.1"
        status, created = call(server, "POST", "/api/v1/namespaces/default/services", TOKEN, service("web"))
        assert status == 201
        assert ipaddress.ip_address(created["spec"]["clusterIP"]) in ipaddress.ip_network("10.97.0.0/24")
        status, created = call(
            server, "POST", "/api/v1/namespaces/default/services", TOKEN, service("np", "NodePort")
        )
        assert status == 201 and 31000 <= created["spec"]["ports"][0]["nodePort"] <= 31010
        status, refused = call(
            server, "POST", "/api/v1/namespaces/default/services", TOKEN, service("out", "NodePort", 30080)
        )
        assert status == 422
        assert refused["details"]["causes"][0]["field"] == "spec.ports[0].nodePort"
        assert "The range of valid ports is 31000-31010" in refused["message"]
        bad_ip = service("badip")
        bad_ip["spec"]["clusterIP"] = "10.96.5.5"
        status, refused = call(server, "POST", "/api/v1/namespaces/default/services", TOKEN, bad_ip)
        assert status == 422 and "The range of valid IPs is 10.97.0.0/24" in refused["message"]
        from controlplane.apiserver.sakeys import key_id, load_signing_key

        status, jwks = call(server, "GET", "/openid/v1/jwks", TOKEN)  # the signing key is the one given
        assert status == 200 and [k["kid"] for k in jwks["keys"]] == [key_id(load_signing_key(sa_key).public)]
        # the scheduler child has run (and logged) once it holds its lease
        lease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler"
        deadline = time.monotonic() + 60
        while call(server, "GET", lease, TOKEN)[0] != 200:
            assert time.monotonic() < deadline, "the scheduler never took its lease"
            time.sleep(0.2)
    logs = {name: server.data_dir / name for name in ("apiserver.log", "scheduler.log")}
    entries = {name: json_lines(path) for name, path in logs.items()}
    assert entries["apiserver.log"] and entries["scheduler.log"]
    # -v=4 lets upstream's V(3) request log through, with httplog's keys
    requests = [e for e in entries["apiserver.log"] if e["msg"] == "HTTP"]
    assert any(e["v"] == 3 and e["verb"] == "POST" and e["resp"] == 422 for e in requests), requests
    assert all({"URI", "latency", "userAgent", "srcIP", "resp"} <= set(e) for e in requests)
    for name, path in logs.items():
        text = path.read_text()
        assert TOKEN not in text and WRONG_TOKEN not in text, f"a bearer token is in {name}"


def test_bad_flag_values_stop_the_server_with_exit_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    sa_key, sa_pub = rsa_pair(tmp_path / "a")
    _, other_pub = rsa_pair(tmp_path / "b")

    for argv, text in (
        (["--event-ttl", "1x"], 'time: unknown unit "x" in duration "1x"'),
        (["--service-cluster-ip-range=10.97.0.0/33"], "--service-cluster-ip-range"),
        (["--enable-admission-plugins=NoSuchPlugin"], 'admission plugin "NoSuchPlugin" is unknown'),
        (["--tls-cipher-suites=TLS_NOPE"], "Cipher suite TLS_NOPE not supported or doesn't exist"),
        (["--tls-cert-file", str(tmp_path / "missing.crt")], "--tls-cert-file and --tls-private-key-file"),
        (["--allow-privileged=false"], "--allow-privileged=false is not supported by pykubelet"),
        (
            ["--requestheader-username-headers=X-User"],
            "--requestheader-username-headers=X-User is not supported",
        ),
        (["--kubelet-preferred-address-types=InternalIP,Nope"], "--kubelet-preferred-address-types: Nope"),
        (["--service-account-key-file", str(other_pub)], "needs --service-account-signing-key-file"),
        (
            [
                "--service-account-signing-key-file",
                str(sa_key),
                "--service-account-key-file",
                str(sa_key) + ".nope",
            ],
            "--service-account-key-file",
        ),
        (
            ["--kubelet-client-certificate", str(sa_pub)],
            "--kubelet-client-certificate and --kubelet-client-key",
        ),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "pykubelet", "server", "--data-dir", str(tmp_path / "d"), *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, (argv, proc.stderr)
        assert text in proc.stderr, (argv, proc.stderr)


def kubeadm_pki(directory: Path) -> Path:
    """A CA named as kubeadm names its own ("kubernetes"), a serving certificate for 127.0.0.1 and a
    client certificate alice (O=system:masters) it signed."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])

    def issue(stem: str, subject: x509.Name, key: ec.EllipticCurvePrivateKey, ca: bool, extra: list) -> None:
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        for extension in extra:
            builder = builder.add_extension(extension, critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        (directory / f"{stem}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (directory / f"{stem}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )

    issue("ca", ca_name, ca_key, True, [])
    serving = [
        x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
    ]
    issue("apiserver", x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
          ec.generate_private_key(ec.SECP256R1()), False, serving)  # fmt: skip
    alice = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
        ]
    )
    issue("alice", alice, ec.generate_private_key(ec.SECP256R1()), False,
          [x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])])  # fmt: skip
    return directory


def test_own_serving_certificate_client_ca_and_cipher_suites(tmp_path: Path) -> None:
    """--tls-cert-file/--tls-private-key-file are what the server presents, a client certificate from
    --client-ca-file authenticates, --tls-cipher-suites limits TLS 1.2 to the suites named, and the
    scheduler child (its kubeconfig trusting the client CA) still reaches the server."""
    from cryptography import x509

    outside = kubeadm_pki(tmp_path / "kubeadm")  # another CA, as kubeadm's /etc/kubernetes/pki
    args = [
        "--tls-cert-file",
        str(outside / "apiserver.crt"),
        "--tls-private-key-file",
        str(outside / "apiserver.key"),
        "--client-ca-file",
        str(outside / "ca.crt"),
        "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        "--requestheader-client-ca-file",
        str(outside / "ca.crt"),
        "--requestheader-allowed-names=front-proxy-client,aggregator",
        "--proxy-client-cert-file",
        str(outside / "alice.crt"),
        "--proxy-client-key-file",
        str(outside / "alice.key"),
        "--kubelet-client-certificate",
        str(outside / "alice.crt"),
        "--kubelet-client-key",
        str(outside / "alice.key"),
    ]
    server = ApiServer(tmp_path / "api", scheduler=True, extra_args=args)
    with server:
        context = ssl.create_default_context(cafile=str(outside / "ca.crt"))  # only the outside CA
        context.check_hostname = False
        context.load_cert_chain(outside / "alice.crt", outside / "alice.key")
        request = urllib.request.Request(f"{server.url}/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                         data=b'{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}',
                                         method="POST", headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, context=context, timeout=10) as resp:
            review = json.loads(resp.read())
        assert review["status"]["userInfo"]["username"] == "alice"
        configmap = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
        with urllib.request.urlopen(
            urllib.request.Request(f"{server.url}{configmap}"), context=context
        ) as resp:
            published = json.loads(resp.read())["data"]
        assert published["requestheader-client-ca-file"] == (outside / "ca.crt").read_text()
        assert json.loads(published["requestheader-allowed-names"]) == ["front-proxy-client", "aggregator"]
        assert (outside / "ca.crt").read_text() in published["client-ca-file"]
        with ssl.create_connection(("127.0.0.1", server.port)) as raw, context.wrap_socket(raw) as tls:
            served = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))
        assert served == x509.load_pem_x509_certificate((outside / "apiserver.crt").read_bytes())
        tls12 = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        tls12.check_hostname, tls12.verify_mode = False, ssl.CERT_NONE
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        tls12.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")  # not among the suites named
        with pytest.raises(ssl.SSLError), ssl.create_connection(("127.0.0.1", server.port)) as raw:
            tls12.wrap_socket(raw)
        tls12.set_ciphers("ECDHE-ECDSA-AES256-GCM-SHA384")
        with ssl.create_connection(("127.0.0.1", server.port)) as raw, tls12.wrap_socket(raw) as tls:
            assert tls.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
        lease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler"
        deadline = time.monotonic() + 60
        while True:  # the scheduler, trusting the server through --client-ca-file, takes its lease
            lease_request = urllib.request.Request(f"{server.url}{lease}")
            try:
                with urllib.request.urlopen(lease_request, context=context, timeout=10) as resp:
                    if resp.status == 200:
                        break
            except urllib.error.HTTPError as err:
                assert err.code == 404, err
            assert time.monotonic() < deadline, (server.data_dir / "scheduler.log").read_text()[-2000:]
            time.sleep(0.2)
