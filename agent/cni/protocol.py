"""Wire format between the thin plugin executable and the network service.

Deliberately trivial so a ~100 line C shim can speak it without a JSON library:
  request:  b"PKCNI1\\n", then "KEY=VALUE\\0" for each CNI_* variable, an empty "\\0", then stdin
            verbatim until the client shuts down its write side;
  response: b"<exit code> <stdout length>\\n", stdout bytes, then stderr bytes until EOF.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

MAGIC = b"PKCNI1\n"
DEFAULT_SOCKET = "/run/pykubelet/cni.sock"
SOCKET_ENV = "PYKUBELET_CNI_SOCKET"
MAX_REQUEST = 4 << 20


class ProtocolError(ValueError):
    pass


@dataclass
class Request:
    env: dict[str, str]
    stdin: bytes


def default_socket_path() -> str:
    return os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


def encode_request(env: Mapping[str, str], stdin: bytes) -> bytes:
    parts = [MAGIC]
    for k, v in env.items():
        if k.startswith("CNI_"):
            parts.append(f"{k}={v}".encode() + b"\0")
    parts.append(b"\0")
    parts.append(stdin)
    return b"".join(parts)


def decode_request(data: bytes) -> Request:
    if not data.startswith(MAGIC):
        raise ProtocolError("bad magic")
    pos = len(MAGIC)
    env: dict[str, str] = {}
    while True:
        end = data.find(b"\0", pos)
        if end < 0:
            raise ProtocolError("unterminated environment")
        item = data[pos:end]
        pos = end + 1
        if not item:
            break
        key, sep, value = item.decode(errors="replace").partition("=")
        if not sep:
            raise ProtocolError(f"bad environment entry {key!r}")
        env[key] = value
    return Request(env, data[pos:])


def encode_response(code: int, stdout: str, stderr: str) -> bytes:
    out = stdout.encode()
    return f"{code} {len(out)}\n".encode() + out + stderr.encode()


def decode_response(data: bytes) -> tuple[int, bytes, bytes]:
    head, sep, rest = data.partition(b"\n")
    if not sep:
        raise ProtocolError("truncated response")
    try:
        code_s, len_s = head.split(b" ")
        code, n = int(code_s), int(len_s)
    except ValueError as exc:
        raise ProtocolError(f"bad response header {head!r}") from exc
    return code, rest[:n], rest[n:]
