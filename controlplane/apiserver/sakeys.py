"""The service-account signing key pair: made on first start as kubeadm makes it (DIR/pki/sa.key, an RSA
2048 private key, 0600, and DIR/pki/sa.pub, its public half), then only read.

RSA because it is upstream's default for --service-account-key-file and what every OIDC consumer of
/openid/v1/jwks accepts (RS256). The key id is upstream's: the unpadded base64url SHA-256 of the
public key's PKIX DER, so tokens, the JWKS and `kid` headers line up the way they do on kube-apiserver.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ALGORITHM = "RS256"
KEY_FILE = "sa.key"
PUBLIC_FILE = "sa.pub"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def key_id(public: rsa.RSAPublicKey) -> str:
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return _b64(hashlib.sha256(der).digest())


@dataclass(frozen=True)
class SigningKey:
    """The private key that signs tokens; `public_keys` verify them (the signing key's public half)."""

    private: rsa.RSAPrivateKey
    kid: str

    def __repr__(self) -> str:  # never the key material
        return f"SigningKey(kid={self.kid!r})"

    @property
    def public(self) -> rsa.RSAPublicKey:
        return self.private.public_key()

    def jwk(self) -> dict[str, Any]:
        return _jwk(self.public, self.kid)

    def verification(self) -> VerificationKey:
        return VerificationKey(self.public, self.kid)


@dataclass(frozen=True)
class VerificationKey:
    """A public key that verifies tokens (--service-account-key-file): the signing key's own, and the
    retired ones kept while tokens they signed may still be in use."""

    public: rsa.RSAPublicKey
    kid: str

    def jwk(self) -> dict[str, Any]:
        return _jwk(self.public, self.kid)


def _jwk(public: rsa.RSAPublicKey, kid: str) -> dict[str, Any]:
    """The public key as a JWK, as upstream's /openid/v1/jwks lists it."""
    numbers = public.public_numbers()
    n = numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")
    e = numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")
    return {"use": "sig", "kty": "RSA", "kid": kid, "alg": ALGORITHM, "n": _b64(n), "e": _b64(e)}


_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z ]+)-----.+?-----END \1-----", re.S)


def load_verification_keys(path: Path) -> list[VerificationKey]:
    """Every RSA key of a PEM file (--service-account-key-file: public keys, private keys whose public
    half is meant, or certificates), in file order; ValueError when it holds none or another kind."""
    data = path.read_bytes()
    found: list[VerificationKey] = []
    for block in _PEM_BLOCK.finditer(data):
        kind, pem = block.group(1).decode(), block.group(0)
        if kind == "CERTIFICATE":
            public: Any = x509.load_pem_x509_certificate(pem).public_key()
        elif kind.endswith("PRIVATE KEY"):
            public = serialization.load_pem_private_key(pem, password=None).public_key()
        elif kind.endswith("PUBLIC KEY"):
            public = serialization.load_pem_public_key(pem)
        else:
            continue
        if not isinstance(public, rsa.RSAPublicKey):
            raise ValueError(f"{path}: only RSA keys are supported (found {type(public).__name__})")
        found.append(VerificationKey(public, key_id(public)))
    if not found:
        raise ValueError(f"{path}: no public key in the file (PEM public key, private key or certificate)")
    return found


def load_signing_key(path: Path) -> SigningKey:
    """An RSA private key file (--service-account-signing-key-file, kubeadm's sa.key)."""
    loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, rsa.RSAPrivateKey):
        raise ValueError(f"{path}: not an RSA private key")
    return SigningKey(loaded, key_id(loaded.public_key()))


def ensure_signing_key(pki_dir: Path) -> SigningKey:
    """Read DIR/sa.key, or make the pair once (the private key written 0600 before any byte of it)."""
    pki_dir.mkdir(parents=True, exist_ok=True)
    key_path, pub_path = pki_dir / KEY_FILE, pki_dir / PUBLIC_FILE
    if key_path.exists():
        private = load_signing_key(key_path).private
    else:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        data = private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        tmp = key_path.with_name(f".{KEY_FILE}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, key_path)
    if not pub_path.exists():
        pub_path.write_bytes(
            private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return SigningKey(private, key_id(private.public_key()))


__all__ = [
    "ALGORITHM",
    "SigningKey",
    "VerificationKey",
    "ensure_signing_key",
    "key_id",
    "load_signing_key",
    "load_verification_keys",
]
