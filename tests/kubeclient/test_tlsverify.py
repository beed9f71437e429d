"""A client certificate Go would accept is accepted on every Python: a leaf without an Authority Key
Identifier, signed by a CA without key usage (what hand-rolled and older CAs make), passes a real TLS
handshake against a component's serving context, also where the context started strict (Python 3.13's
default), and one from another CA is still refused."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest

from kubeclient.serving import ensure_self_signed, server_context
from kubeclient.tlsverify import go_compatible
from tests.clientpki import client_pki


def _bare_ca_and_leaf(d: Path, tag: str) -> tuple[Path, Path, Path]:
    pki = client_pki(d / tag, "alice", ca_cn=f"bare-ca-{tag}")
    return pki["ca"], pki["cert"], pki["key"]


def _handshake(server_ctx: ssl.SSLContext, cert: Path, key: Path) -> str | None:
    """The client certificate's CN as the server saw it after a real handshake, or None if refused."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: list[str | None] = []

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                peer = tls.getpeercert() or {}
                seen.append(
                    next((v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"), "")
                )
                tls.sendall(b"x")
        except (ssl.SSLError, OSError):
            seen.append(None)

    thread = threading.Thread(target=serve)
    thread.start()
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    client_ctx.load_cert_chain(str(cert), str(key))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with client_ctx.wrap_socket(raw) as tls:
                tls.recv(1)
    except (ssl.SSLError, OSError):
        pass
    thread.join(5)
    listener.close()
    return seen[0] if seen else None


@pytest.fixture
def serving(tmp_path: Path) -> tuple[Path, Path]:
    return ensure_self_signed(tmp_path, "localhost", ["127.0.0.1"], "serving")


def test_a_leaf_without_authority_key_id_is_accepted_as_go_accepts_it(tmp_path: Path, serving) -> None:
    ca, cert, key = _bare_ca_and_leaf(tmp_path, "a")
    ctx = server_context(*serving, str(ca))
    assert not ctx.verify_flags & ssl.VERIFY_X509_STRICT
    assert _handshake(ctx, cert, key) == "alice"


def test_strict_mode_is_what_refused_it_and_go_compatible_lifts_only_that(tmp_path: Path, serving) -> None:
    ca, cert, key = _bare_ca_and_leaf(tmp_path, "b")
    strict = server_context(*serving, str(ca))
    strict.verify_flags |= ssl.VERIFY_X509_STRICT  # what Python 3.13's create_default_context starts with
    assert _handshake(strict, cert, key) is None
    assert _handshake(go_compatible(strict), cert, key) == "alice"


def test_a_certificate_from_another_ca_is_still_refused(tmp_path: Path, serving) -> None:
    ca, _, _ = _bare_ca_and_leaf(tmp_path, "c")
    _, other_cert, other_key = _bare_ca_and_leaf(tmp_path, "d")
    ctx = server_context(*serving, str(ca))
    ctx.verify_mode = ssl.CERT_REQUIRED
    assert _handshake(ctx, other_cert, other_key) is None
