"""Encryption at rest: values encrypted on their way into the store and decrypted on their way out, at
this one point between the API server's objects and the backend (SQLite or etcd).

A `Transformer` holds a resource's providers in the configured order, each key a provider of its own
with upstream's prefix (`k8s:enc:aesgcm:v1:<key name>:`, aescbc, secretbox; identity writes the object
as it is): writes use the first, reads pick the one whose prefix the stored bytes carry. A value read
with any other than the first is *stale*: `TransformingStore.stale(key)` says so until it is written
again, so an unchanged update still rewrites it (upstream's key rotation: add a key first, then replace
every object). The store wrapper only touches values: keys, revisions and everything else pass through.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from controlplane.storage.interface import Event, KeyValue, Store, StoreError

ENCRYPTED = b"k8s:enc:"


class EncryptionError(StoreError):
    """A stored value cannot be read (no provider for its prefix, or a key that does not open it)."""


class Provider(Protocol):
    prefix: bytes

    def encrypt(self, data: bytes, context: bytes) -> bytes: ...

    def decrypt(self, data: bytes, context: bytes) -> bytes: ...


class Identity:
    """No encryption: the value as it is (no prefix); refuses to pass encrypted bytes off as plain."""

    prefix = b""

    def encrypt(self, data: bytes, context: bytes) -> bytes:
        return data

    def decrypt(self, data: bytes, context: bytes) -> bytes:
        if data.startswith(ENCRYPTED):
            raise EncryptionError("identity transformer tried to read encrypted data")
        return data


class AesGcm:
    """AES-GCM: a random 12-byte nonce, then the sealed value; the storage key is authenticated with it."""

    def __init__(self, name: str, secret: bytes) -> None:
        self.prefix = f"k8s:enc:aesgcm:v1:{name}:".encode()
        self._aead = AESGCM(secret)

    def encrypt(self, data: bytes, context: bytes) -> bytes:
        nonce = os.urandom(12)
        return self.prefix + nonce + self._aead.encrypt(nonce, data, context)

    def decrypt(self, data: bytes, context: bytes) -> bytes:
        body = data[len(self.prefix) :]
        return self._aead.decrypt(body[:12], body[12:], context)


class AesCbc:
    """AES-CBC with PKCS#7 padding: a random 16-byte IV, then the ciphertext."""

    def __init__(self, name: str, secret: bytes) -> None:
        self.prefix = f"k8s:enc:aescbc:v1:{name}:".encode()
        self._key = secret

    def encrypt(self, data: bytes, context: bytes) -> bytes:
        iv = os.urandom(16)
        padder = padding.PKCS7(128).padder()
        padded = padder.update(data) + padder.finalize()
        enc = Cipher(algorithms.AES(self._key), modes.CBC(iv)).encryptor()
        return self.prefix + iv + enc.update(padded) + enc.finalize()

    def decrypt(self, data: bytes, context: bytes) -> bytes:
        body = data[len(self.prefix) :]
        if len(body) < 32 or len(body) % 16:
            raise EncryptionError("the stored data is not a whole number of AES blocks")
        dec = Cipher(algorithms.AES(self._key), modes.CBC(body[:16])).decryptor()
        padded = dec.update(body[16:]) + dec.finalize()
        unpadder = padding.PKCS7(128).unpadder()
        return unpadder.update(padded) + unpadder.finalize()


class SecretBox:
    """NaCl secretbox (XSalsa20-Poly1305): a random 24-byte nonce, then the box."""

    def __init__(self, name: str, secret: bytes) -> None:
        from nacl.secret import SecretBox as Box

        self.prefix = f"k8s:enc:secretbox:v1:{name}:".encode()
        self._box = Box(secret)

    def encrypt(self, data: bytes, context: bytes) -> bytes:
        return self.prefix + bytes(self._box.encrypt(data))

    def decrypt(self, data: bytes, context: bytes) -> bytes:
        return self._box.decrypt(data[len(self.prefix) :])


@dataclass
class Transformer:
    """One resource's providers, the writing one first."""

    providers: list[Provider]

    def write(self, key: str, data: bytes) -> bytes:
        return self.providers[0].encrypt(data, key.encode())

    def read(self, key: str, data: bytes) -> tuple[bytes, bool]:
        """The plain value and whether it is stale (not written by the first provider)."""
        for i, provider in enumerate(self.providers):
            if provider.prefix and data.startswith(provider.prefix):
                try:
                    return provider.decrypt(data, key.encode()), i != 0
                except EncryptionError:
                    raise
                except Exception as err:  # InvalidTag, bad padding, nacl's CryptoError
                    name = provider.prefix.decode()
                    raise EncryptionError(
                        f"{key}: cannot decrypt with the key of prefix {name!r}: "
                        f"{type(err).__name__} {err}".rstrip()
                    ) from None
        for i, provider in enumerate(self.providers):
            if not provider.prefix and not data.startswith(ENCRYPTED):
                return data, i != 0
        parts = data.split(b":", 5)  # k8s:enc:<provider>:v1:<key name>:<sealed>
        found = b":".join(parts[:5]) + b":" if data.startswith(ENCRYPTED) and len(parts) == 6 else b""
        raise EncryptionError(
            f"{key}: no matching prefix found: stored as {found.decode(errors='replace') or 'plain data'}, "
            "which no provider of the encryption configuration reads"
        )


@dataclass
class TransformingStore:
    """A Store whose values pass through the transformer `transformer_for(key)` names (None: as they are)."""

    inner: Store
    transformer_for: Callable[[str], Transformer | None]
    _stale: set[str] = field(default_factory=set)

    def stale(self, key: str) -> bool:
        return key in self._stale

    def _plain(self, key: str, value: bytes) -> bytes:
        t = self.transformer_for(key)
        if t is None or not value:
            return value
        plain, stale = t.read(key, value)
        if stale:
            self._stale.add(key)
        else:
            self._stale.discard(key)
        return plain

    def _kv(self, kv: KeyValue) -> KeyValue:
        return replace(kv, value=self._plain(kv.key, kv.value))

    def _event(self, ev: Event) -> Event:
        if ev.type == "PROGRESS" or self.transformer_for(ev.key) is None:
            return ev
        if ev.type == "DELETE":
            self._stale.discard(ev.key)
        prev = self._plain(ev.key, ev.prev_value) if ev.prev_value else ev.prev_value
        value = self._plain(ev.key, ev.value) if ev.type == "PUT" else self._decrypt_only(ev.key, ev.value)
        return replace(ev, value=value, prev_value=prev)

    def _decrypt_only(self, key: str, value: bytes) -> bytes:
        t = self.transformer_for(key)
        return t.read(key, value)[0] if t is not None and value else value

    def _cipher(self, key: str, value: bytes) -> bytes:
        t = self.transformer_for(key)
        return value if t is None else t.write(key, value)

    # --- the Store interface --------------------------------------------------------------------------

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    @property
    def revision(self) -> int:
        return self.inner.revision

    @property
    def compacted_revision(self) -> int:
        return self.inner.compacted_revision

    async def get(self, key: str) -> KeyValue | None:
        kv = await self.inner.get(key)
        return self._kv(kv) if kv is not None else None

    async def list(
        self, prefix: str, revision: int = 0, start_after: str = "", limit: int = 0
    ) -> tuple[list[KeyValue], int, bool]:
        items, rev, more = await self.inner.list(prefix, revision, start_after, limit)
        return [self._kv(kv) for kv in items], rev, more

    async def count(self, prefix: str, revision: int, start_after: str = "") -> int:
        return await self.inner.count(prefix, revision, start_after)

    async def create(self, key: str, value: bytes) -> int:
        rev = await self.inner.create(key, self._cipher(key, value))
        self._stale.discard(key)
        return rev

    async def update(self, key: str, value: bytes, expected_revision: int) -> int:
        rev = await self.inner.update(key, self._cipher(key, value), expected_revision)
        self._stale.discard(key)
        return rev

    async def delete(self, key: str, expected_revision: int) -> int:
        rev = await self.inner.delete(key, expected_revision)
        self._stale.discard(key)
        return rev

    async def watch(self, from_revision: int) -> AsyncIterator[list[Event]]:
        async for batch in self.inner.watch(from_revision):
            yield [self._event(ev) for ev in batch]

    async def compact(self, revision: int) -> None:
        await self.inner.compact(revision)

    def __getattr__(self, name: str) -> Any:
        """The backend's optional parts: history and subscribe see plain values; the rest as it is."""
        if name.startswith("_") or name in ("inner", "transformer_for"):
            raise AttributeError(name)  # not yet set (a copy being made): never the backend's
        attr = getattr(self.inner, name)
        if name == "history":
            return lambda *a, **kw: [self._event(ev) for ev in attr(*a, **kw)]
        if name == "subscribe":
            return lambda listener: attr(lambda ev: listener(self._event(ev)))
        return attr
