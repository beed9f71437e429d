"""Fuzzing the decoders and what stands behind them: no body, in any format, for any served kind, may
make the server answer 500. First the decode-and-strategy pipeline in process (many examples, fast),
then the real server over HTTPS with generated create, replace and patch bodies."""

from __future__ import annotations

import copy
import http.client
import json
import os
import ssl
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.apiserver import fieldselect, typed
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.handlers import RestHandler
from controlplane.apiserver.kinds import KINDS, Kind
from controlplane.apiserver.meta import metadata
from controlplane.apiserver.options import SCHEMA as DELETE_OPTIONS
from controlplane.apiserver.request import decode
from controlplane.storage.cache import encode
from pykubelet.rig.apiserver import ApiServer
from tests.controlplane import fuzzing

SETTINGS = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))
# FUZZ_SCALE=10 for a longer hunt than the default pass.
SCALE = int(os.environ.get("FUZZ_SCALE", "1"))
STORED = [k for k in KINDS if k.stored]


def _ids(kind: Kind) -> str:
    return f"{kind.group or 'core'}.{kind.kind}"


# --- in process: decoding, then the kind's strategy -------------------------------------------------


def _pipeline(kind: Kind, content_type: str, body: bytes) -> None:
    """What a create does before the store, with the registry's order; only client errors may come out."""
    try:
        obj = RestHandler.check_kind(decode(body, content_type), kind.kind, kind.api_version)
        typed.decode(obj, kind.schema)
    except (ApiError, typed.DecodeError) as err:
        assert not isinstance(err, ApiError) or err.code < 500, err.message
        return
    stored = kind.to_storage(obj)
    metadata(stored).setdefault("name", "x")
    before = copy.deepcopy(stored)
    try:
        kind.default(stored, True)
        kind.prepare_for_create(stored)
        typed.fill_required(stored, kind.storage_schema)
        kind.validate(stored)
        kind.validate_update(stored, before, "")
        kind.default(before, False)
        kind.validate_update(before, stored, "status")
    except ApiError as err:
        assert err.code < 500, err.message
    encode(stored).decode()  # JSON and UTF-8 all the way
    kind.cells(stored)
    fieldselect.slim_view(stored)
    encode(kind.from_storage(stored))


@pytest.mark.parametrize("kind", KINDS, ids=_ids)
def test_decoding_and_strategies_never_fail_on_any_body(kind: Kind) -> None:
    @settings(SETTINGS, max_examples=150 * SCALE)
    @given(fuzzing.bodies(kind))
    def check(request: tuple[str, bytes]) -> None:
        _pipeline(kind, *request)

    check()


# --- the real server ---------------------------------------------------------------------------------

NAMESPACE = "fuzz"
SEEDS: dict[str, dict] = {
    "Namespace": {"metadata": {"name": "seeded"}},
    "Node": {"metadata": {"name": "seeded"}, "status": {"capacity": {"cpu": "2", "pods": "110"}}},
    "Pod": {"metadata": {"name": "seeded"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
    "PodTemplate": {
        "metadata": {"name": "seeded"},
        "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
    },
    "Event": {"metadata": {"name": "seeded"}, "involvedObject": {"kind": "Pod", "name": "p"}},
    "ConfigMap": {"metadata": {"name": "seeded", "finalizers": ["example.com/x"]}, "data": {"a": "1"}},
    "Secret": {"metadata": {"name": "seeded"}, "data": {"a": "MQ=="}},
    "ServiceAccount": {"metadata": {"name": "seeded"}},
    "Service": {"metadata": {"name": "seeded"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}},
    "Endpoints": {"metadata": {"name": "seeded"}, "subsets": [{"addresses": [{"ip": "10.0.0.1"}]}]},
    "Deployment": {
        "metadata": {"name": "seeded"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
    },
    "ControllerRevision": {"metadata": {"name": "seeded"}, "revision": 1, "data": {"x": [1]}},
    "PriorityClass": {"metadata": {"name": "seeded"}, "value": 10},
    "Lease": {"metadata": {"name": "seeded"}, "spec": {"holderIdentity": "h"}},
    "RuntimeClass": {"metadata": {"name": "seeded"}, "handler": "runc"},
    "EndpointSlice": {
        "metadata": {"name": "seeded"},
        "addressType": "IPv4",
        "ports": [{"port": 80}],
        "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": True}}],
    },
}
SEEDS["ReplicaSet"] = SEEDS["Deployment"]


class Http:
    """One kept-alive HTTPS connection with the admin's certificate."""

    def __init__(self, server: ApiServer) -> None:
        context = ssl.create_default_context(cafile=str(server.ca_cert))
        context.load_cert_chain(server.data_dir / "pki" / "admin.crt", server.data_dir / "pki" / "admin.key")
        self.args = ("127.0.0.1", server.port)
        self.context = context
        self.conn = http.client.HTTPSConnection(*self.args, context=context, timeout=30)

    def request(
        self, method: str, path: str, body: bytes | None = None, content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        for attempt in (1, 2):
            try:
                self.conn.request(
                    method, path, body, {"Content-Type": content_type, "Accept": "application/json"}
                )
                response = self.conn.getresponse()
                return response.status, response.read()
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = http.client.HTTPSConnection(*self.args, context=self.context, timeout=30)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def collection(kind: Kind) -> str:
    base = f"/apis/{kind.group}/{kind.version}" if kind.group else "/api/v1"
    return f"{base}/namespaces/{NAMESPACE}/{kind.plural}" if kind.namespaced else f"{base}/{kind.plural}"


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Http]:
    with ApiServer(tmp_path_factory.mktemp("fuzz")) as server:
        conn = Http(server)
        assert (
            conn.request(
                "POST", "/api/v1/namespaces", json.dumps({"metadata": {"name": NAMESPACE}}).encode()
            )[0]
            == 201
        )
        for kind in STORED:
            seed = SEEDS.get(kind.kind)
            if seed is not None and kind.storage_bucket == "":
                body = {"apiVersion": kind.api_version, "kind": kind.kind, **seed}
                status, answer = conn.request("POST", collection(kind), json.dumps(body).encode())
                assert status == 201, answer
        yield conn


def _no_500(status: int, answer: bytes, what: str) -> None:
    if status == 500 and _typed_patch_failure(answer):
        return  # upstream's own answer to an apply naming an undeclared field: a 500 without a reason
    assert status < 500, f"{what}: {status} {answer[:2000]!r}"


def _typed_patch_failure(answer: bytes) -> bool:
    try:
        status = json.loads(answer)
    except ValueError:
        return False
    return "reason" not in status and status.get("message", "").startswith(
        "failed to create typed patch object ("
    )


@pytest.mark.integration
@pytest.mark.parametrize("kind", KINDS, ids=_ids)
def test_the_server_answers_every_generated_body_without_a_500(http_server: Http, kind: Kind) -> None:
    path = collection(kind)
    seeded = kind.stored and kind.kind in SEEDS and kind.storage_bucket == ""

    @settings(SETTINGS, max_examples=40 * SCALE)
    @given(fuzzing.bodies(kind), st.sampled_from(["POST", "PUT"] if seeded else ["POST"]))
    def check(request: tuple[str, bytes], method: str) -> None:
        content_type, body = request
        target = path if method == "POST" else f"{path}/seeded"
        status, answer = http_server.request(method, target, body, content_type)
        _no_500(status, answer, f"{method} {target} {content_type} {body[:500]!r}")

    check()


@pytest.mark.integration
@pytest.mark.parametrize("kind", [k for k in STORED if k.kind in SEEDS and k.storage_bucket == ""], ids=_ids)
def test_the_server_answers_every_generated_patch_without_a_500(http_server: Http, kind: Kind) -> None:
    target = f"{collection(kind)}/seeded"

    subresources = [""] + [f"/{s.name}" for s in kind.subresources if s.name in ("status", "scale")]

    @settings(SETTINGS, max_examples=40 * SCALE)
    @given(fuzzing.patches(kind), st.sampled_from(subresources))
    def check(patch: tuple[str, bytes], sub: str) -> None:
        content_type, body = patch
        query = "?fieldManager=fuzz" if content_type.startswith("application/apply") else ""
        status, answer = http_server.request("PATCH", target + sub + query, body, content_type)
        _no_500(status, answer, f"PATCH {target}{sub} {content_type} {body[:500]!r}")

    check()


@pytest.mark.integration
def test_delete_options_bodies_never_make_a_500(http_server: Http) -> None:
    target = f"{collection(KINDS[2])}/absent"  # DELETE decodes the options before it looks the object up

    @settings(SETTINGS, max_examples=60 * SCALE)
    @given(
        st.one_of(
            fuzzing.for_type(DELETE_OPTIONS).map(lambda o: json.dumps(o).encode()),
            fuzzing.ANY_JSON.map(lambda o: json.dumps(o).encode()),
            st.binary(max_size=20),
        )
    )
    def check(body: bytes) -> None:
        status, answer = http_server.request("DELETE", target, body)
        _no_500(status, answer, f"DELETE {target} {body[:500]!r}")

    check()
