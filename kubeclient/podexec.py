"""Run a command in a pod's container through the API and get its output and exit code, as `kubectl
exec` does since 1.30: a WebSocket to pods/NAME/exec speaking v5.channel.k8s.io (v4 accepted), where
each binary message starts with its channel (1 stdout, 2 stderr, 3 the Status that ends the command:
Success, or NonZeroExitCode with the code in its causes). No stdin, no terminal."""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import quote

import aiohttp

from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.httpstream.protocols import STREAM_V4, STREAM_V5

STDOUT, STDERR, ERROR = 1, 2, 3


@dataclass(frozen=True)
class ExecResult:
    exit_code: int  # -1: the command did not run (the Status says why)
    stdout: str
    stderr: str
    message: str = ""  # the Status message when it failed


def exit_code(status: dict) -> int:
    """The exit code a channel-3 Status reports (upstream's remotecommand: Success -> 0,
    NonZeroExitCode -> the ExitCode cause, any other failure -> -1)."""
    if status.get("status") == "Success":
        return 0
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or ():
            if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).isdigit():
                return int(cause["message"])
    return -1


async def exec_in_pod(
    client: KubeClient,
    namespace: str,
    pod: str,
    command: list[str],
    container: str | None = None,
) -> ExecResult:
    """Raises ApiError for a refused handshake (403 without pods/exec, 404, 400 for a pod not running).
    The caller bounds it (asyncio.timeout)."""
    params = [("command", c) for c in command] + [("stdout", "true"), ("stderr", "true")]
    if container:
        params.append(("container", container))
    path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}/exec"
    out: dict[int, bytes] = {STDOUT: b"", STDERR: b"", ERROR: b""}
    try:
        async with await client.websocket(path, params, (STREAM_V5, STREAM_V4)) as ws:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY and msg.data and msg.data[0] in out:
                    out[msg.data[0]] += msg.data[1:]
                elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.ERROR):
                    break
    except aiohttp.WSServerHandshakeError as err:
        raise ApiError(err.status, "", err.message or "exec refused", what=f"EXEC {path}") from None
    except aiohttp.ClientError as err:
        raise ApiError(0, "Unreachable", str(err) or type(err).__name__, what=f"EXEC {path}") from None
    try:
        status = json.loads(out[ERROR]) if out[ERROR] else {"status": "Success"}
    except ValueError:
        status = {"status": "Failure", "message": out[ERROR].decode(errors="replace")}
    code = exit_code(status)
    return ExecResult(
        code,
        out[STDOUT].decode(errors="replace"),
        out[STDERR].decode(errors="replace"),
        "" if code == 0 else str(status.get("message") or ""),
    )
