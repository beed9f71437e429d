"""Request-header (front-proxy) authentication, upstream's requestheader authenticator: a request whose
client certificate the requestheader CA signed (--requestheader-client-ca-file, default the server's own
front-proxy CA), with a CN among --requestheader-allowed-names (empty: any), is the user its
`X-Remote-User` header names, in the `X-Remote-Group` groups, with `X-Remote-Extra-<key>` extra; so this
server can sit behind an aggregator or an authenticating proxy. Such a certificate is no user of its own:
without the header the request is not authenticated by it (and the x509 authenticator does not take it
either, unless the cluster CA signed it too)."""

from __future__ import annotations

import ssl
import weakref
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from aiohttp import web
from cryptography import x509

from controlplane.apiserver.authn import UserInfo

USER_HEADER = "X-Remote-User"
GROUP_HEADER = "X-Remote-Group"
EXTRA_PREFIX = "X-Remote-Extra-"

DN = frozenset[tuple[str, str]]


def _ca_subject(path: Path) -> DN:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    return frozenset((attr.oid._name, str(attr.value)) for attr in cert.subject)


# A connection's verified certificate never changes (no renegotiation on the server context), and
# getpeercert() parses it anew on each call: read once per connection, dropped with it.
_PEERS: weakref.WeakKeyDictionary[ssl.SSLObject, tuple[DN, str] | None] = weakref.WeakKeyDictionary()


def peer_issuer_and_cn(ssl_object: ssl.SSLObject) -> tuple[DN, str] | None:
    try:
        return _PEERS[ssl_object]
    except KeyError:
        found = _PEERS[ssl_object] = _issuer_and_cn(ssl_object)
        return found


def _issuer_and_cn(ssl_object: ssl.SSLObject) -> tuple[DN, str] | None:
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    issuer = frozenset((k, v) for rdn in cert.get("issuer", ()) for k, v in rdn)
    cn = next((v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"), "")
    return issuer, cn


@dataclass(frozen=True)
class RequestHeaderAuthenticator:
    issuer: DN
    allowed_names: tuple[str, ...] = ()
    # The x509 authenticator takes certificates of this CA too (it is also a client CA): then a front
    # proxy's certificate without the header still logs in as itself, as upstream's union does.
    shared_with_client_ca: bool = False

    @classmethod
    def from_files(
        cls, ca: Path, allowed_names: tuple[str, ...], client_cas: tuple[Path, ...]
    ) -> RequestHeaderAuthenticator:
        issuer = _ca_subject(ca)
        return cls(issuer, allowed_names, any(_ca_subject(p) == issuer for p in client_cas))

    def _proxy(self, request: web.Request) -> bool:
        """Whether the connection's verified certificate is an allowed front proxy's."""
        transport = request.transport
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        if not isinstance(ssl_object, ssl.SSLObject):
            return False
        found = peer_issuer_and_cn(ssl_object)
        if found is None or found[0] != self.issuer:
            return False
        return not self.allowed_names or found[1] in self.allowed_names

    def authenticate(self, request: web.Request) -> UserInfo | None:
        if not self._proxy(request):
            return None
        name = request.headers.get(USER_HEADER, "")
        if not name:
            return None
        groups = tuple(request.headers.getall(GROUP_HEADER, []))
        extra: dict[str, list[str]] = {}
        for header, value in request.headers.items():
            if header.lower().startswith(EXTRA_PREFIX.lower()):
                extra.setdefault(unquote(header[len(EXTRA_PREFIX) :]).lower(), []).append(value)
        return UserInfo(
            name,
            groups=(*groups, "system:authenticated"),
            extra=tuple(sorted((k, tuple(v)) for k, v in extra.items())),
        )

    def owns_certificate(self, request: web.Request) -> bool:
        """A front proxy's certificate, which the x509 authenticator must not take as a user."""
        return not self.shared_with_client_ca and self._proxy_issued(request)

    def _proxy_issued(self, request: web.Request) -> bool:
        transport = request.transport
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        if not isinstance(ssl_object, ssl.SSLObject):
            return False
        found = peer_issuer_and_cn(ssl_object)
        return found is not None and found[0] == self.issuer
