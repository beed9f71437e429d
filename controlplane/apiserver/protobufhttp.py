"""Protobuf on the wire for the API server: which answer form the client's Accept picks, the
middleware that writes a built-in kind's answer (object, list, Status error) as protobuf when it does,
the length-delimited frames of a protobuf watch, and request bodies sent as protobuf.

Upstream's rules: `application/vnd.kubernetes.protobuf` is served for built-in kinds, their lists,
PartialObjectMetadata(List) and Status; Table, discovery and custom resources are JSON only, so a
client that lists JSON after protobuf (as client-go does) gets JSON for those. A watch in protobuf is
a stream of frames, each a 4-byte big-endian length and a WatchEvent message written without the
envelope, whose object is the event's object with its own `k8s\\0` envelope.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.protobuf import codec, wire

PROTOBUF = "application/vnd.kubernetes.protobuf"
# The key under which a JSON answer keeps the object it was made from (responses.json_response).
OBJECT = "pykubelet.object"
WATCH_CONTENT_TYPE = PROTOBUF + ";stream=watch"
_JSON_TYPES = ("application/json", "application/yaml", "*/*", "application/*")


def prefers_protobuf(accept: str) -> bool:
    """True when the first media type of Accept that the server can answer is protobuf.

    A protobuf entry asking for a Table is skipped (Tables are JSON only upstream)."""
    for entry in accept.split(","):
        parts = [p.strip() for p in entry.split(";")]
        media = parts[0].lower()
        params = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        if media == PROTOBUF:
            if params.get("as") == "Table":
                continue
            return True
        if media in _JSON_TYPES or media.startswith("application/json"):
            return False
    return False


class EncodedCache:
    """Protobuf forms of the JSON bodies the server sends again and again (the watch cache's encoded
    objects, the same bytes object for every list and GET until the object changes), so a list of
    10 000 pods in protobuf costs a lookup per pod instead of a decode and an encode. Bounded by bytes:
    when full it starts over (the next list fills it again)."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self.forms: dict[tuple[str, bytes], bytes] = {}

    def list_item(self, raw: bytes, message: str) -> bytes:
        """The object as a list's `items` field (number 2, framed), ready to join."""
        key = ("items:" + message, raw)
        got = self.forms.get(key)
        if got is None:
            got = self._keep(key, wire.record(2, codec.encode_message(json.loads(raw), message)))
        return got

    def envelope(self, raw: bytes) -> bytes:
        """`k8s\\0` and the envelope around a JSON object (its apiVersion and kind pick the message)."""
        got = self.forms.get(("", raw))
        if got is None:
            got = self._keep(("", raw), codec.encode_object(json.loads(raw)))
        return got

    def _keep(self, key: tuple[str, bytes], form: bytes) -> bytes:
        if self.size + len(key[1]) + len(form) > self.max_bytes:
            self.forms.clear()
            self.size = 0
        self.forms[key] = form
        self.size += len(key[1]) + len(form)
        return form


ENCODED = EncodedCache()


def wants_protobuf(request: web.Request, api_version: str, kind: str) -> bool:
    """Whether to answer this request about `kind` in protobuf (it prefers it and the kind has it)."""
    return (
        prefers_protobuf(request.headers.get("Accept", ""))
        and codec.message_for(api_version, kind) is not None
    )


def list_response(
    api_version: str, kind: str, list_kind: str, list_meta: dict[str, Any], raws: list[bytes]
) -> web.Response:
    """A list in protobuf from its items' JSON (the cache's bytes): ListMeta, then each item."""
    item = codec.message_for(api_version, kind) or ""
    list_item = ENCODED.list_item
    parts = [wire.record(1, codec.encode_message(list_meta, "ListMeta"))]
    parts += [list_item(raw, item) for raw in raws]
    body = codec.encode_envelope(api_version, list_kind, b"".join(parts))
    out = web.Response(body=body)
    out.content_type = PROTOBUF
    return out


def _resource_path(path: str) -> bool:
    return path.startswith("/api/") or path.startswith("/apis/")


@web.middleware
async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """A built-in kind's JSON answer (object, list, Status) as protobuf when the client prefers it."""
    response = await handler(request)
    if (
        type(response) is not web.Response
        or response.content_type != "application/json"
        or not _resource_path(request.path)
        or not prefers_protobuf(request.headers.get("Accept", ""))
        or not isinstance(response.body, bytes | bytearray)
    ):
        return response
    obj = response.get(OBJECT)
    try:
        body = codec.encode_object(obj) if obj is not None else _encode_body(bytes(response.body))
    except (
        ValueError,
        TypeError,
        codec.CodecError,
    ):  # not a built-in kind (a custom resource): JSON, as upstream
        return response
    out = web.Response(body=body, status=response.status, headers=response.headers)
    out.content_type = PROTOBUF
    return out


def _encode_body(raw: bytes) -> bytes:
    """The enveloped protobuf of a JSON answer; a cached object's bytes are encoded once."""
    return ENCODED.envelope(raw)


def watch_frame(event: dict[str, Any]) -> bytes:
    """One protobuf watch frame: length, then WatchEvent{type, object: RawExtension{envelope}}."""
    obj = event.get("object") or {}
    raw = codec.encode_object(obj)
    message = wire.record(1, str(event.get("type", "")).encode()) + wire.record(2, wire.record(1, raw))
    return struct.pack(">I", len(message)) + message


class ProtobufWatchWriter:
    """Stands for the watch's StreamResponse and turns each JSON event line into a protobuf frame."""

    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response

    async def write(self, data: bytes) -> None:
        frames = [_frame_of_line(line) for line in data.splitlines() if line.strip()]
        await self.response.write(b"".join(frames))

    async def write_eof(self) -> None:
        await self.response.write_eof()


_EVENT_HEAD = b'{"type":"'
_EVENT_OBJECT = b'","object":'


def _frame_of_line(line: bytes) -> bytes:
    """The frame of one JSON event line. The watch writes `{"type":"T","object":RAW}` with the cache's
    bytes as RAW, so the object's protobuf comes from the encoded cache (one encode per object version
    however many watchers get it); any other shape is parsed."""
    cut = line.find(_EVENT_OBJECT)
    if line.startswith(_EVENT_HEAD) and cut > 0 and line.endswith(b"}"):
        kind = line[len(_EVENT_HEAD) : cut]
        raw = ENCODED.envelope(line[cut + len(_EVENT_OBJECT) : -1])
        message = wire.record(1, kind) + wire.record(2, wire.record(1, raw))
        return struct.pack(">I", len(message)) + message
    return watch_frame(json.loads(line))


def decode_body(body: bytes) -> dict[str, Any]:
    """A protobuf request body as its JSON object (apiVersion and kind from the envelope).

    Errors are upstream's decode errors as 400s: a missing `k8s\\0` prefix, a malformed envelope or
    message (`Pod in version "v1" cannot be handled as a Pod: unexpected EOF`), a kind the server
    has no protobuf form for (custom resources: 415, as upstream)."""
    try:
        api_version, kind, raw = codec.split_envelope(body)
    except (codec.CodecError, wire.WireError) as err:
        raise errors.bad_request(f"the object provided is unrecognized ({err}: {_summary(body)})") from None
    if not kind:
        raise errors.bad_request(f"Object 'Kind' is missing in '{_summary(body)}'")
    message = codec.message_for(api_version, kind)
    if message is None:
        raise errors.ApiError(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json, application/yaml",
        )
    version = api_version.rpartition("/")[2]
    try:
        obj = codec.decode_message(raw, message)
    except (codec.CodecError, wire.WireError, RecursionError) as err:
        raise errors.bad_request(
            f'{kind} in version "{version}" cannot be handled as a {kind}: {err}'
        ) from None
    return {"kind": kind, "apiVersion": api_version, **obj}


def _summary(body: bytes) -> str:
    """upstream's summarizeData: the first 30 bytes, as text for JSON, else as hex."""
    if not body:
        return "<empty>"
    if body[:1] == b"{":
        return body[:30].decode(errors="replace") + (" ..." if len(body) > 30 else "")
    return body[:30].hex() + (" ..." if len(body) > 30 else "")
