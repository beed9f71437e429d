"""Thin nftables access through libnftables (the library behind the `nft` command).

Calling the library in-process avoids a fork+exec per rule change; when the library is missing we fall
back to the `nft` binary so the plugin still works, only slower.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import subprocess
import threading
from typing import Any

from agent.cni import errors
from agent.cni.errors import CniError

_NFT_CTX_OUTPUT_HANDLE = 1 << 3
_NFT_CTX_OUTPUT_JSON = 1 << 4


class Nft:
    """Runs nft command text; one context guarded by a lock (libnftables is not thread safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lib: Any = None
        self._ctx: Any = None
        name = ctypes.util.find_library("nftables") or "libnftables.so.1"
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            return
        lib.nft_ctx_new.restype = ctypes.c_void_p
        lib.nft_ctx_new.argtypes = [ctypes.c_uint32]
        lib.nft_ctx_output_set_flags.argtypes = [ctypes.c_void_p, ctypes.c_uint]
        lib.nft_ctx_buffer_output.argtypes = [ctypes.c_void_p]
        lib.nft_ctx_buffer_error.argtypes = [ctypes.c_void_p]
        lib.nft_ctx_get_output_buffer.argtypes = [ctypes.c_void_p]
        lib.nft_ctx_get_output_buffer.restype = ctypes.c_char_p
        lib.nft_ctx_get_error_buffer.argtypes = [ctypes.c_void_p]
        lib.nft_ctx_get_error_buffer.restype = ctypes.c_char_p
        lib.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.nft_run_cmd_from_buffer.restype = ctypes.c_int
        ctx = lib.nft_ctx_new(0)
        if not ctx:
            return
        lib.nft_ctx_output_set_flags(ctx, _NFT_CTX_OUTPUT_HANDLE | _NFT_CTX_OUTPUT_JSON)
        lib.nft_ctx_buffer_output(ctx)
        lib.nft_ctx_buffer_error(ctx)
        self._lib, self._ctx = lib, ctx

    def run(self, commands: str, check: bool = True) -> tuple[bool, str, str]:
        """Run nft commands; returns (ok, stdout, stderr) and raises when check and not ok."""
        if self._lib is not None:
            with self._lock:
                rc = self._lib.nft_run_cmd_from_buffer(self._ctx, commands.encode())
                out = (self._lib.nft_ctx_get_output_buffer(self._ctx) or b"").decode()
                err = (self._lib.nft_ctx_get_error_buffer(self._ctx) or b"").decode()
            ok = rc == 0
        else:
            try:
                proc = subprocess.run(
                    ["nft", "-j", "-a", "-f", "-"],
                    input=commands,
                    capture_output=True,
                    text=True,
                    check=False,
                )
            except FileNotFoundError as exc:
                raise CniError(errors.INTERNAL, "nftables is not available", str(exc)) from exc
            ok, out, err = proc.returncode == 0, proc.stdout, proc.stderr
        if check and not ok:
            raise CniError(
                errors.INTERNAL, "nftables command failed", f"{err.strip()} (commands: {commands.strip()})"
            )
        return ok, out, err

    def json(self, command: str) -> list[dict[str, Any]] | None:
        """Run a list command and return its nftables objects, None when the object does not exist."""
        ok, out, _ = self.run(command, check=False)
        if not ok:
            return None
        if not out.strip():
            return []
        return list(json.loads(out).get("nftables", []))
