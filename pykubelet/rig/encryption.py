"""Encryption at rest for the stack (`pykubelet up`, the rig's Stack): Secrets are stored encrypted, as
k3s's secrets-encryption does. The key is made once into the stack's state directory (mode 0600, with
its EncryptionConfiguration) and kept across restarts: a new key each start would leave the stored
Secrets unreadable. Rotating it is upstream's procedure: edit the file (new key first), restart, replace
every Secret, drop the old key."""

from __future__ import annotations

import base64
import os
from pathlib import Path

CONFIG_FILE = "encryption-config.yaml"
KEY_NAME = "key1"


def _config(secret: str) -> str:
    return (
        "apiVersion: apiserver.config.k8s.io/v1\n"
        "kind: EncryptionConfiguration\n"
        "# Written by pykubelet up: Secrets encrypted at rest. Keep this file; it holds the key.\n"
        "resources:\n"
        "- resources: [secrets]\n"
        "  providers:\n"
        "  - aescbc:\n"
        "      keys:\n"
        f"      - {{name: {KEY_NAME}, secret: {secret}}}\n"
        "  - identity: {}\n"
    )


def encryption_config(state_dir: Path) -> Path:
    """The stack's EncryptionConfiguration, made with a fresh 32-byte key the first time only."""
    path = state_dir / CONFIG_FILE
    if not path.exists():
        state_dir.mkdir(parents=True, exist_ok=True)
        secret = base64.b64encode(os.urandom(32)).decode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(_config(secret))
    return path


def encryption_args(state_dir: Path) -> list[str]:
    return ["--encryption-provider-config", str(encryption_config(state_dir))]
