"""Lifecycle hooks (postStart, preStop): run a handler in or against a container and report failure in
upstream's words (pkg/kubelet/lifecycle/handlers.go), for the FailedPostStartHook and FailedPreStopHook
events and the PostStartHookError waiting reason.

Unlike probes, a hook has no thresholds and no verdict to keep: it runs once and either worked or not.
An httpGet hook fails only when no HTTP answer came back; its status code is not looked at, as upstream.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agent.cri import CRIClient, CRIError
from agent.probes.handlers import http_request, resolve_port
from agent.probes.http import HttpFailure, http_get
from agent.probes.result import Target
from agent.probes.tcp import go_quote


class HookRunner:
    def __init__(self, cri: CRIClient, user_agent: str) -> None:
        self.cri = cri
        self.user_agent = user_agent

    async def run(
        self, handler: dict[str, Any], target: Target, container: str, pod_ref: str, timeout: float = 0
    ) -> str | None:
        """None when the hook worked, else the message for the event and the container's status.
        `timeout` (seconds, 0 for none) bounds an exec hook in the runtime."""
        if handler.get("exec") is not None:
            return await self._exec(handler["exec"].get("command") or [], target, container, pod_ref, timeout)
        if handler.get("httpGet") is not None:
            return await self._http(handler["httpGet"], target, container, pod_ref, timeout)
        if handler.get("sleep") is not None:
            await asyncio.sleep(max(0, int(handler["sleep"].get("seconds") or 0)))
            return None
        return f"Cannot run handler: invalid handler: {go_quote(json.dumps(handler))}"

    async def _exec(
        self, command: list[str], target: Target, container: str, pod_ref: str, timeout: float
    ) -> str | None:
        shown = "[" + " ".join(command) + "]"
        try:
            res = await self.cri.exec_sync(target.container_id, command, int(timeout))
        except CRIError as err:
            return f'Exec lifecycle hook ({shown}) for Container "{container}" in Pod "{pod_ref}" failed - error: {err.rpc_text}, message: ""'
        if res.exit_code == 0:
            return None
        output = (res.stdout + res.stderr).decode(errors="replace")
        error = f"command '{' '.join(command)}' exited with {res.exit_code}: {res.stderr.decode(errors='replace')}"
        return (
            f'Exec lifecycle hook ({shown}) for Container "{container}" in Pod "{pod_ref}" failed - '
            f"error: {error}, message: {go_quote(output)}"
        )

    async def _http(
        self, action: dict[str, Any], target: Target, container: str, pod_ref: str, timeout: float
    ) -> str | None:
        try:
            port = resolve_port(target, action.get("port"))
            url, headers = http_request(action, action.get("host") or target.pod_ip, port)
            # Any HTTP answer will do: upstream's hook does not look at the status code.
            await http_get(url, headers, timeout or 3600.0, self.user_agent)
            return None
        except ValueError as err:
            error = str(err)
        except HttpFailure as failure:
            error = failure.outcome.output
        return (
            f'HTTP lifecycle hook ({action.get("path", "")}) for Container "{container}" in Pod "{pod_ref}" '
            f"failed - error: {error}"
        )
