"""httpGet lifecycle hooks against a real local server: any HTTP answer is success (upstream does not
look at the status), no answer is a failure worded as upstream's, with the hook's User-Agent."""

from __future__ import annotations

from aiohttp import web

from agent.probes.hooks import HookRunner
from agent.probes.result import Target
from pykubelet.rig.process import free_port

UA = "kube-lifecycle/1.32"


async def test_http_hook_succeeds_on_any_answer_and_fails_without_one():
    agents: list[str] = []

    async def broken(request: web.Request) -> web.Response:
        agents.append(request.headers.get("User-Agent", ""))
        return web.Response(status=500, text="no")

    app = web.Application()
    app.router.add_get("/hook", broken)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    hooks = HookRunner(None, UA)  # type: ignore[arg-type] - httpGet hooks never use the runtime
    try:
        target = Target("127.0.0.1", "cid", (("web", port),))
        assert (
            await hooks.run({"httpGet": {"path": "/hook", "port": "web"}}, target, "main", "p_ns(u)", 2)
            is None
        )
        assert agents == [UA]
    finally:
        await runner.cleanup()
    failure = await hooks.run({"httpGet": {"path": "/hook", "port": port}}, target, "main", "p_ns(u)", 2)
    assert failure == (
        f'HTTP lifecycle hook (/hook) for Container "main" in Pod "p_ns(u)" failed - error: '
        f'Get "http://127.0.0.1:{port}/hook": dial tcp 127.0.0.1:{port}: connect: connection refused'
    )
    failure = await hooks.run({"httpGet": {"path": "/hook", "port": "nope"}}, target, "main", "p_ns(u)", 2)
    assert failure is not None and failure.endswith('error: strconv.Atoi: parsing "nope": invalid syntax')
