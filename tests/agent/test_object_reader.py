"""agent.kube.objects.ObjectReader: the objects a pod references are read from the API, and while the
API cannot answer (unreachable, a 5xx) the copy last seen serves instead; a 404 or a 403 is an answer
and is never papered over; an object never seen has no copy to serve."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent.kube.objects import SEEN_READ_DEADLINE, ObjectReader
from kubeclient.errors import ApiError

CA = {"metadata": {"name": "kube-root-ca.crt", "namespace": "ns"}, "data": {"ca.crt": "PEM"}}


class ScriptedClient:
    """Answers each GET with the next scripted result (an object or an ApiError); records the calls."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, bool, float | None]] = []

    async def request(self, method: str, path: str, *, retry: bool = True, deadline: float | None = None):
        self.calls.append((path, retry, deadline))
        answer = self.answers.pop(0)
        if isinstance(answer, ApiError):
            raise answer
        return answer

    async def get(self, path: str):
        return await self.request("GET", path)


def test_the_last_copy_serves_while_the_api_is_unreachable_or_failing() -> None:
    changed = {**CA, "data": {"ca.crt": "NEW"}}
    client = ScriptedClient(
        CA,
        ApiError(0, "Unreachable", "connection refused"),
        ApiError(503, "ServiceUnavailable", "etcd"),
        changed,
    )
    reader = ObjectReader(client)  # type: ignore[arg-type]

    async def reads() -> list[Any]:
        return [await reader.fetch("ConfigMap", "ns", "kube-root-ca.crt") for _ in range(4)]

    got = asyncio.run(reads())
    assert got == [CA, CA, CA, changed]
    path = "/api/v1/namespaces/ns/configmaps/kube-root-ca.crt"
    # the first read with the client's retries; an object seen before: one bounded attempt
    assert client.calls[0] == (path, True, None)
    assert client.calls[1:] == [(path, False, SEEN_READ_DEADLINE)] * 3


def test_an_answer_is_never_replaced_by_the_copy() -> None:
    client = ScriptedClient(
        CA, ApiError(404, "NotFound", "gone"), ApiError(0, "Unreachable", "refused"), CA,
        ApiError(403, "Forbidden", "no relationship"),
    )  # fmt: skip
    reader = ObjectReader(client)  # type: ignore[arg-type]

    async def reads() -> list[Any]:
        out = [await reader.fetch("Secret", "ns", "s") for _ in range(4)]
        with pytest.raises(ApiError) as forbidden:
            await reader.fetch("Secret", "ns", "s")
        return [*out, forbidden.value.status]

    # deleted: None, and during the outage that follows still None (the last thing seen)
    assert asyncio.run(reads()) == [CA, None, None, CA, 403]


def test_an_object_never_seen_has_no_copy() -> None:
    client = ScriptedClient(ApiError(0, "Unreachable", "refused"))
    reader = ObjectReader(client)  # type: ignore[arg-type]
    with pytest.raises(ApiError) as err:
        asyncio.run(reader.fetch("ConfigMap", "ns", "never"))
    assert err.value.unreachable


def _pod(uid: str, *configmaps: str, secret: str = "") -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [
        {"name": f"v{i}", "configMap": {"name": n}} for i, n in enumerate(configmaps)
    ]
    env = [{"name": "S", "valueFrom": {"secretKeyRef": {"name": secret, "key": "k"}}}] if secret else []
    return {
        "metadata": {"uid": uid, "namespace": "ns", "name": uid},
        "spec": {"containers": [{"name": "c", "image": "i", "env": env}], "volumes": volumes},
    }


def test_a_copy_goes_when_the_last_pod_naming_it_goes() -> None:
    """As upstream's ConfigMap and Secret managers: an object's copy lives while a registered pod names
    it; a spec change that stops naming it counts like the pod going; others' copies stay."""
    obj = {"metadata": {"name": "x"}}
    client = ScriptedClient(*[obj] * 5, ApiError(0, "Unreachable", "refused"))
    reader = ObjectReader(client)  # type: ignore[arg-type]
    a, b = _pod("a", "shared", "only-a", secret="token"), _pod("b", "shared")
    reader.register_pod(a)
    reader.register_pod(b)

    async def read_all() -> None:
        for kind, name in (("ConfigMap", "shared"), ("ConfigMap", "only-a"), ("Secret", "token")):
            await reader.fetch(kind, "ns", name)
        await reader.fetch("Secret", "ns", "pv-secret")  # named by no pod spec (a PV's CSI secret)
        await reader.fetch("RuntimeClass", "", "gvisor")

    asyncio.run(read_all())
    everything = {
        ("ConfigMap", "ns", "shared"),
        ("ConfigMap", "ns", "only-a"),
        ("Secret", "ns", "token"),
        ("Secret", "ns", "pv-secret"),
        ("RuntimeClass", "", "gvisor"),
    }
    assert reader.cached() == everything
    reader.register_pod(_pod("a", "shared", "only-a"))  # a's spec no longer names the secret
    assert reader.cached() == everything - {("Secret", "ns", "token")}
    reader.unregister_pod("a")
    assert reader.cached() == everything - {("Secret", "ns", "token"), ("ConfigMap", "ns", "only-a")}
    reader.unregister_pod("b")
    left = {("Secret", "ns", "pv-secret"), ("RuntimeClass", "", "gvisor")}
    assert reader.cached() == left
    # A dropped copy no longer serves during an outage: the object is read as never seen.
    with pytest.raises(ApiError):
        asyncio.run(reader.fetch("ConfigMap", "ns", "shared"))
    reader.unregister_pod("never-registered")  # nothing to drop, nothing breaks
    assert reader.cached() == left
