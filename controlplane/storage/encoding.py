"""How objects are encoded for the store and the watch cache, and an object's two forms from one encoding.

The store keeps an object without metadata.resourceVersion (the revision is the write's own); the watch
cache keeps the bytes every list and watch sends, with it. Decoding what was just encoded to add one field
and encoding it again cost about as much as the rest of a pod's write: `unversioned(obj)` encodes the
object once, piece by piece, noting where its metadata ends, so the versioned bytes are a splice that
equals, byte for byte, what decoding the stored value, setting the revision and encoding would give.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


# json.dumps with these arguments builds this very encoder on every call (several times per write).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
# What that encoder writes a string key with (its `ensure_ascii=False` escaping).
_encode_key = json.encoder.encode_basestring


def encode(obj: Any) -> bytes:
    """Compact JSON, as every response and stored value is written
    (`json.dumps(obj, separators=(",", ":"), ensure_ascii=False)`)."""
    return _ENCODER.encode(obj).encode()


@dataclass(frozen=True, slots=True)
class Unversioned:
    """An object as the store receives it (`value`), with what makes its versioned form cheap."""

    obj: Obj  # the object written (its own metadata.resourceVersion, if any, is left out of `value`)
    value: bytes
    meta_end: int  # offset of the metadata object's closing brace in `value`; -1: no metadata object

    def versioned(self, revision: int) -> bytes | None:
        """`value` with metadata.resourceVersion set to `revision` as the last field of metadata (where
        setting it on the decoded value puts it), or None when the object has no metadata to put it in."""
        end = self.meta_end
        if end < 0:
            return None
        field = b'"resourceVersion":"%d"' % revision
        if self.value[end - 1 : end] != b"{":
            field = b"," + field
        return b"".join((self.value[:end], field, self.value[end:]))

    def versioned_obj(self, revision: int) -> Obj:
        """A shallow copy of the object with its new resourceVersion (what a viewer is shown)."""
        out = dict(self.obj)
        out["metadata"] = {**self.obj["metadata"], "resourceVersion": str(revision)}
        return out


def unversioned(obj: Obj) -> Unversioned:
    """`obj` encoded without metadata.resourceVersion (the object itself is left as it was)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return Unversioned(obj, encode(obj), -1)
    if "resourceVersion" in meta:
        meta = {k: v for k, v in meta.items() if k != "resourceVersion"}
    pieces: list[bytes] = []
    offset = 1  # after "{"
    meta_end = -1
    for key, value in obj.items():
        name = _encode_key(key).encode() if type(key) is str else encode(key)
        piece = name + b":" + encode(meta if key == "metadata" else value)
        if key == "metadata":
            meta_end = offset + len(piece) - 1
        pieces.append(piece)
        offset += len(piece) + 1  # the comma after it
    return Unversioned(obj, b"{" + b",".join(pieces) + b"}", meta_end)
