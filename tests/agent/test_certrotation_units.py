"""The certificate rotator's loop on its own (the rotation against a real API server is
tests/agent/test_bootstrap_integration.py): stop() ends it even when the cancel is lost."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agent.node.certrotation import CertRotator


def write_certificate(path: Path, days: int = 365) -> None:
    """A self-signed client certificate valid from a minute ago for `days` days."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "system:node:n1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=days))
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


class LosesItsCancel(CertRotator):
    """A rotation that goes on when cancelled, as Python 3.11's wait_for does when the cancel lands just
    as what it waits for (the issued CSR) arrives; it also puts the clock back, so the next deadline is
    months away."""

    def __init__(self, current: Path) -> None:
        self.offset = dt.timedelta(days=366)
        super().__init__([], "n1", current, clock=lambda: dt.datetime.now(dt.UTC) + self.offset)
        self.started = asyncio.Event()

    async def rotate(self) -> None:
        self.started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            pass  # the result came with the cancel: returned, the cancel lost
        self.offset = dt.timedelta(0)
        self.rotations += 1


async def test_stop_ends_the_loop_even_when_a_rotation_swallows_the_cancel(tmp_path: Path) -> None:
    current = tmp_path / "kubelet-client-current.pem"
    write_certificate(current)
    rotator = LosesItsCancel(current)
    rotator.start()
    await asyncio.wait_for(rotator.started.wait(), 10)  # the clock is past the deadline: at once
    await asyncio.wait_for(rotator.stop(), 5)  # not a sleep toward a deadline months away
    assert rotator.rotations == 1
