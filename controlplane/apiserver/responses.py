"""What every REST verb's answer is made of: JSON bodies (reusing the cache's encoded bytes where the
object needs no change), large ones sent in slices, the Table and metadata-only forms clients ask for,
resourceVersion parameters."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.protobufhttp import OBJECT
from controlplane.storage.cache import CachedObject, TooLargeResourceVersionError, encode

Obj = dict[str, Any]
_TABLE = "as=Table"


def json_response(obj: Obj, status: int = 200) -> web.Response:
    response = web.Response(body=encode(obj) + b"\n", status=status, content_type="application/json")
    response[OBJECT] = obj  # for the protobuf negotiation: encoded without parsing the JSON back
    return response


def raw_object_response(obj: Obj, body: bytes, status: int = 200) -> web.Response:
    """`obj` answered with `body`, its encoding already made (the watch cache's)."""
    response = raw_json_response(body, status)
    response[OBJECT] = obj
    return response


def raw_json_response(body: bytes, status: int = 200) -> web.Response:
    """An encoded object as upstream's JSON serializer writes it: Go's json.Encoder ends it with a newline."""
    return web.Response(body=body + b"\n", status=status, content_type="application/json")


# Bodies above this many bytes go out in slices of it.
SLICE = 256 * 1024


class SlicedResponse(web.Response):
    """A large body (a list of thousands of pods is megabytes) written in slices, the event loop serving
    other requests between them, instead of being encrypted and handed to the transport in one
    stretch that every other request waits behind (upstream streams a list's encoding too). The bytes
    and headers (Content-Length included) are those of a `web.Response` of the same body, which the
    middlewares (audit, metrics) read as before."""

    async def write_eof(self, data: bytes = b"") -> None:
        body = self.body
        writer = self._payload_writer
        if (
            data
            or self._eof_sent
            or writer is None
            or self._compressed_body is not None
            or self._must_be_empty_body
            or not isinstance(body, bytes)
            or len(body) <= SLICE
        ):
            await super().write_eof(data)
            return
        view = memoryview(body)
        last = (len(body) - 1) // SLICE * SLICE
        for start in range(0, last, SLICE):
            await writer.write(view[start : start + SLICE])
            await asyncio.sleep(0)  # the transport may take the slice without pausing: yield anyway
        await web.StreamResponse.write_eof(self, view[last:].tobytes())


def list_json_response(head: bytes, raws: list[bytes]) -> web.Response:
    """A list of encoded items under the list's encoded head (its kind, apiVersion and metadata), as
    upstream writes it, joined in one pass and sent in slices when large."""
    body = b"".join([head[:-1], b',"items":[', b",".join(raws), b"]}\n"])
    return SlicedResponse(body=body, content_type="application/json")


def out_raw(res: Kind, cached: CachedObject) -> bytes:
    return encode(res.from_storage(cached.obj)) if res.converts else cached.raw


def too_large(err: TooLargeResourceVersionError) -> ApiError:
    return ApiError(
        504,
        "Timeout",
        f"Too large resource version: {err.requested}, current: {err.current}",
        {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
    )


def revision(rv: str) -> int:
    try:
        revision = int(rv)
    except ValueError:
        raise errors.bad_request(f"invalid resourceVersion {rv!r}") from None
    if revision < 0:
        raise errors.bad_request(f"invalid resourceVersion {rv!r}")
    return revision


def wants_table(request: web.Request) -> bool:
    return _TABLE in request.headers.get("Accept", "")


def wants_metadata(request: web.Request) -> bool:
    """Metadata-only clients (client-go's metadata informers) ask for PartialObjectMetadata(List)."""
    return "as=PartialObjectMetadata" in request.headers.get("Accept", "")


def partial(obj: Obj) -> Obj:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }
