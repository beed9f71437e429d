"""The pod-template-hash: a ReplicaSet's name and label derived from the template it runs.

Upstream's controller.ComputeHash writes the template into an FNV-1a 32-bit hash, adds the
Deployment's collisionCount (8 bytes, little endian) when it has one, and renders the sum's decimal
digits with rand.SafeEncodeString (each digit mapped into an alphabet without vowels, so no word is
spelt by accident). Here the template is written as canonical JSON (sorted keys, no spaces): the result
is not Go's bit for bit (Go hashes its own struct dump), but the same template always gives the same
hash, across restarts and processes, which is what the name `<deployment>-<hash>` needs; a different
template that happens to hash the same is a collision, resolved by bumping status.collisionCount.
"""

from __future__ import annotations

import json
import struct
from typing import Any

ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery util/rand
_FNV_OFFSET = 2166136261
_FNV_PRIME = 16777619


def fnv32a(data: bytes, h: int = _FNV_OFFSET) -> int:
    for byte in data:
        h ^= byte
        h = (h * _FNV_PRIME) & 0xFFFFFFFF
    return h


def safe_encode(s: str) -> str:
    return "".join(ALPHANUMS[ord(ch) % len(ALPHANUMS)] for ch in s)


def compute_hash(template: dict[str, Any], collision_count: int | None) -> str:
    data = json.dumps(template, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    h = fnv32a(data)
    if collision_count is not None:
        h = fnv32a(struct.pack("<I", collision_count & 0xFFFFFFFF) + b"\0\0\0\0", h)
    return safe_encode(str(h))
