"""The protobuf wire format, and only that: varints, field keys and length-delimited records.

Kubernetes writes proto2 messages with gogo's generated marshallers: fields in ascending number order,
every non-pointer field written even when zero, negative int32 values as 10-byte varints (as int64),
maps as repeated {1: key, 2: value} entries sorted by key. Reading is strict about truncation and
lengths (a length that points past the end is an error, never a short read).
"""

from __future__ import annotations

VARINT = 0
FIXED64 = 1
BYTES = 2
FIXED32 = 5


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise WireError("unexpected EOF")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("integer overflow")


def fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(number, wire type, value) of each field in order; varints as unsigned, fixed as raw bytes."""
    out: list[tuple[int, int, int | bytes]] = []
    append = out.append
    pos = 0
    end = len(data)
    while pos < end:
        key = data[pos]  # one-byte varints (field numbers below 16, short lengths) skip the loop
        if key < 0x80:
            pos += 1
        else:
            key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if number <= 0:
            raise WireError(f"illegal tag {number} (wire type {wire})")
        if wire == BYTES:
            if pos < end and data[pos] < 0x80:
                length = data[pos]
                pos += 1
            else:
                length, pos = read_varint(data, pos)
            if length > end - pos:
                raise WireError("unexpected EOF")
            append((number, wire, data[pos : pos + length]))
            pos += length
        elif wire == VARINT:
            if pos < end and data[pos] < 0x80:
                append((number, wire, data[pos]))
                pos += 1
            else:
                value, pos = read_varint(data, pos)
                append((number, wire, value))
        elif wire == FIXED64:
            if pos + 8 > end:
                raise WireError("unexpected EOF")
            out.append((number, wire, data[pos : pos + 8]))
            pos += 8
        elif wire == FIXED32:
            if pos + 4 > end:
                raise WireError("unexpected EOF")
            out.append((number, wire, data[pos : pos + 4]))
            pos += 4
        else:
            raise WireError(f"illegal wireType {wire} for field {number}")
    return out


def signed(value: int) -> int:
    """A varint as Go's int64 (and int32, which the wire sign-extends to 64 bits)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [_varint(v) for v in range(1 << 14)]  # lengths and numbers below 16 384: a lookup


def varint(value: int) -> bytes:
    if 0 <= value < 16384:
        return _SMALL[value]
    if value < 0:
        value += 1 << 64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def key(number: int, wire: int) -> bytes:
    return varint((number << 3) | wire)


def record(number: int, payload: bytes) -> bytes:
    """A length-delimited field: key, length, payload."""
    return key(number, BYTES) + varint(len(payload)) + payload
