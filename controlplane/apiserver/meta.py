"""Small helpers on object metadata shared by the registry, tables and handlers."""

from __future__ import annotations

import datetime as dt
import os
import secrets
import time
from typing import Any

Obj = dict[str, Any]

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# upstream's SimpleNameGenerator: a generated name is at most 63 characters, the base cut to leave room
# for the 5 random ones.
_RANDOM_LENGTH = 5
MAX_GENERATED_NAME_LENGTH = 63 - _RANDOM_LENGTH


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_STAMP: list[Any] = [-1, ""]  # the second the current-time stamp was made for, and the stamp


def timestamp(when: dt.datetime | None = None) -> str:
    """An RFC 3339 time to the second (metav1.Time); without `when`, now (formatted once per second:
    every write stamps a time or two, and strftime is no cheap call)."""
    if when is not None:
        return when.strftime(_FORMAT)
    second = int(time.time())
    if second != _STAMP[0]:
        _STAMP[1] = dt.datetime.fromtimestamp(second, dt.UTC).strftime(_FORMAT)
        _STAMP[0] = second
    return _STAMP[1]


def new_uid() -> str:
    """A random (version 4, RFC 4122 variant) UUID's text, as str(uuid.uuid4()) makes it, without the
    UUID object: objects' metadata.uid and requests' audit IDs."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def random_suffix(length: int = _RANDOM_LENGTH) -> str:
    """Same alphabet as upstream's generateName (no vowels, no look-alike digits)."""
    return "".join(secrets.choice(_NAME_ALPHABET) for _ in range(length))


def generate_name(base: str) -> str:
    """A name from metadata.generateName: the base cut to 58 characters, then 5 random ones."""
    return base[:MAX_GENERATED_NAME_LENGTH] + random_suffix()


def metadata(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


def human_duration(delta: dt.timedelta) -> str:
    """kubectl's AGE column format (k8s.io/apimachinery/pkg/util/duration.HumanDuration)."""
    seconds = int(delta.total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 60 * 2:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m{s}s" if s else f"{minutes}m"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        m = minutes % 60
        return f"{hours}h{m}m" if m else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d{h}h" if h else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        d = (hours // 24) % 365
        return f"{hours // 24 // 365}y{d}d" if d else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(obj: Obj) -> str:
    created = parse_time(metadata(obj).get("creationTimestamp"))
    if created is None:
        return "<unknown>"
    return human_duration(now() - created)
