"""--encryption-provider-config: upstream's EncryptionConfiguration (apiserver.config.k8s.io/v1), which
resources are encrypted at rest and with which providers (identity, aescbc, aesgcm, secretbox; each key
base64, 16/24/32 bytes for AES, 32 for secretbox). A resource is named as upstream names it
(`secrets`, `deployments.apps`, `*.apps`, `*.` for the core group, `*.*` for all); the first entry that
names a resource is its. A bad file stops the start with the field named, as upstream's validation
words it; secrets never appear in the messages (upstream's "REDACTED")."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from controlplane.apiserver import errors
from controlplane.storage.encryption import AesCbc, AesGcm, Identity, Provider, SecretBox, Transformer

KIND = "EncryptionConfiguration"
API_VERSIONS = ("apiserver.config.k8s.io/v1",)
_KEY_LENGTHS: dict[str, tuple[int, ...]] = {
    "aescbc": (16, 24, 32),
    "aesgcm": (16, 24, 32),
    "secretbox": (32,),
}
_MAKERS: dict[str, Callable[[str, bytes], Provider]] = {
    "aescbc": AesCbc,
    "aesgcm": AesGcm,
    "secretbox": SecretBox,
}
KNOWN = ("aescbc", "aesgcm", "secretbox", "identity", "kms")
REDACTED = "REDACTED"


class EncryptionConfigError(ValueError):
    """The file cannot be used; the message names the field."""


@dataclass
class EncryptionConfig:
    """Which transformer each resource (plural, group) uses; resources not named are stored as they are."""

    rules: list[tuple[tuple[str, ...], Transformer]]

    def transformer_for_resource(self, resource: str, group: str) -> Transformer | None:
        for names, transformer in self.rules:
            for name in names:
                plural, _, grp = name.partition(".")
                if name == "*.*" or (plural == "*" and grp == group) or (plural == resource and grp == group):
                    return transformer
        return None

    def transformer_for_key(self) -> Callable[[str], Transformer | None]:
        """The store's lookup: a key's first segment is its bucket (`secrets`, `deployments.apps`)."""
        cache: dict[str, Transformer | None] = {}

        def lookup(key: str) -> Transformer | None:
            bucket = key.split("/", 2)[1] if key.startswith("/") else ""
            if bucket not in cache:
                resource, _, group = bucket.partition(".")
                cache[bucket] = self.transformer_for_resource(resource, group) if bucket else None
            return cache[bucket]

        return lookup


def _providers(path: str, items: Any, errs: list[errors.FieldError]) -> list[Provider]:
    if not isinstance(items, list) or not items:
        errs.append(errors.required(path, "at least one provider has to be specified"))
        return []
    out: list[Provider] = []
    for i, item in enumerate(items):
        here = f"{path}[{i}]"
        named = [k for k in (item or {}) if k in KNOWN] if isinstance(item, dict) else []
        if len(named) != 1:
            detail = (
                "more than one provider specified in a single element, should split into different list elements"
                if len(named) > 1
                else "provider does not contain any of the expected providers: KMS, secretbox, aesgcm, aescbc, identity"
            )
            shown = named or (sorted(item) if isinstance(item, dict) else item)  # names, never secrets
            errs.append(errors.invalid(here, shown, detail))
            continue
        kind = named[0]
        if kind == "identity":
            out.append(Identity())
            continue
        if kind == "kms":
            errs.append(errors.forbidden(f"{here}.kms", "KMS providers are not supported by pykubelet"))
            continue
        keys = (item[kind] or {}).get("keys") if isinstance(item[kind], dict) else None
        if not isinstance(keys, list) or not keys:
            errs.append(errors.required(f"{here}.{kind}.keys", "at least one key has to be specified"))
            continue
        seen: set[str] = set()
        for j, key in enumerate(keys):
            kp = f"{here}.{kind}.keys[{j}]"
            key = key if isinstance(key, dict) else {}
            name, secret = str(key.get("name") or ""), str(key.get("secret") or "")
            if not name:
                errs.append(errors.required(f"{kp}.name", "key name is required"))
            elif ":" in name:
                errs.append(errors.invalid(f"{kp}.name", name, 'key name must not contain ":"'))
            elif name in seen:
                errs.append(errors.duplicate(f"{kp}.name", name))
            seen.add(name)
            if not secret:
                errs.append(errors.required(f"{kp}.secret", "secret is required"))
                continue
            try:
                raw = base64.b64decode(secret, validate=True)
            except (binascii.Error, ValueError):
                errs.append(errors.invalid(f"{kp}.secret", REDACTED, "secrets must be base64 encoded"))
                continue
            if len(raw) not in _KEY_LENGTHS[kind]:
                want = " ".join(str(n) for n in _KEY_LENGTHS[kind])
                errs.append(
                    errors.invalid(
                        f"{kp}.secret",
                        REDACTED,
                        f"secret is not of the expected length, got {len(raw)}, expected one of [{want}]",
                    )
                )
                continue
            if name and ":" not in name:
                out.append(_MAKERS[kind](name, raw))
    return out


def parse(doc: Any) -> EncryptionConfig:
    if not isinstance(doc, dict) or doc.get("kind") != KIND or doc.get("apiVersion") not in API_VERSIONS:
        got = (doc.get("apiVersion"), doc.get("kind")) if isinstance(doc, dict) else (None, None)
        raise EncryptionConfigError(
            f'no kind "{got[1]}" is registered for version "{got[0]}" (want {KIND} in {", ".join(API_VERSIONS)})'
        )
    errs: list[errors.FieldError] = []
    rules: list[tuple[tuple[str, ...], Transformer]] = []
    entries = doc.get("resources")
    if not isinstance(entries, list) or not entries:
        errs.append(errors.required("resources", "resources is required"))
        entries = []
    for i, entry in enumerate(entries):
        entry = entry if isinstance(entry, dict) else {}
        names = entry.get("resources")
        if not isinstance(names, list) or not names:
            errs.append(errors.required(f"resources[{i}].resources", "resources is required"))
            names = []
        for j, name in enumerate(names):
            if not isinstance(name, str) or not name or name.lower() != name:
                errs.append(
                    errors.invalid(f"resources[{i}].resources[{j}]", name, "resource name must be lowercase")
                )
        providers = _providers(f"resources[{i}].providers", entry.get("providers"), errs)
        if providers:
            rules.append((tuple(str(n) for n in names), Transformer(providers)))
    if errs:
        raise EncryptionConfigError("; ".join(f"{e.field}: {e.detail}" for e in errs))
    return EncryptionConfig(rules)


def load(path: Path) -> EncryptionConfig:
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as err:
        raise EncryptionConfigError(f"{path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise EncryptionConfigError(f"{path}: {err}") from None
    try:
        return parse(doc)
    except EncryptionConfigError as err:
        raise EncryptionConfigError(f"{path}: {err}") from None
