"""/exec, /attach, /portForward and /run of the kubelet API (upstream's pkg/kubelet/server/server.go).

exec, attach and port-forward ask the runtime over CRI for a session on its streaming server (Exec,
Attach, PortForward give a one-use URL) and proxy the caller's upgraded connection to it byte for byte,
as upstream's kubelet does since the redirect went away: SPDY/3.1 (what a genuine API server sends) and
WebSocket (channel.k8s.io, v4.channel.k8s.io, portforward websockets) both pass, since the runtime's
streaming server speaks them. /run is a one-shot ExecSync whose output is the answer.

Refusals are upstream's: no such pod 404; a container that is not running `container not found ("c")`
and a pod without a running sandbox `pod not found ("name_ns")` (500, as the kubelet's WriteError), in
upstream's order (stream options, pod, container); a request that is no upgrade is refused (400) before
any runtime session is made.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable
from typing import Any

from aiohttp import web

from agent.cri import CRIClient, CRIError, pb
from agent.cri.errors import NotFoundError
from agent.pods import labels as L
from kubeclient.httpstream.protocols import is_upgrade_request
from kubeclient.httpstream.upgrade import UpgradeError, proxy_upgrade

log = logging.getLogger("agent.server.streaming")

PodLookup = Callable[[str, str], dict[str, Any] | None]


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "reason": reason,
            "message": message,
            "code": code,
        },
        status=code,
    )


def _runtime_error(err: CRIError) -> web.Response:
    """upstream's streaming.WriteError: the runtime's NotFound is a 404, anything else a 500."""
    return web.Response(status=404 if isinstance(err, NotFoundError) else 500, text=str(err))


def _flag(query: Any, *keys: str) -> bool:
    return any(query.get(k) in ("1", "true") for k in keys)


class StreamingHandlers:
    def __init__(self, cri: CRIClient, lookup: PodLookup) -> None:
        self.cri = cri
        self.lookup = lookup

    def routes(self, app: web.Application) -> None:
        for verb in ("exec", "attach"):
            app.router.add_route("*", f"/{verb}/{{namespace}}/{{pod}}/{{container}}", self.stream)
            app.router.add_route("*", f"/{verb}/{{namespace}}/{{pod}}/{{uid}}/{{container}}", self.stream)
        app.router.add_route("*", "/portForward/{namespace}/{pod}", self.port_forward)
        app.router.add_route("*", "/portForward/{namespace}/{pod}/{uid}", self.port_forward)
        app.router.add_post("/run/{namespace}/{pod}/{container}", self.run)
        app.router.add_post("/run/{namespace}/{pod}/{uid}/{container}", self.run)

    def _pod(self, request: web.Request) -> dict[str, Any] | None:
        pod = self.lookup(request.match_info["namespace"], request.match_info["pod"])
        uid = request.match_info.get("uid")
        if pod is not None and uid and pod["metadata"].get("uid") != uid:
            return None
        return pod

    async def _running_container(self, pod: dict[str, Any], name: str) -> str | None:
        found = await self.cri.list_containers(
            labels={L.POD_UID: pod["metadata"]["uid"], L.CONTAINER_NAME: name}, state=pb.CONTAINER_RUNNING
        )
        return found[0].id if found else None

    async def stream(self, request: web.Request) -> web.StreamResponse:
        # upstream's order: the stream options (400), the pod (404), the container, then the upgrade.
        verb = request.path.split("/", 2)[1]
        cname = request.match_info["container"]
        q = request.query
        tty = _flag(q, "tty")
        stdin, stdout, stderr = (
            _flag(q, "input", "stdin"),
            _flag(q, "output", "stdout"),
            _flag(q, "error", "stderr"),
        )
        if not (stdin or stdout or stderr):
            return _status(400, "BadRequest", "you must specify at least 1 of stdin, stdout, stderr")
        command = q.getall("command", [])
        if verb == "exec" and not command:
            return _status(400, "BadRequest", "you must specify at least 1 command")
        pod = self._pod(request)
        if pod is None:
            return _status(404, "NotFound", "pod does not exist")
        container_id = await self._running_container(pod, cname)
        if container_id is None:
            return web.Response(status=500, text=f'container not found ("{cname}")')
        if not is_upgrade_request(request.headers):  # before a runtime session is made
            return _status(400, "BadRequest", "Upgrade request required")
        try:
            if verb == "exec":
                url = await self.cri.exec(
                    container_id, command, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr
                )
            else:
                url = await self.cri.attach(container_id, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr)
        except CRIError as err:
            return _runtime_error(err)
        return await self._proxy(request, url)

    async def port_forward(self, request: web.Request) -> web.StreamResponse:
        pod = self._pod(request)
        if pod is None:
            return _status(404, "NotFound", "pod does not exist")
        sandboxes = await self.cri.list_pod_sandbox(
            labels={L.POD_UID: pod["metadata"]["uid"]}, state=pb.SANDBOX_READY
        )
        if not sandboxes:
            meta = pod["metadata"]
            return web.Response(status=500, text=f'pod not found ("{meta["name"]}_{meta["namespace"]}")')
        if not is_upgrade_request(request.headers):
            return _status(400, "BadRequest", "Upgrade request required")
        ports = [int(p) for p in request.query.getall("port", []) if p.isdigit()]
        try:
            url = await self.cri.port_forward(sandboxes[0].id, ports)
        except CRIError as err:
            return _runtime_error(err)
        return await self._proxy(request, url)

    async def _proxy(self, request: web.Request, url: str) -> web.StreamResponse:
        # The runtime's session URL carries the options; the caller's query (a WebSocket port-forward's
        # `port`s) goes along, as the runtime's server reads it from there.
        query = request.rel_url.raw_query_string
        if query:
            url += ("&" if "?" in url else "?") + query
        try:
            return await proxy_upgrade(request, url)
        except UpgradeError as err:
            log.warning("streaming proxy failed path=%s error=%r", request.path, str(err))
            return web.Response(status=500, text=str(err))

    async def run(self, request: web.Request) -> web.StreamResponse:
        """POST /run: the command (`cmd`, split on white space as upstream) run to completion; its output."""
        cname = request.match_info["container"]
        pod = self._pod(request)
        if pod is None:
            return _status(404, "NotFound", "pod does not exist")
        command = request.query.get("cmd", "").split()
        if not command:
            return _status(400, "BadRequest", "you must specify at least 1 command")
        container_id = await self._running_container(pod, cname)
        if container_id is None:
            return web.Response(status=500, text=f'container not found ("{cname}")')
        try:
            result = await self.cri.exec_sync(container_id, command)
        except CRIError as err:
            return _runtime_error(err)
        log.debug("run done container=%s command=%s exit=%d", cname, shlex.join(command), result.exit_code)
        return web.Response(body=result.stdout + result.stderr, content_type="application/json")
