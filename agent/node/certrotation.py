"""Client certificate rotation (`rotateCertificates`; upstream's k8s.io/client-go/util/certificate
manager as the kubelet runs it): at a jittered 70-90 % of the current certificate's lifetime (from its
notBefore) a new key and a kube-apiserver-client-kubelet CSR are made and posted as the node itself
(`system:node:<name>`, which the approver lets renew its own name), the issued pair replaces
`kubelet-client-current.pem`, and the running clients take it for their next connections without a
restart. A failed attempt is retried with backoff (1 s doubling to 5 min) while the old certificate
still works.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from agent.node.bootstrap import request_certificate, store_pair
from kubeclient.client import KubeClient

log = logging.getLogger("agent.node.certrotation")

Clock = Callable[[], dt.datetime]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def rotation_deadline(cert: x509.Certificate, fraction: float) -> dt.datetime:
    """notBefore + fraction of the lifetime (upstream's nextRotationDeadline, fraction in 0.7..0.9)."""
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    return cert.not_valid_before_utc + lifetime * fraction


def jittered_fraction(rng: random.Random | None = None) -> float:
    return 0.7 + 0.2 * (rng or random).random()


class CertRotator:
    """Renews the client certificate in `current` (a PEM holding certificate and key) for `clients`."""

    def __init__(
        self,
        clients: Sequence[KubeClient],
        node_name: str,
        current: Path,
        clock: Clock = _now,
        max_backoff: float = 300.0,
    ) -> None:
        self.clients = list(clients)
        self.node_name = node_name
        self.current = current
        self.clock = clock
        self.max_backoff = max_backoff
        self.rotations = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.current.read_bytes())

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name="cert-rotation")

    async def stop(self) -> None:
        """Cancel the loop and wait for it. The loop also checks a flag: Python 3.11's wait_for (inside
        request_certificate) returns its result instead of raising when the cancel lands as the CSR is
        issued, and a loop relying on the cancel alone then slept on toward the next deadline, months
        away, with stop() waiting for it."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while not self._stopping:
            cert = await asyncio.to_thread(self.certificate)
            deadline = rotation_deadline(cert, jittered_fraction())
            wait = (deadline - self.clock()).total_seconds()
            log.info(
                "event=rotation-scheduled node=%s deadline=%s wait_s=%.0f",
                self.node_name,
                deadline.isoformat(),
                max(wait, 0),
            )
            # Sleep in bounded steps so a moved clock (tests, a suspended host) is noticed.
            while wait > 0 and not self._stopping:
                await asyncio.sleep(min(wait, 60.0))
                wait = (deadline - self.clock()).total_seconds()
            if not self._stopping:
                await self._rotate_with_backoff()

    async def _rotate_with_backoff(self) -> None:
        delay = 1.0
        while not self._stopping:
            try:
                await self.rotate()
                return
            except asyncio.CancelledError:
                raise
            except Exception as err:  # an unreachable server, a denied CSR: try again later
                log.warning(
                    "event=rotation-failed node=%s error=%r retry_s=%.0f", self.node_name, str(err), delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)

    async def rotate(self) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        # A fresh name each time: the digest of a new key never repeats.
        cert_pem = await request_certificate(self.clients[0], self.node_name, key)
        current = await asyncio.to_thread(store_pair, self.current.parent, cert_pem, key, self.clock())
        for client in self.clients:
            client.reload_client_certificate(current, current)
        self.rotations += 1
        cert = x509.load_pem_x509_certificate(cert_pem)
        log.info(
            "event=certificate-rotated node=%s not_after=%s",
            self.node_name,
            cert.not_valid_after_utc.isoformat(),
        )
