"""The writes a node makes most, through a server on each store: Lease renewals (PUT) and pod status
patches (strategic merge of pods/status). Each answer is byte for byte what a GET of that version gives;
managedFields move as upstream's field manager moves them: a renewal by the holder's manager keeps its
entry's fields, a renewal by another manager that changes holderIdentity takes that field over, a status
patch that changes the conditions leaves the creator's entry alone and gives the kubelet the status; a
stale resourceVersion is a 409 and changes nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.apiserver import ssa
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.etcd import Etcd

from .test_apiserver_wire import fetch

pytestmark = pytest.mark.integration

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


@pytest.fixture(scope="module", params=["sqlite", "etcd"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    etcd: Etcd | None = request.getfixturevalue("etcd") if request.param == "etcd" else None
    extra = ["--etcd-prefix", f"/writepath-{uuid.uuid4().hex[:8]}"] if etcd is not None else []
    with ApiServer(
        Path(tmp_path_factory.mktemp(f"writepath-{request.param}")), etcd=etcd, extra_args=extra
    ) as s:
        yield s


def owners(obj: dict) -> dict[tuple[str, str], set]:
    return {
        (m["manager"], m.get("subresource", "")): ssa.leaves(m["fieldsV1"])
        for m in obj["metadata"].get("managedFields") or []
    }


def put(server: ApiServer, path: str, body: dict) -> tuple[int, dict, bytes]:
    status, answer, _ = fetch(server, path, "PUT", json.dumps(body).encode())
    return status, json.loads(answer), answer


def patch_status(server: ApiServer, path: str, patch: dict) -> tuple[int, bytes]:
    status, answer, _ = fetch(
        server, path, "PATCH", json.dumps(patch).encode(), "application/strategic-merge-patch+json"
    )
    return status, answer


def same_as_read(server: ApiServer, path: str, answer: bytes) -> bool:
    version = json.loads(answer)["metadata"]["resourceVersion"]
    status, read, _ = fetch(server, f"{path}?resourceVersion={version}")
    return status == 200 and read == answer


def test_lease_renewals_by_the_holder_and_by_another_manager(server: ApiServer) -> None:
    name = f"n-{uuid.uuid4().hex[:8]}"
    path = f"{LEASES}/{name}"
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": "u1"}],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 40,
            "renewTime": "2026-12-06T10:00:00.000000Z",
        },
    }
    status, answer, _ = fetch(server, f"{LEASES}?fieldManager=kubelet", "POST", json.dumps(lease).encode())
    assert status == 201
    created = json.loads(answer)
    renewed = json.loads(answer)
    renewed["spec"]["renewTime"] = "2026-12-06T10:00:10.000000Z"
    status, renewed, raw = put(server, f"{path}?fieldManager=kubelet", renewed)
    assert status == 200 and same_as_read(server, path, raw)
    assert renewed["spec"]["renewTime"] == "2026-12-06T10:00:10.000000Z"
    assert int(renewed["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert owners(renewed) == owners(created)  # the holder's own fields, renewed: nothing moves
    stale = {**created, "spec": {**created["spec"], "renewTime": "2026-12-06T10:00:20.000000Z"}}
    status, conflict, _ = put(server, f"{path}?fieldManager=kubelet", stale)
    assert status == 409 and conflict["reason"] == "Conflict"
    taken = {**renewed, "spec": {**renewed["spec"], "holderIdentity": "other"}}
    status, taken, raw = put(server, f"{path}?fieldManager=elector", taken)
    assert status == 200 and same_as_read(server, path, raw)
    moved = owners(taken)
    assert moved[("elector", "")] == {("f:spec", "f:holderIdentity")}
    assert moved[("kubelet", "")] == owners(renewed)[("kubelet", "")] - {("f:spec", "f:holderIdentity")}
    status, read, _ = fetch(server, path)
    assert json.loads(read)["spec"]["holderIdentity"] == "other"


def test_status_patches_that_change_conditions(server: ApiServer) -> None:
    name = f"p-{uuid.uuid4().hex[:8]}"
    base = "/api/v1/namespaces/default/pods"
    pod = {
        "metadata": {"name": name},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
    }
    status, answer, _ = fetch(server, f"{base}?fieldManager=creator", "POST", json.dumps(pod).encode())
    assert status == 201
    created = json.loads(answer)
    path = f"{base}/{name}"
    last = created
    for ready in ("True", "False", "True"):
        patch = {
            "metadata": {"uid": created["metadata"]["uid"]},
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": ready, "lastTransitionTime": "2026-12-06T10:00:00Z"},
                    {
                        "type": "ContainersReady",
                        "status": ready,
                        "lastTransitionTime": "2026-12-06T10:00:00Z",
                    },
                ],
                "containerStatuses": [
                    {
                        "name": "c",
                        "image": "i",
                        "imageID": "x",
                        "ready": ready == "True",
                        "restartCount": 0,
                        "started": True,
                        "state": {"running": {"startedAt": "2026-12-06T10:00:00Z"}},
                    }
                ],
            },
        }
        status, answer = patch_status(server, f"{path}/status?fieldManager=kubelet", patch)
        assert status == 200, answer
        assert same_as_read(server, path, answer)
        got = json.loads(answer)
        assert {c["type"]: c["status"] for c in got["status"]["conditions"]}["Ready"] == ready
        assert int(got["metadata"]["resourceVersion"]) > int(last["metadata"]["resourceVersion"])
        moved = owners(got)
        assert moved[("creator", "")] == owners(created)[("creator", "")]
        kubelet = moved[("kubelet", "status")]
        assert ("f:status", "f:conditions", 'k:{"type":"Ready"}', "f:status") in kubelet
        assert all(p[0] == "f:status" for p in kubelet)
        last = got
    wrong_uid = {"metadata": {"uid": "not-it"}, "status": {"phase": "Failed"}}
    status, answer = patch_status(server, f"{path}/status", wrong_uid)
    assert status == 409
    status, read, _ = fetch(server, path)
    assert read == fetch(server, f"{path}?resourceVersion={last['metadata']['resourceVersion']}")[1]
