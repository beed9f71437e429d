"""A real stub resolver asks the cluster DNS for an ExternalName Service: glibc's getaddrinfo (through
`getent ahostsv4`) does not chase a CNAME with a second query, so the answer must carry the target's
address, as CoreDNS's does. Runs in a network and mount namespace of its own (root), where the server
listens on 127.0.0.1:53 and /etc/resolv.conf points at it; nothing outside the namespace sees either."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_glibc_gets_the_address_behind_an_external_name() -> None:
    done = subprocess.run(
        [
            "unshare",
            "--net",
            "--mount",
            sys.executable,
            "-m",
            "tests.clusterdns.stub_resolver_probe",
            "ext.shop.svc.cluster.local",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout.split()[0] == "192.0.2.80", done.stdout
    assert done.stdout.split()[2] == "www.example.test"  # the canonical name: the CNAME's target
