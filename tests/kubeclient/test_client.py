"""The shared client: kubeconfig loading, the REST client's retries and rate limit, and the informer's
list/watch/resume/relist with indexes and resync, against a small fake API server (aiohttp) that records
what it was asked. (The real API server is driven by every integration test of the agent, the scheduler
and the controllers.)"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubeclient.config import ConfigError, in_cluster_config, load_kubeconfig
from kubeclient.errors import ApiError
from kubeclient.informer import Informer, by_namespace, by_uid
from kubeclient.ratelimit import TokenBucket
from tests.kubeclient.conftest import served


def self_signed() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "system:node:n1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def test_kubeconfig_inline_and_files(tmp_path: Path):
    cert, key = self_signed()
    (tmp_path / "ca.crt").write_bytes(cert)
    (tmp_path / "token").write_text("tok-from-file\n")
    doc = {
        "current-context": "b",
        "clusters": [
            {
                "name": "c1",
                "cluster": {
                    "server": "https://127.0.0.1:6443/",
                    "certificate-authority-data": base64.b64encode(cert).decode(),
                },
            },
            {"name": "c2", "cluster": {"server": "https://10.0.0.1", "certificate-authority": "ca.crt"}},
        ],
        "users": [
            {
                "name": "u1",
                "user": {
                    "client-certificate-data": base64.b64encode(cert).decode(),
                    "client-key-data": base64.b64encode(key).decode(),
                },
            },
            {"name": "u2", "user": {"tokenFile": "token"}},
        ],
        "contexts": [
            {"name": "a", "context": {"cluster": "c1", "user": "u1"}},
            {"name": "b", "context": {"cluster": "c2", "user": "u2"}},
        ],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(doc))
    b = load_kubeconfig(path)
    assert b.server == "https://10.0.0.1" and b.ca_data == cert
    assert b.bearer_token() == "tok-from-file" and b.auth_kind() == "token"
    a = load_kubeconfig(path, context="a")
    assert a.server == "https://127.0.0.1:6443" and a.auth_kind() == "client-certificate"
    assert a.ssl_context() is not None  # loads the CA and the client pair
    assert "tok-from-file" not in repr(b) and "BEGIN" not in repr(a)
    with pytest.raises(ConfigError):
        load_kubeconfig(path, context="missing")


def test_in_cluster(tmp_path: Path):
    (tmp_path / "token").write_text("sa-token")
    cfg = in_cluster_config(
        tmp_path, {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    )
    assert cfg.server == "https://10.96.0.1:443" and cfg.bearer_token() == "sa-token"
    with pytest.raises(ConfigError):
        in_cluster_config(tmp_path, {})


async def test_token_bucket_allows_burst_then_waits():
    bucket = TokenBucket(qps=1000, burst=3)
    waits = [await bucket.acquire() for _ in range(4)]
    assert waits[:3] == [0.0, 0.0, 0.0] and waits[3] > 0


class FakeApi:
    """Serves /api/v1/pods: list (with a resourceVersion) and watch (scripted per call)."""

    def __init__(self) -> None:
        self.pods: dict[str, dict] = {}
        self.rv = 10
        self.requests: list[dict] = []
        self.watch_scripts: list[list] = []  # each: events to send, then close; "GONE" sends 410
        self.fail_next = 0
        self.fail_with_429 = False
        self.watch_waiters: list[asyncio.Event] = []

    def pod(self, name: str, uid: str) -> dict:
        self.rv += 1
        obj = {
            "metadata": {"name": name, "namespace": "d", "uid": uid, "resourceVersion": str(self.rv)},
            "spec": {"nodeName": "n1"},
        }
        self.pods[uid] = obj
        return obj

    async def handle(self, request: web.Request) -> web.StreamResponse:
        q = dict(request.query)
        self.requests.append({"path": request.path, "auth": request.headers.get("Authorization"), **q})
        if self.fail_next:
            self.fail_next -= 1
            if self.fail_with_429:
                return web.json_response(
                    {"kind": "Status", "reason": "TooManyRequests", "message": "slow down"},
                    status=429,
                    headers={"Retry-After": "0"},
                )
            return web.json_response(
                {"kind": "Status", "reason": "ServiceUnavailable", "message": "busy"}, status=503
            )
        if request.path == "/api/v1/namespaces/d/pods/missing":
            return web.json_response(
                {"kind": "Status", "reason": "NotFound", "message": 'pods "missing" not found', "code": 404},
                status=404,
            )
        if q.get("watch") != "true":
            return web.json_response(
                {
                    "kind": "PodList",
                    "metadata": {"resourceVersion": str(self.rv)},
                    "items": list(self.pods.values()),
                }
            )
        resp = web.StreamResponse()
        await resp.prepare(request)
        script = self.watch_scripts.pop(0) if self.watch_scripts else []
        for item in script:
            if item == "GONE":
                status = {
                    "kind": "Status",
                    "code": 410,
                    "reason": "Expired",
                    "message": "too old resource version",
                }
                await resp.write(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
                break
            if item == "HOLD":
                await asyncio.sleep(1)
                break
            if callable(item):
                item()
                continue
            await resp.write(json.dumps(item).encode() + b"\n")
        return resp


@pytest.fixture
async def fake_api():
    api = FakeApi()
    async with served(api.handle, token="t0k", max_attempts=3) as client:
        yield api, client


async def test_client_retries_5xx_and_sends_token(fake_api):
    api, client = fake_api
    api.fail_next = 2
    out = await client.get("/api/v1/pods")
    assert out["kind"] == "PodList"
    assert len(api.requests) == 3 and api.requests[-1]["auth"] == "Bearer t0k"


async def test_client_never_sends_a_post_twice_on_5xx_but_retries_429(fake_api):
    """A POST that reached the server may have been carried out: only a 429 (the server did nothing)
    is retried, so a generateName create can never be made twice."""
    api, client = fake_api
    api.fail_next = 1
    with pytest.raises(ApiError) as err:
        await client.create("/api/v1/namespaces/d/pods", {"metadata": {"generateName": "x-"}})
    assert err.value.status == 503 and len(api.requests) == 1
    api.fail_next, api.fail_with_429 = 2, True
    await client.create("/api/v1/namespaces/d/pods", {"metadata": {"generateName": "x-"}})
    assert len(api.requests) == 4


async def test_client_raises_api_status_without_retrying_404(fake_api):
    api, client = fake_api
    with pytest.raises(ApiError) as err:
        await client.get("/api/v1/namespaces/d/pods/missing")
    assert err.value.not_found and err.value.reason == "NotFound"
    assert len(api.requests) == 1


async def test_informer_lists_watches_resumes_and_relists(fake_api):
    api, client = fake_api
    a = api.pod("a", "uid-a")
    b = api.pod("b", "uid-b")
    list_rv = str(api.rv)
    seen: list[tuple[str, str]] = []
    inf = Informer(client, "/api/v1/pods", field_selector="spec.nodeName=n1", indexers={"uid": by_uid})
    inf.add_handler(
        on_add=lambda obj: seen.append(("ADDED", obj["metadata"]["name"])),
        on_update=lambda old, obj: seen.append(("MODIFIED", obj["metadata"]["name"])),
        on_delete=lambda obj: seen.append(("DELETED", obj["metadata"]["name"])),
    )
    # c's annotation makes its watch line longer than aiohttp's 64 KiB readline limit.
    c = {
        "metadata": {
            "name": "c",
            "namespace": "d",
            "uid": "uid-c",
            "resourceVersion": "20",
            "annotations": {"big": "x" * 100_000},
        }
    }

    def while_away() -> None:
        # Missed by the informer (its watch expired): b deleted, a modified. The relist must report both.
        del api.pods["uid-b"]
        api.pods["uid-a"] = {**a, "metadata": {**a["metadata"], "resourceVersion": "30"}}
        api.pods["uid-c"] = c

    api.watch_scripts = [
        # First watch: a new pod, a bookmark, then the server closes the stream.
        [
            {"type": "ADDED", "object": c},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "25"}}},
        ],
        # Second watch (resumed at 25): too old -> relist.
        [while_away, "GONE"],
        ["HOLD"],
    ]
    task = asyncio.create_task(inf.run())
    while inf.lists < 2:
        await asyncio.sleep(0.01)
    task.cancel()
    watches = [r for r in api.requests if r.get("watch") == "true"]
    assert watches[0]["resourceVersion"] == list_rv and watches[0]["allowWatchBookmarks"] == "true"
    assert watches[0]["fieldSelector"] == "spec.nodeName=n1"
    assert watches[1]["resourceVersion"] == "25"  # resumed after the bookmark, not relisted
    assert seen[:3] == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    assert set(seen[3:]) == {("DELETED", "b"), ("MODIFIED", "a")}
    assert set(inf.store) == {"d/a", "d/c"}
    assert inf.by_index("uid", "uid-c")[0]["metadata"]["name"] == "c"
    assert inf.by_index("uid", b["metadata"]["uid"]) == []


async def test_informer_relist_reports_a_replaced_object_as_delete_then_add(fake_api):
    """Deleted and created again under the same name while the watch was away: handlers see the old
    object go and the new one come, never an "update" from one UID to another."""
    api, client = fake_api
    api.pod("a", "uid-1")
    seen: list[tuple[str, str]] = []
    inf = Informer(client, "/api/v1/pods", indexers={"ns": by_namespace})
    inf.add_handler(
        on_add=lambda o: seen.append(("add", o["metadata"]["uid"])),
        on_update=lambda old, o: seen.append(("update", o["metadata"]["uid"])),
        on_delete=lambda o: seen.append(("delete", o["metadata"]["uid"])),
    )
    await inf.relist()
    del api.pods["uid-1"]
    api.pod("a", "uid-2")
    await inf.relist()
    assert seen == [("add", "uid-1"), ("delete", "uid-1"), ("add", "uid-2")]
    assert [o["metadata"]["uid"] for o in inf.by_index("ns", "d")] == ["uid-2"]


async def test_informer_resync_redelivers_every_object_as_an_update(fake_api):
    api, client = fake_api
    api.pod("a", "uid-a")
    api.pod("b", "uid-b")
    updates: list[str] = []
    inf = Informer(client, "/api/v1/pods")
    inf.add_handler(
        on_update=lambda old, new: updates.append(new["metadata"]["name"]) if old is new else None
    )
    await inf.relist()
    inf.resync()
    assert sorted(updates) == ["a", "b"]


async def test_a_failing_handler_does_not_stop_the_next(fake_api):
    api, client = fake_api
    api.pod("a", "uid-a")
    seen: list[str] = []
    inf = Informer(client, "/api/v1/pods")
    inf.add_handler(on_add=lambda o: 1 / 0)
    inf.add_handler(on_add=lambda o: seen.append(o["metadata"]["name"]))
    await inf.relist()
    assert seen == ["a"]
