"""List and watch options as kube-apiserver 1.32 answers them, through the real server: combinations
upstream's ListOptions validation forbids are its 422 with its texts; a watch from a resourceVersion the
server has not reached starts at once and delivers only what comes after it; sendInitialEvents=false sends
no initial events, sendInitialEvents=true ends them with the `k8s.io/initial-events-end` bookmark; a
continue token whose revision was compacted away is upstream's 410 carrying the inconsistent-continue
token in metadata.continue, which lists the rest."""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.parse
from collections.abc import Iterator

import pytest

from controlplane.apiserver.handlers import INCONSISTENT_CONTINUE
from pykubelet.rig.apiserver import ApiServer

from .test_apiserver_wire import fetch

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A server of its own that compacts its history every second (for the expired continue token)."""
    with ApiServer(
        tmp_path_factory.mktemp("listwatch-api"), extra_args=["--etcd-compaction-interval", "1s"]
    ) as s:
        yield s


def create(server: ApiServer, namespace: str, name: str) -> dict:
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}).encode()
    status, data, _ = fetch(server, f"/api/v1/namespaces/{namespace}/configmaps", "POST", body)
    assert status == 201, data
    return json.loads(data)


@pytest.fixture
def namespace(server: ApiServer, request: pytest.FixtureRequest) -> str:
    name = "lw-" + request.node.name.replace("_", "-")[5:40].strip("-").lower()
    body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}).encode()
    assert fetch(server, "/api/v1/namespaces", "POST", body)[0] == 201
    return name


class WatchStream:
    """One watch request read event by event (a real HTTPS stream, as the administrator)."""

    def __init__(self, server: ApiServer, path: str, query: dict[str, str]) -> None:
        context = ssl.create_default_context(cafile=str(server.ca_cert))
        pki = server.data_dir / "pki"
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        self.conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=15)
        self.started = time.monotonic()
        self.conn.request("GET", path + "?" + urllib.parse.urlencode({"watch": "true", **query}))
        self.response = self.conn.getresponse()
        self.answered = time.monotonic() - self.started

    def next(self) -> dict:
        line = self.response.readline()
        assert line, "the watch ended"
        return json.loads(line)

    def close(self) -> None:
        self.conn.close()


LIST_CASES = [
    (
        {"resourceVersionMatch": "NotOlderThan"},
        [
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
        ],
    ),
    (
        {"resourceVersion": "0", "resourceVersionMatch": "Exact"},
        [
            'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
        ],
    ),
    (
        {"resourceVersion": "1", "resourceVersionMatch": "Newest"},
        ['resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", ""'],
    ),
    (
        {"sendInitialEvents": "true"},
        ["sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"],
    ),
]
WATCH_CASES = [
    (
        {"resourceVersionMatch": "NotOlderThan"},
        [
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless "
            "sendInitialEvents is provided"
        ],
    ),
    (
        {"sendInitialEvents": "true"},
        [
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
        ],
    ),
    (
        {"sendInitialEvents": "true", "resourceVersionMatch": "Exact"},
        [
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            'resourceVersionMatch: Unsupported value: "Exact": supported values: "NotOlderThan"',
        ],
    ),
]


@pytest.mark.parametrize(
    ("query", "causes"), LIST_CASES + [({"watch": "true", **q}, c) for q, c in WATCH_CASES]
)
def test_invalid_option_combinations_are_upstreams_422(
    server: ApiServer, query: dict, causes: list[str]
) -> None:
    status, data, _ = fetch(server, "/api/v1/namespaces/default/configmaps?" + urllib.parse.urlencode(query))
    body = json.loads(data)
    assert status == 422 and body["reason"] == "Invalid", body
    summary = causes[0] if len(causes) == 1 else "[" + ", ".join(causes) + "]"
    assert body["message"] == f'ListOptions.meta.k8s.io "" is invalid: {summary}'
    assert [f"{c['field']}: {c['message']}" for c in body["details"]["causes"]] == causes


def test_a_watch_from_a_future_resource_version_starts_at_once(server: ApiServer, namespace: str) -> None:
    first = create(server, namespace, "before")
    future = int(first["metadata"]["resourceVersion"]) + 2
    stream = WatchStream(
        server, f"/api/v1/namespaces/{namespace}/configmaps", {"resourceVersion": str(future)}
    )
    try:
        # upstream's 504 came after a 3 s wait; the watch is answered at once instead
        assert stream.response.status == 200 and stream.answered < 2.5
        made = [create(server, namespace, f"after-{i}") for i in range(4)]
        expected = [m["metadata"]["name"] for m in made if int(m["metadata"]["resourceVersion"]) > future]
        assert expected, made
        got = [stream.next() for _ in expected]
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in got] == [("ADDED", n) for n in expected]
    finally:
        stream.close()


def test_send_initial_events_false_sends_none(server: ApiServer, namespace: str) -> None:
    create(server, namespace, "existing")
    query = {
        "sendInitialEvents": "false",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
    }
    stream = WatchStream(server, f"/api/v1/namespaces/{namespace}/configmaps", query)
    try:
        assert stream.response.status == 200
        create(server, namespace, "fresh")
        event = stream.next()
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "fresh")
    finally:
        stream.close()


def test_initial_events_end_with_the_annotated_bookmark(server: ApiServer, namespace: str) -> None:
    made = create(server, namespace, "existing")
    query = {
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
    }
    stream = WatchStream(server, f"/api/v1/namespaces/{namespace}/configmaps", query)
    try:
        added = stream.next()
        assert (added["type"], added["object"]["metadata"]["name"]) == ("ADDED", "existing")
        bookmark = stream.next()
        assert bookmark["type"] == "BOOKMARK"
        meta = bookmark["object"]["metadata"]
        assert meta["annotations"] == {"k8s.io/initial-events-end": "true"}
        assert int(meta["resourceVersion"]) >= int(made["metadata"]["resourceVersion"])
    finally:
        stream.close()


def test_an_expired_continue_token_is_410_with_the_inconsistent_token(
    server: ApiServer, namespace: str
) -> None:
    for name in ("a", "b", "c"):
        create(server, namespace, name)
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    status, data, _ = fetch(server, path + "?limit=1")
    first = json.loads(data)
    token = first["metadata"]["continue"]
    assert status == 200 and [i["metadata"]["name"] for i in first["items"]] == ["a"]
    # Writes move the revision on; the server's compaction (every second) then passes the token's.
    deadline = time.monotonic() + 30
    n = 0
    while True:
        n += 1
        create(server, namespace, f"z-{n}")
        status, data, _ = fetch(
            server, path + "?" + urllib.parse.urlencode({"limit": "1", "continue": token})
        )
        if status != 200:
            break
        assert time.monotonic() < deadline, "the server never compacted past the token's revision"
        time.sleep(0.5)
    body = json.loads(data)
    assert status == 410 and body["reason"] == "Expired" and body["code"] == 410
    assert body["message"] == INCONSISTENT_CONTINUE
    assert body["message"].startswith(
        "The provided continue parameter is too old to display a consistent list result. You can start a new "
        "list without the continue parameter, or use the continue token in this response"
    )
    again = body["metadata"]["continue"]
    status, data, _ = fetch(server, path + "?" + urllib.parse.urlencode({"limit": "10", "continue": again}))
    rest = json.loads(data)
    assert status == 200
    assert [i["metadata"]["name"] for i in rest["items"]] == ["b", "c"] + [f"z-{i}" for i in range(1, n + 1)]
