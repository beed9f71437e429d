"""Encryption at rest without a server: each provider's format and upstream's prefixes, the transformer's
choice of key (write with the first, read by prefix, stale when not the first), the store wrapper over a
real SQLite store, and the EncryptionConfiguration's checks naming the field."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from controlplane.apiserver.encryptionconfig import EncryptionConfigError, load, parse
from controlplane.storage.encryption import (
    AesCbc,
    AesGcm,
    EncryptionError,
    Identity,
    SecretBox,
    Transformer,
    TransformingStore,
)
from controlplane.storage.sqlite import SQLiteStore

KEY = "/secrets/default/s"
PLAIN = b'{"kind":"Secret","data":{"password":"c2VjcmV0"}}'


def b64(n: int) -> str:
    return base64.b64encode(os.urandom(n)).decode()


@pytest.mark.parametrize(
    ("provider", "prefix", "overhead"),
    [
        (AesGcm("k1", os.urandom(32)), b"k8s:enc:aesgcm:v1:k1:", 12 + 16),
        (AesCbc("k1", os.urandom(16)), b"k8s:enc:aescbc:v1:k1:", None),
        (SecretBox("k1", os.urandom(32)), b"k8s:enc:secretbox:v1:k1:", 24 + 16),
    ],
)
def test_each_provider_writes_upstreams_prefix_and_reads_its_own(provider, prefix, overhead) -> None:  # type: ignore[no-untyped-def]
    sealed = provider.encrypt(PLAIN, KEY.encode())
    assert sealed.startswith(prefix)
    assert b"c2VjcmV0" not in sealed
    if overhead is not None:
        assert len(sealed) == len(prefix) + len(PLAIN) + overhead
    assert provider.decrypt(sealed, KEY.encode()) == PLAIN
    assert provider.encrypt(PLAIN, KEY.encode()) != sealed  # a fresh nonce / IV each time


def test_aesgcm_binds_the_value_to_its_key() -> None:
    t = Transformer([AesGcm("k1", os.urandom(32))])
    sealed = t.write(KEY, PLAIN)
    with pytest.raises(EncryptionError, match="cannot decrypt"):
        t.read("/secrets/default/other", sealed)


def test_rotation_reads_old_keys_as_stale_and_writes_the_first() -> None:
    old, new = AesGcm("old", os.urandom(32)), AesGcm("new", os.urandom(32))
    before = Transformer([old, Identity()])
    sealed_old = before.write(KEY, PLAIN)
    after = Transformer([new, old, Identity()])
    assert after.read(KEY, sealed_old) == (PLAIN, True)
    assert after.read(KEY, PLAIN) == (PLAIN, True)  # plain data from before encryption was turned on
    assert after.write(KEY, PLAIN).startswith(b"k8s:enc:aesgcm:v1:new:")
    assert after.read(KEY, after.write(KEY, PLAIN)) == (PLAIN, False)
    with pytest.raises(EncryptionError, match="no matching prefix found: stored as k8s:enc:aesgcm:v1:old:"):
        Transformer([new]).read(KEY, sealed_old)
    with pytest.raises(EncryptionError, match="identity transformer tried to read encrypted data"):
        Identity().decrypt(sealed_old, KEY.encode())
    with pytest.raises(EncryptionError, match="no matching prefix found"):
        Transformer([Identity()]).read(KEY, sealed_old)


async def test_the_store_wrapper_encrypts_only_what_it_is_told(tmp_path: Path) -> None:
    inner = SQLiteStore(tmp_path / "state.db")
    t = Transformer([AesGcm("k1", os.urandom(32)), Identity()])
    store = TransformingStore(inner, lambda key: t if key.startswith("/secrets/") else None)
    await store.start()
    seen = []
    store.subscribe(seen.append)
    try:
        rev = await store.create(KEY, PLAIN)
        await store.create("/configmaps/default/c", PLAIN)
        raw = await inner.get(KEY)
        assert raw is not None and raw.value.startswith(b"k8s:enc:aesgcm:v1:k1:")
        assert (await inner.get("/configmaps/default/c")).value == PLAIN  # type: ignore[union-attr]
        assert (await store.get(KEY)).value == PLAIN  # type: ignore[union-attr]
        items, _, _ = await store.list("/")
        assert {kv.key: kv.value for kv in items} == {KEY: PLAIN, "/configmaps/default/c": PLAIN}
        assert [ev.value for ev in seen] == [PLAIN, PLAIN]
        assert not store.stale(KEY)
        # written under another key: stale until rewritten
        other = Transformer([AesGcm("k0", os.urandom(32))])
        t.providers.insert(1, other.providers[0])
        await inner.update(KEY, other.write(KEY, PLAIN), rev)
        assert (await store.get(KEY)).value == PLAIN  # type: ignore[union-attr]
        assert store.stale(KEY)
        kv = await store.get(KEY)
        await store.update(KEY, PLAIN, kv.mod_revision)  # type: ignore[union-attr]
        assert not store.stale(KEY)
        assert (await inner.get(KEY)).value.startswith(b"k8s:enc:aesgcm:v1:k1:")  # type: ignore[union-attr]
    finally:
        await store.close()


CONFIG = """apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets, "*.apps"]
  providers:
  - aescbc:
      keys:
      - {name: key1, secret: %s}
  - identity: {}
- resources: ["*.*"]
  providers:
  - identity: {}
"""


def test_configuration_names_resources_as_upstream(tmp_path: Path) -> None:
    path = tmp_path / "enc.yaml"
    path.write_text(CONFIG % b64(32))
    config = load(path)
    lookup = config.transformer_for_key()
    secrets = lookup("/secrets/default/s")
    assert secrets is not None and secrets.providers[0].prefix == b"k8s:enc:aescbc:v1:key1:"
    assert lookup("/deployments.apps/default/d") is secrets
    wildcard = lookup("/configmaps/default/c")
    assert wildcard is not None and isinstance(wildcard.providers[0], Identity)


def test_a_bad_configuration_names_the_field_and_never_the_secret() -> None:
    short = base64.b64encode(b"12345").decode()
    doc = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": [
            {
                "resources": ["secrets"],
                "providers": [
                    {
                        "aesgcm": {
                            "keys": [{"name": "a", "secret": short}, {"name": "b:c", "secret": "!!notbase64"}]
                        }
                    },
                    {"secretbox": {"keys": []}},
                    {"aescbc": {"keys": [{"secret": b64(16)}]}, "identity": {}},
                ],
            },
            {"resources": [], "providers": []},
        ],
    }
    with pytest.raises(EncryptionConfigError) as err:
        parse(doc)
    text = str(err.value)
    assert (
        'resources[0].providers[0].aesgcm.keys[0].secret: Invalid value: "REDACTED": secret is not of the '
        "expected length, got 5, expected one of [16 24 32]"
    ) in text
    assert (
        'resources[0].providers[0].aesgcm.keys[1].name: Invalid value: "b:c": key name must not contain ":"'
        in text
    )
    assert (
        'resources[0].providers[0].aesgcm.keys[1].secret: Invalid value: "REDACTED": secrets must be base64 encoded'
        in text
    )
    assert (
        "resources[0].providers[1].secretbox.keys: Required value: at least one key has to be specified"
        in text
    )
    assert "resources[0].providers[2]: Invalid value: " in text and "more than one provider specified" in text
    assert "resources[1].resources: Required value" in text
    assert "resources[1].providers: Required value: at least one provider has to be specified" in text
    assert short not in text


def test_the_server_refuses_to_start_on_a_bad_file(tmp_path: Path) -> None:
    from controlplane.cli import _encryption

    path = tmp_path / "enc.yaml"
    path.write_text(CONFIG % "c2hvcnQ=")
    with pytest.raises(SystemExit) as err:
        _encryption(path)
    assert str(err.value).startswith(f"pykubelet server: --encryption-provider-config: {path}: resources[0]")
    assert "got 5, expected one of [16 24 32]" in str(err.value)


def test_the_stack_makes_its_key_once_private(tmp_path: Path) -> None:
    from pykubelet.rig.encryption import encryption_args, encryption_config

    args = encryption_args(tmp_path / "state")
    path = Path(args[1])
    assert args[0] == "--encryption-provider-config"
    assert path.stat().st_mode & 0o777 == 0o600
    first = path.read_text()
    assert encryption_config(tmp_path / "state").read_text() == first  # kept across restarts
    lookup = load(path).transformer_for_key()
    secrets = lookup("/secrets/kube-system/x")
    assert secrets is not None and secrets.providers[0].prefix == b"k8s:enc:aescbc:v1:key1:"
    assert lookup("/configmaps/kube-system/x") is None
