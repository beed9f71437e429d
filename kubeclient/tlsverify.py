"""Certificate chains verified as Go's crypto/x509 verifies them, on every Python.

Python 3.13's `ssl.create_default_context` turns on OpenSSL's strict X.509 checks (VERIFY_X509_STRICT),
which refuse a leaf without an Authority Key Identifier or a CA without key usage. Go, which every
upstream component and kubectl are written in, never asked for those, so certificates that a cluster
made with other tools (a hand-rolled CA, an old kubeadm, a webhook's own test CA) work against
kube-apiserver and the kubelet; with the strict checks they would fail against ours only on newer
Pythons (Debian 13's 3.13). Every context that verifies a peer goes through `go_compatible`, so the
same certificates are accepted on 3.11 and on 3.13. The certificates this project issues carry the
extensions anyway (as kubeadm's do).
"""

from __future__ import annotations

import ssl


def go_compatible(ctx: ssl.SSLContext) -> ssl.SSLContext:
    """Drop OpenSSL's strict mode from `ctx` (nothing else changes: chains, names, expiry and key
    usages are still verified); returns `ctx` for chaining."""
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return ctx
