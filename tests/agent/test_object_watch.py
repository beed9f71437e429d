"""agent.kube.objectwatch with agent.kube.objects on a fake API: a ConfigMap or Secret a pod names is
watched from the pod's registration, read from the watch once it has listed, stopped with the last pod,
watched no further once seen immutable, and a failing or expiring watch retries under a backoff. The
same through a real API server: test_object_watch_integration.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from agent.kube.objects import ObjectReader
from agent.kube.objectwatch import ObjectWatches
from kubeclient.errors import ApiError

CM_PATH = "/api/v1/namespaces/ns/configmaps"


def cm(rv: int, value: str, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "cfg", "namespace": "ns", "resourceVersion": str(rv)},
        "data": {"k": value},
        **extra,
    }


def pod(uid: str, *configmaps: str) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "namespace": "ns", "name": uid},
        "spec": {
            "containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": f"v{i}", "configMap": {"name": n}} for i, n in enumerate(configmaps)],
        },
    }


class FakeApi:
    """One ConfigMap behind list, watch and GET. Watch events are fed through a queue; a scripted
    failure (an ApiError) is raised by the next list or watch instead."""

    def __init__(self, obj: dict[str, Any] | None) -> None:
        self.obj = obj
        self.events: asyncio.Queue[dict[str, Any] | ApiError] = asyncio.Queue()
        self.list_failures: list[ApiError] = []
        self.calls: list[tuple[str, str, float]] = []  # (verb, path, loop time)
        self.watching = 0  # watch requests open now

    def _note(self, verb: str, path: str) -> None:
        self.calls.append((verb, path, asyncio.get_running_loop().time()))

    def count(self, verb: str) -> int:
        return sum(1 for v, _, _ in self.calls if v == verb)

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self._note(method, path)
        if self.obj is None:
            raise ApiError(404, "NotFound", "not found")
        return self.obj

    async def get(self, path: str, **_: Any) -> dict[str, Any]:
        return await self.request("GET", path)

    async def list(self, path: str, params: dict[str, Any], page: int = 500) -> tuple[list[Any], str]:
        self._note("LIST", f"{path}?{params['fieldSelector']}")
        if self.list_failures:
            raise self.list_failures.pop(0)
        return ([self.obj] if self.obj else []), "10"

    async def watch(self, path: str, params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        self._note("WATCH", f"{path}?{params['fieldSelector']}")
        self.watching += 1
        try:
            while True:
                event = await self.events.get()
                if isinstance(event, ApiError):
                    raise event
                yield event
        finally:
            self.watching -= 1


async def until(condition: Any, seconds: float = 5.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.005)


def test_reads_come_from_the_watch_once_it_has_listed_and_follow_its_events() -> None:
    async def scenario() -> None:
        api = FakeApi(cm(5, "one"))
        watches = ObjectWatches(api)  # type: ignore[arg-type]
        reader = ObjectReader(api, watches)  # type: ignore[arg-type]
        reader.register_pod(pod("a", "cfg"))
        reader.register_pod(pod("b", "cfg"))  # a second pod naming it: still one watch
        # before the first list is in, a read is a GET
        assert await reader.fetch("ConfigMap", "ns", "cfg") == cm(5, "one")
        assert api.count("GET") == 1
        await until(lambda: api.watching == 1)
        for _ in range(50):
            assert await reader.fetch("ConfigMap", "ns", "cfg") == cm(5, "one")
        assert api.count("GET") == 1 and api.count("LIST") == 1 and api.count("WATCH") == 1
        assert api.calls[1][1] == f"{CM_PATH}?metadata.name=cfg"
        await api.events.put({"type": "MODIFIED", "object": cm(6, "two")})
        await until(lambda: watches.read(("ConfigMap", "ns", "cfg"))[1] == cm(6, "two"))
        assert await reader.fetch("ConfigMap", "ns", "cfg") == cm(6, "two")
        await api.events.put({"type": "DELETED", "object": cm(7, "two")})
        await until(lambda: watches.read(("ConfigMap", "ns", "cfg")) == (True, None))
        assert await reader.fetch("ConfigMap", "ns", "cfg") is None  # gone: as a GET's 404
        assert api.count("GET") == 1
        await watches.close()

    asyncio.run(scenario())


def test_the_watch_stops_and_its_copy_goes_with_the_last_pod() -> None:
    async def scenario() -> None:
        api = FakeApi(cm(5, "one"))
        watches = ObjectWatches(api)  # type: ignore[arg-type]
        reader = ObjectReader(api, watches)  # type: ignore[arg-type]
        key = ("ConfigMap", "ns", "cfg")
        reader.register_pod(pod("a", "cfg"))
        reader.register_pod(pod("b", "cfg"))
        await until(lambda: api.watching == 1)
        assert reader.cached() == {key}
        reader.unregister_pod("a")
        await asyncio.sleep(0)
        assert watches.watching() == {key} and api.watching == 1
        reader.register_pod(pod("b"))  # b's spec stops naming it: the last reference goes
        await until(lambda: api.watching == 0)
        assert watches.watching() == set() and reader.cached() == set()
        # read now, it is an object no pod names: a GET
        await reader.fetch("ConfigMap", "ns", "cfg")
        assert api.count("GET") == 1 and api.count("WATCH") == 1
        await watches.close()

    asyncio.run(scenario())


def test_an_immutable_object_is_watched_no_further_and_its_copy_serves() -> None:
    async def scenario() -> None:
        api = FakeApi(cm(5, "fixed", immutable=True))
        watches = ObjectWatches(api)  # type: ignore[arg-type]
        reader = ObjectReader(api, watches)  # type: ignore[arg-type]
        reader.register_pod(pod("a", "cfg"))
        await until(lambda: api.watching == 1)
        assert await reader.fetch("ConfigMap", "ns", "cfg") == cm(5, "fixed", immutable=True)
        await until(lambda: api.watching == 0)
        assert watches.watching() == set()
        assert await reader.fetch("ConfigMap", "ns", "cfg") == cm(5, "fixed", immutable=True)
        assert api.count("GET") == 0 and api.count("LIST") == 1
        await watches.close()

    asyncio.run(scenario())


def test_the_copy_serves_while_the_api_is_unreachable() -> None:
    async def scenario() -> None:
        api = FakeApi(cm(5, "one"))
        watches = ObjectWatches(api, retry=(0.01, 0.05))  # type: ignore[arg-type]
        reader = ObjectReader(api, watches)  # type: ignore[arg-type]
        reader.register_pod(pod("a", "cfg"))
        await until(lambda: api.watching == 1)
        api.list_failures = [ApiError(0, "Unreachable", "refused")] * 1000
        await api.events.put(ApiError(410, "Expired", "too old"))  # the watch ends; every relist fails
        await until(lambda: api.count("LIST") >= 3)
        assert await reader.fetch("ConfigMap", "ns", "cfg") == cm(5, "one")
        assert api.count("GET") == 0
        await watches.close()

    asyncio.run(scenario())


def test_a_failing_or_expiring_watch_retries_under_a_growing_backoff() -> None:
    """Each restart waits at least the backoff's initial delay, and the waits grow: no tight loop,
    whether the list fails or the watch expires (410) at once each time."""

    async def scenario() -> None:
        api = FakeApi(cm(5, "one"))
        watches = ObjectWatches(api, retry=(0.005, 0.04))  # type: ignore[arg-type]
        reader = ObjectReader(api, watches)  # type: ignore[arg-type]
        for _ in range(6):
            await api.events.put(ApiError(410, "Expired", "too old"))  # every watch expires at once
        reader.register_pod(pod("a", "cfg"))
        await until(lambda: api.count("WATCH") >= 6)
        api.list_failures = [ApiError(500, "InternalError", "storage")] * 4
        await api.events.put(ApiError(410, "Expired", "too old"))
        await until(lambda: api.count("LIST") >= 12)
        starts = [t for verb, _, t in api.calls if verb == "LIST"]
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        assert min(gaps) >= 0.005, gaps
        assert max(gaps) >= 0.04, gaps  # it grew to the maximum
        await watches.close()
        assert api.watching == 0

    asyncio.run(scenario())
