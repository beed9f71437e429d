"""Encryption at rest on the real API server, on SQLite and on etcd, through the real kubectl: the stored
bytes (read with sqlite3 and with etcdctl, as an administrator would) carry upstream's prefix and not the
secret; key rotation by adding a key and replacing every Secret re-encrypts them; a store holding data
no configured key opens refuses to start, saying which."""

from __future__ import annotations

import base64
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.etcd import Etcd
from tests.controlplane.conftest import KUBECTL, Kubectl

pytestmark = pytest.mark.integration

SECRET = "TOPSECRET-" + uuid.uuid4().hex


def config(*keys: tuple[str, str]) -> str:
    listed = "".join(f"      - {{name: {name}, secret: {secret}}}\n" for name, secret in keys)
    return (
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n"
        f"- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys:\n{listed}  - identity: {{}}\n"
    )


class Raw:
    """What the backend holds for a key, read beside the server."""

    def __init__(self, backend: str, data_dir: Path, etcd: Etcd | None, prefix: str) -> None:
        self.backend, self.data_dir, self.etcd, self.prefix = backend, data_dir, etcd, prefix

    def __call__(self, resource: str, namespace: str, name: str) -> bytes:
        if self.etcd is None:
            with sqlite3.connect(self.data_dir / "state.db") as db:
                row = db.execute(
                    "SELECT value FROM log WHERE key = ? ORDER BY rev DESC LIMIT 1",
                    (f"/{resource}/{namespace}/{name}",),
                ).fetchone()
            assert row is not None
            return bytes(row[0])
        pki = self.etcd.pki
        out = subprocess.run(
            [
                "etcdctl",
                "--endpoints",
                self.etcd.url,
                "--cacert",
                str(pki.ca_cert),
                "--cert",
                str(pki.client_cert),
                "--key",
                str(pki.client_key),
                "get",
                "--print-value-only",
                f"{self.prefix}{resource}/{namespace}/{name}",
            ],
            capture_output=True,
            env={**os.environ, "ETCDCTL_API": "3"},
            check=True,
            timeout=30,
        ).stdout
        assert out, f"etcd holds no {self.prefix}{resource}/{namespace}/{name}"
        return out.rstrip(b"\n")


@pytest.mark.parametrize("backend", ["sqlite", "etcd"])
def test_secrets_are_stored_encrypted_and_rotate(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if KUBECTL is None or (backend == "etcd" and shutil.which("etcdctl") is None):
        pytest.skip("needs kubectl (and etcdctl for etcd)")
    etcd: Etcd | None = request.getfixturevalue("etcd") if backend == "etcd" else None
    prefix = f"/enc-{uuid.uuid4().hex[:8]}/"
    enc = tmp_path / "encryption.yaml"
    key1, key2 = (
        ("key1", base64.b64encode(os.urandom(32)).decode()),
        ("key2", base64.b64encode(os.urandom(32)).decode()),
    )
    enc.write_text(config(key1))
    args = ["--encryption-provider-config", str(enc)]
    if etcd is not None:
        args += ["--etcd-prefix", prefix]
    server = ApiServer(tmp_path / "server", extra_args=args, etcd=etcd)
    raw = Raw(backend, server.data_dir, etcd, prefix)
    server.start()
    try:
        kubectl = Kubectl(server.kubeconfig, tmp_path / "home")
        kubectl("create", "secret", "generic", "s", f"--from-literal=password={SECRET}")
        kubectl("create", "configmap", "c", f"--from-literal=password={SECRET}")
        stored = raw("secrets", "default", "s")
        assert stored.startswith(b"k8s:enc:aesgcm:v1:key1:")
        assert SECRET.encode() not in stored and base64.b64encode(SECRET.encode()) not in stored
        assert SECRET.encode() in raw("configmaps", "default", "c")  # not listed: stored as it is
        got = kubectl("get", "secret", "s", "-o", "jsonpath={.data.password}")
        assert base64.b64decode(got).decode() == SECRET

        # Rotation, upstream's procedure: the new key second (every server can read it), then first, then
        # every Secret replaced, then the old key removed.
        server.stop()
        enc.write_text(config(key2, key1))
        server.start()
        assert raw("secrets", "default", "s").startswith(b"k8s:enc:aesgcm:v1:key1:")
        assert (
            base64.b64decode(kubectl("get", "secret", "s", "-o", "jsonpath={.data.password}")).decode()
            == SECRET
        )
        listing = kubectl("get", "secrets", "-A", "-o", "json")
        kubectl("replace", "-f", "-", input=listing)
        assert raw("secrets", "default", "s").startswith(b"k8s:enc:aesgcm:v1:key2:")
        server.stop()
        enc.write_text(config(key2))
        server.start()
        assert (
            base64.b64decode(kubectl("get", "secret", "s", "-o", "jsonpath={.data.password}")).decode()
            == SECRET
        )
        server.stop()

        # A key the stored data needs is gone: the server says which and does not start.
        enc.write_text(config(("key3", base64.b64encode(os.urandom(32)).decode())))
        proc = subprocess.run(
            [sys.executable, *server.command()[1:]], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode != 0
        assert "--encryption-provider-config" in proc.stderr
        assert (
            "/secrets/default/s: no matching prefix found: stored as k8s:enc:aesgcm:v1:key2:" in proc.stderr
        )
    finally:
        server.stop()
    assert not server.running
