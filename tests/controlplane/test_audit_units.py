"""The audit policy, the request attributes it judges and the rotated log file, without a server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from multidict import MultiDict

from controlplane.apiserver.audit import AuditOptions, PolicyError, build_auditor, parse_policy
from controlplane.apiserver.audit.logfile import LogFile, Rotation, backup_name
from controlplane.apiserver.audit.requestinfo import request_attributes
from controlplane.apiserver.authn import UserInfo

ALICE = UserInfo("alice", groups=("devs", "system:authenticated"))


def attrs(method: str, path: str, user: UserInfo | None = ALICE, **query: str):  # type: ignore[no-untyped-def]
    a = request_attributes(method, path, MultiDict(query))
    a.user = user
    return a


def level(policy_yaml: str, method: str, path: str, user: UserInfo | None = ALICE, **query: str) -> str:
    return parse_policy(policy_yaml).evaluate(attrs(method, path, user, **query)).level


HEAD = "apiVersion: audit.k8s.io/v1\nkind: Policy\n"


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/namespaces/ns/pods/p", {}, ("get", "", "v1", "ns", "pods", "p", "")),
        ("GET", "/api/v1/namespaces/ns/pods", {}, ("list", "", "v1", "ns", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, ("watch", "", "v1", "ns", "pods", "", "")),
        ("GET", "/api/v1/watch/namespaces/ns/pods", {}, ("watch", "", "v1", "ns", "pods", "", "")),
        (
            "GET",
            "/api/v1/namespaces/ns/pods",
            {"fieldSelector": "metadata.name=p"},
            ("list", "", "v1", "ns", "pods", "p", ""),
        ),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", {}, ("get", "", "v1", "ns", "pods", "p", "log")),
        (
            "DELETE",
            "/apis/apps/v1/namespaces/ns/deployments",
            {},
            ("deletecollection", "apps", "v1", "ns", "deployments", "", ""),
        ),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/ns/deployments/d/status",
            {},
            ("patch", "apps", "v1", "ns", "deployments", "d", "status"),
        ),
        ("GET", "/api/v1/namespaces/ns", {}, ("get", "", "v1", "ns", "namespaces", "ns", "")),
        (
            "PUT",
            "/api/v1/namespaces/ns/finalize",
            {},
            ("update", "", "v1", "ns", "namespaces", "ns", "finalize"),
        ),
        ("GET", "/api/v1/nodes", {}, ("list", "", "v1", "", "nodes", "", "")),
        ("POST", "/api/v1/namespaces/ns/pods", {}, ("create", "", "v1", "ns", "pods", "", "")),
    ],
)
def test_request_attributes_as_upstreams_request_info(
    method: str, path: str, query: dict[str, str], expected: tuple[str, ...]
) -> None:
    a = request_attributes(method, path, MultiDict(query))
    assert a.resource_request
    assert (a.verb, a.api_group, a.api_version, a.namespace, a.resource, a.name, a.subresource) == expected


def test_non_resource_paths_and_long_running_requests() -> None:
    for path in ("/version", "/api", "/api/v1", "/apis/apps", "/apis/apps/v1", "/healthz/etcd"):
        a = request_attributes("GET", path, MultiDict())
        assert not a.resource_request and a.verb == "get" and a.path == path
    assert request_attributes("POST", "/version", MultiDict()).verb == "post"
    assert request_attributes("GET", "/api/v1/pods", MultiDict(watch="1")).long_running
    assert request_attributes("GET", "/api/v1/namespaces/n/pods/p/log", MultiDict()).long_running
    assert request_attributes("POST", "/api/v1/namespaces/n/pods/p/exec", MultiDict()).long_running
    assert not request_attributes("GET", "/api/v1/namespaces/n/pods/p", MultiDict()).long_running


def test_first_matching_rule_wins_and_none_by_default() -> None:
    policy = (
        HEAD
        + """rules:
- level: None
  users: [system:kube-proxy]
- level: RequestResponse
  resources: [{group: "", resources: [configmaps]}]
- level: Metadata
  userGroups: [devs]
"""
    )
    assert level(policy, "GET", "/api/v1/namespaces/n/configmaps/c") == "RequestResponse"
    assert level(policy, "GET", "/api/v1/namespaces/n/pods/p") == "Metadata"
    proxy = UserInfo("system:kube-proxy", groups=("devs",))
    assert level(policy, "GET", "/api/v1/namespaces/n/configmaps/c", proxy) == "None"
    assert level(policy, "GET", "/api/v1/namespaces/n/pods", UserInfo("bob")) == "None"
    assert level(policy, "GET", "/api/v1/namespaces/n/pods", None) == "None"


def test_resource_rules_subresources_names_namespaces_and_groups() -> None:
    policy = (
        HEAD
        + """rules:
- level: RequestResponse
  resources: [{group: "", resources: [pods/log]}]
- level: Request
  resources: [{group: "", resources: ["*/status"]}]
- level: Metadata
  resources: [{group: apps, resources: ["deployments/*"]}]
- level: Request
  resources: [{group: "", resources: [configmaps], resourceNames: [special]}]
- level: Metadata
  namespaces: [""]
- level: Request
  namespaces: [kube-system]
  verbs: [create]
- level: Metadata
  nonResourceURLs: ["/healthz*", /version]
"""
    )
    assert level(policy, "GET", "/api/v1/namespaces/n/pods/p/log") == "RequestResponse"
    assert level(policy, "GET", "/api/v1/namespaces/n/pods/p") == "None"
    assert level(policy, "PUT", "/api/v1/namespaces/n/pods/p/status") == "Request"
    assert level(policy, "PATCH", "/apis/apps/v1/namespaces/n/deployments/d/scale") == "Metadata"
    # upstream's "resource/*" matches the resource itself too
    assert level(policy, "PATCH", "/apis/apps/v1/namespaces/n/deployments/d") == "Metadata"
    assert level(policy, "PATCH", "/apis/apps/v1/namespaces/n/replicasets/r") == "None"
    assert level(policy, "GET", "/api/v1/namespaces/n/configmaps/special") == "Request"
    assert level(policy, "GET", "/api/v1/namespaces/n/configmaps/other") == "None"
    assert level(policy, "GET", "/api/v1/nodes/n1") == "Metadata"  # cluster-scoped: namespace ""
    assert level(policy, "POST", "/api/v1/namespaces/kube-system/configmaps") == "Request"
    assert level(policy, "GET", "/api/v1/namespaces/kube-system/configmaps") == "None"
    assert level(policy, "GET", "/healthz/etcd") == "Metadata"
    assert level(policy, "GET", "/version") == "Metadata"
    assert level(policy, "GET", "/versions") == "None"


def test_omit_stages_are_the_union_of_policy_and_rule() -> None:
    policy = parse_policy(
        HEAD
        + """omitStages: [RequestReceived]
omitManagedFields: true
rules:
- level: Metadata
  verbs: [get]
  omitStages: [ResponseStarted]
  omitManagedFields: false
- level: Metadata
"""
    )
    get = policy.evaluate(attrs("GET", "/api/v1/namespaces/n/pods/p"))
    assert get.omit_stages == {"RequestReceived", "ResponseStarted"} and not get.omit_managed_fields
    create = policy.evaluate(attrs("POST", "/api/v1/namespaces/n/pods"))
    assert create.omit_stages == {"RequestReceived"} and create.omit_managed_fields


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (HEAD + "rules: []\n", "loaded illegal policy with 0 rules"),
        (HEAD, "loaded illegal policy with 0 rules"),
        (
            "apiVersion: audit.k8s.io/v2\nkind: Policy\nrules: [{level: None}]\n",
            "unknown group version field audit.k8s.io/v2, Kind=Policy in policy",
        ),
        ("", "failed decoding: Object 'Kind' is missing in ''"),
        (
            HEAD + "rules: [{level: Everything}]\n",
            'rules[0].level: Unsupported value: "Everything": supported values: "None", "Metadata", "Request", "RequestResponse"',
        ),
        (HEAD + "rules: [{verbs: [get]}]\n", "rules[0].level: Required value"),
        (
            HEAD + "rules: [{level: None, nonResourceURLs: [healthz]}]\n",
            "rules[0].nonResourceURLs[0]: Invalid value: \"healthz\": non-resource URL rules must begin with a '/' character",
        ),
        (
            HEAD + "rules: [{level: None, nonResourceURLs: ['/a*b']}]\n",
            "rules[0].nonResourceURLs[0]: Invalid value: \"/a*b\": non-resource URL wildcards '*' must be the final character of the rule",
        ),
        (
            HEAD + "rules: [{level: None, nonResourceURLs: [/x], namespaces: [a]}]\n",
            'rules[0].nonResourceURLs: Invalid value: ["/x"]: rules cannot apply to both regular resources and non-resource URLs',
        ),
        (
            HEAD + "omitStages: [Later]\nrules: [{level: None}]\n",
            'omitStages[0]: Invalid value: "Later": allowed stages are Panic,RequestReceived,ResponseComplete,ResponseStarted',
        ),
        (
            HEAD + "rules: [{level: Foo}, {}]\n",
            '[rules[0].level: Unsupported value: "Foo": supported values: "None", "Metadata", "Request", '
            '"RequestResponse", rules[1].level: Required value]',
        ),
    ],
)
def test_policy_errors_read_as_upstreams(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(text)
    assert str(err.value) == message


def test_build_auditor_names_the_file_and_refuses_negative_rotation(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(PolicyError) as err:
        build_auditor(AuditOptions(missing, str(tmp_path / "audit.log")))
    assert (
        str(err.value)
        == f'loading audit policy file: failed to read file path "{missing}": No such file or directory'
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(HEAD + "rules: []\n")
    with pytest.raises(PolicyError) as err:
        build_auditor(AuditOptions(bad, str(tmp_path / "audit.log")))
    assert str(err.value) == f"loading audit policy file: loaded illegal policy with 0 rules: from file {bad}"
    with pytest.raises(PolicyError, match="--audit-log-maxbackup -1 can't be a negative number"):
        build_auditor(AuditOptions(bad, "x", max_backups=-1))
    assert not build_auditor(AuditOptions()).enabled


def test_log_file_rotates_at_max_size_keeping_max_backups(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "audit.log"
    out = LogFile(str(path), Rotation(max_size_mb=1, max_backups=2))
    out.open()
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    line = b"x" * (300 * 1024 - 1) + b"\n"
    for _ in range(14):  # 3 lines a file: 4 rotations
        out.write_lines([line])
    out.close()
    backups = sorted(p.name for p in path.parent.iterdir() if p != path)
    assert len(backups) == 2, backups
    assert all(p.startswith("audit-") and p.endswith(".log") for p in backups)
    sizes = [os.path.getsize(path.parent / p) for p in backups]
    assert sizes == [3 * len(line)] * 2 and path.stat().st_size == 2 * len(line)
    with pytest.raises(OSError, match="exceeds maximum file size"):
        big = LogFile(str(tmp_path / "big.log"), Rotation(max_size_mb=1))
        big.open()
        big.write_lines([b"y" * (1024 * 1024 + 1)])


def test_backup_names_as_lumberjack() -> None:
    from datetime import UTC, datetime

    when = datetime(2026, 12, 1, 18, 0, 0, 123456, tzinfo=UTC)
    assert backup_name(Path("/var/log/audit.log"), when) == Path("/var/log/audit-2026-12-01T18-00-00.123.log")


def test_the_stacks_policy_keeps_writes_and_never_a_secrets_body() -> None:
    from pykubelet.rig.auditlog import STACK_POLICY

    assert level(STACK_POLICY, "GET", "/api/v1/namespaces/n/pods/p") == "None"
    assert (
        level(STACK_POLICY, "PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1")
        == "None"
    )
    assert level(STACK_POLICY, "POST", "/api/v1/namespaces/n/secrets") == "Metadata"
    assert level(STACK_POLICY, "PATCH", "/api/v1/namespaces/n/configmaps/c") == "Metadata"
    assert level(STACK_POLICY, "POST", "/api/v1/namespaces/n/pods/p/binding") == "RequestResponse"
    assert (
        level(STACK_POLICY, "PATCH", "/apis/apps/v1/namespaces/n/deployments/d/status") == "RequestResponse"
    )
    assert level(STACK_POLICY, "POST", "/api/v1/namespaces/n/events") == "Metadata"
    policy = parse_policy(STACK_POLICY)
    assert policy.evaluate(attrs("POST", "/api/v1/namespaces/n/pods")).omit_stages == {"RequestReceived"}


async def test_a_handler_that_fails_is_audited_at_stage_panic(tmp_path: Path) -> None:
    """The Panic stage (upstream's recover in WithAudit), on an aiohttp app with the auditor's middleware
    and the server's error translation stood in by a few lines."""
    import json

    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from controlplane.apiserver import audit

    policy = tmp_path / "p.yaml"
    policy.write_text(HEAD + "rules: [{level: Metadata}]\n")
    log = tmp_path / "audit.log"
    auditor = build_auditor(AuditOptions(policy, str(log)))

    @web.middleware
    async def server_errors(request: web.Request, handler):  # type: ignore[no-untyped-def]
        audit.authenticated(request, ALICE)
        try:
            return await handler(request)
        except Exception as exc:
            audit.panicked(request, exc)
            return web.json_response({"kind": "Status", "code": 500}, status=500)

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("boom")

    app = web.Application(middlewares=[auditor.middleware, server_errors])
    app.on_response_prepare.append(auditor.on_prepare)
    app.router.add_get("/api/v1/namespaces/n/pods/p", broken)
    await auditor.start()
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/api/v1/namespaces/n/pods/p", headers={"Audit-ID": "panic-1"})
        assert resp.status == 500 and resp.headers["Audit-Id"] == "panic-1"
        other = await client.get("/api/v1/namespaces/n/pods/p")
        assert len(other.headers["Audit-Id"]) == 36  # a new UUID
    await auditor.stop()
    events = [json.loads(line) for line in log.read_text().splitlines()]
    mine = [e for e in events if e["auditID"] == "panic-1"]
    assert [e["stage"] for e in mine] == ["RequestReceived", "Panic"]
    assert mine[1]["responseStatus"] == {
        "metadata": {},
        "status": "Failure",
        "message": "APIServer panic'd: RuntimeError: boom",
        "reason": "InternalError",
        "code": 500,
    }


class _SlowDisk(LogFile):
    """A real file behind a disk that takes 20 ms per write."""

    def write_lines(self, lines: list[bytes]) -> None:
        import time

        time.sleep(0.02)
        super().write_lines(lines)


@pytest.mark.parametrize("mode", ["blocking", "batch"])
async def test_blocking_mode_loses_no_event_under_a_slow_disk(tmp_path: Path, mode: str) -> None:
    import asyncio

    from controlplane.apiserver.audit.backend import BufferedBackend

    path = tmp_path / "audit.log"
    backend = BufferedBackend(_SlowDisk(str(path), Rotation()), buffer_size=5, max_batch=4, mode=mode)
    await backend.start()

    async def request(i: int) -> None:  # what the audit middleware does for one request
        backend.process({"auditID": str(i)})
        await backend.room()

    await asyncio.gather(*(request(i) for i in range(200)))
    await backend.stop()
    written = [line for line in path.read_text().splitlines() if line]
    if mode == "blocking":
        assert backend.dropped == 0 and len(written) == 200
        assert {json.loads(line)["auditID"] for line in written} == {str(i) for i in range(200)}
    else:  # upstream's batch backend: a full buffer drops, and counts it
        assert backend.dropped > 0 and len(written) == 200 - backend.dropped


def test_truncation_drops_the_objects_then_the_event() -> None:
    from controlplane.apiserver.audit.backend import TRUNCATED, truncate

    small = {"auditID": "a", "stage": "ResponseComplete"}
    assert truncate(small, 1000) is small
    big = {**small, "requestObject": {"data": "x" * 5000}, "responseObject": {"data": "y" * 5000}}
    cut = truncate(big, 1000)
    assert cut is not None and "requestObject" not in cut and "responseObject" not in cut
    assert cut["annotations"] == {TRUNCATED: "true"} and cut["auditID"] == "a"
    assert truncate({**big, "annotations": {"k": "v" * 5000}}, 1000) is None  # still too big: dropped


def test_truncation_is_set_per_backend(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(HEAD + "rules:\n- level: Metadata\n")
    auditor = build_auditor(AuditOptions(policy, str(tmp_path / "audit.log"), log_truncate_at=2048))
    assert auditor.backend is not None
    assert [b.truncate_at for b in auditor.backend.backends] == [2048]
    assert auditor.backend.failures() == {"buffered": 0, "log": 0, "truncate": 0}
