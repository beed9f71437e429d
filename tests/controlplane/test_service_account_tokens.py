"""Service-account tokens against the real API server (a subprocess): TokenRequest and its claims, the
bound-token checks of bearer authentication, TokenReview, the OpenID discovery documents, the
ServiceAccount admission plugin, and every kind of bad token getting a bare 401."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controlplane.apiserver.satokens import DEFAULT_ISSUER
from controlplane.apiserver.tokencache import SUCCESS_TTL
from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.conftest import Kubectl

pytestmark = pytest.mark.integration  # real servers, etcd or processes

YEAR = 24 * 365 * 3600


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("sa-api"), service_account_admission=True) as s:
        yield s


@pytest.fixture(scope="module")
def api(server: ApiServer) -> Iterator[client.ApiClient]:
    with server.api_client() as a:
        yield a


@pytest.fixture(scope="module")
def v1(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def ns(v1: client.CoreV1Api) -> str:
    name = f"sa-{uuid.uuid4().hex[:8]}"
    v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # No controller manager runs here: the test makes the accounts a namespace would get.
    v1.create_namespaced_service_account(
        name, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default"))
    )
    return name


def raw(
    server: ApiServer, method: str, path: str, token: str | None = None, body: Any = None
) -> tuple[int, Any, Any]:
    """(status, JSON body, headers) of a request with a bearer token (or none)."""
    context = ssl.create_default_context(cafile=str(server.ca_cert))
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null"), resp.headers
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null"), err.headers


def whoami(server: ApiServer, token: str) -> tuple[int, Any]:
    status, body, _ = raw(
        server,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        token,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return status, body


def refused_at_once(server: ApiServer, token: str) -> None:
    """The first request after the bound object went is refused (401), although the token's success is
    still in the authenticator's cache (SUCCESS_TTL): the bound objects are looked up on every request."""
    assert SUCCESS_TTL > 5  # the cached success has not run out yet
    status, body = whoami(server, token)
    assert status == 401, body


def request_token(server: ApiServer, ns: str, account: str, **spec: Any) -> tuple[int, Any, Any]:
    return _admin(
        server,
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )


def _admin(server: ApiServer, method: str, path: str, body: Any = None) -> tuple[int, Any, Any]:
    """As the cluster admin (the kubeconfig's client certificate)."""
    import yaml

    kc = yaml.safe_load(server.kubeconfig.read_text())
    user = kc["users"][0]["user"]
    d = server.data_dir / "test-admin"
    d.mkdir(exist_ok=True)
    (d / "c.crt").write_bytes(base64.b64decode(user["client-certificate-data"]))
    (d / "c.key").write_bytes(base64.b64decode(user["client-key-data"]))
    context = ssl.create_default_context(cafile=str(server.ca_cert))
    context.load_cert_chain(d / "c.crt", d / "c.key")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        server.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as resp:
            return resp.status, json.loads(resp.read()), resp.headers
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), err.headers


def claims_of(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})


def make_pod(
    v1: client.CoreV1Api, ns: str, name: str, account: str = "default", node: str = "", **spec: Any
) -> Any:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"serviceAccountName": account, "containers": [{"name": "c", "image": "busybox"}], **spec},
    }
    if node:
        body["spec"]["nodeName"] = node
    return v1.create_namespaced_pod(ns, body)


def jwks_keys(server: ApiServer, api: client.ApiClient) -> dict[str, Any]:
    status, data, headers = _admin(server, "GET", "/openid/v1/jwks")
    assert status == 200 and headers["Content-Type"] == "application/jwk-set+json"
    assert headers["Cache-Control"] == "public, max-age=3600"
    return data


def test_token_request_claims_identity_and_invalidation(
    server: ApiServer, api: client.ApiClient, v1: client.CoreV1Api, ns: str
) -> None:
    v1.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{ns}"}})
    node = v1.read_node(f"node-{ns}")
    sa = v1.create_namespaced_service_account(
        ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="robot"))
    )
    pod = make_pod(v1, ns, "p", "robot", node=f"node-{ns}", automountServiceAccountToken=False)
    status, body, _ = request_token(
        server, ns, "robot", boundObjectRef={"kind": "Pod", "apiVersion": "v1", "name": "p"}
    )
    assert status == 201, body
    assert body["spec"]["audiences"] == [DEFAULT_ISSUER] and body["spec"]["expirationSeconds"] == 3600
    assert body["metadata"]["name"] == "robot" and body["metadata"]["namespace"] == ns
    token = body["status"]["token"]
    header = jwt.get_unverified_header(token)
    claims = claims_of(token)
    assert set(header) == {"alg", "kid"} and header["alg"] == "RS256"
    assert claims["iss"] == DEFAULT_ISSUER and claims["sub"] == f"system:serviceaccount:{ns}:robot"
    assert (
        claims["aud"] == [DEFAULT_ISSUER]
        and claims["exp"] - claims["iat"] == 3600
        and claims["nbf"] == claims["iat"]
    )
    assert uuid.UUID(claims["jti"])
    assert claims["kubernetes.io"] == {
        "namespace": ns,
        "serviceaccount": {"name": "robot", "uid": sa.metadata.uid},
        "pod": {"name": "p", "uid": pod.metadata.uid},
        "node": {"name": node.metadata.name, "uid": node.metadata.uid},
    }
    # The discovery keys verify it, as any OIDC consumer would.
    keys = jwks_keys(server, api)["keys"]
    assert [k["kid"] for k in keys] == [header["kid"]] and keys[0]["kty"] == "RSA" and keys[0]["use"] == "sig"
    verified = jwt.decode(token, jwt.PyJWK(keys[0]).key, algorithms=["RS256"], audience=DEFAULT_ISSUER)
    assert verified == claims

    status, review = whoami(server, token)
    assert status == 201
    user = review["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{ns}:robot" and user["uid"] == sa.metadata.uid
    assert user["groups"] == [
        "system:serviceaccounts",
        f"system:serviceaccounts:{ns}",
        "system:authenticated",
    ]
    assert user["extra"] == {
        "authentication.kubernetes.io/credential-id": [f"JTI={claims['jti']}"],
        "authentication.kubernetes.io/node-name": [node.metadata.name],
        "authentication.kubernetes.io/node-uid": [node.metadata.uid],
        "authentication.kubernetes.io/pod-name": ["p"],
        "authentication.kubernetes.io/pod-uid": [pod.metadata.uid],
    }
    reviews = client.AuthenticationV1Api(api)
    good = reviews.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
    assert good.status.authenticated and good.status.user.username == user["username"]
    assert good.status.audiences == [DEFAULT_ISSUER] and good.status.user.extra == user["extra"]

    # The pod goes: its token stops working at once, though its success was cached a moment ago.
    v1.delete_namespaced_pod("p", ns, grace_period_seconds=0)
    refused_at_once(server, token)
    # ... and a new pod of the same name (a new UID) does not bring it back.
    make_pod(v1, ns, "p", "robot", node=f"node-{ns}", automountServiceAccountToken=False)
    refused_at_once(server, token)
    gone = reviews.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
    assert (
        gone.status.authenticated is False
        and gone.status.error == "[invalid bearer token, service account token has been invalidated]"
    )


def test_token_request_validation_and_binding_errors(
    server: ApiServer, v1: client.CoreV1Api, ns: str
) -> None:
    v1.create_namespaced_service_account(
        ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="robot"))
    )
    status, body, _ = request_token(server, ns, "robot", expirationSeconds=599)
    assert status == 422 and body["message"] == (
        'TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 599: '
        "may not specify a duration less than 10 minutes"
    )
    status, body, _ = request_token(server, ns, "robot", expirationSeconds=(1 << 32) + 1)
    assert status == 422 and "may not specify a duration larger than 2^32 seconds" in body["message"]
    status, body, _ = request_token(server, ns, "ghost")
    assert (status, body["message"]) == (404, 'serviceaccounts "ghost" not found')
    make_pod(v1, ns, "other")  # runs as `default`
    status, body, _ = request_token(
        server, ns, "robot", boundObjectRef={"kind": "Pod", "apiVersion": "v1", "name": "other"}
    )
    assert (status, body["message"]) == (
        400,
        'cannot bind token for serviceaccount "robot" to pod running with different serviceaccount name.',
    )
    status, body, _ = request_token(
        server,
        ns,
        "default",
        boundObjectRef={"kind": "Pod", "apiVersion": "v1", "name": "other", "uid": "not-it"},
    )
    assert status == 409 and body["message"] == (
        'Operation cannot be fulfilled on Pod "other": the UID in the bound object reference (not-it) does not match '
        "the UID in record. The object might have been deleted and then recreated"
    )
    status, body, _ = request_token(
        server, ns, "robot", boundObjectRef={"kind": "Deployment", "apiVersion": "apps/v1", "name": "d"}
    )
    assert (status, body["message"]) == (400, "cannot bind token to object of type apps/v1, Kind=Deployment")
    status, body, _ = request_token(
        server, ns, "robot", boundObjectRef={"kind": "Pod", "apiVersion": "v1", "name": "absent"}
    )
    assert (status, body["message"]) == (404, 'pods "absent" not found')
    status, body, _ = _admin(
        server,
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/robot/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {"name": "x"}},
    )
    assert (
        status == 422
        and 'metadata.name: Invalid value: "x": must match the service account name if specified'
        in body["message"]
    )
    # A secret-bound token dies with its secret.
    secret = v1.create_namespaced_secret(
        ns, client.V1Secret(metadata=client.V1ObjectMeta(name="s"), string_data={"k": "v"})
    )
    status, body, _ = request_token(
        server, ns, "robot", boundObjectRef={"kind": "Secret", "apiVersion": "v1", "name": "s"}
    )
    assert status == 201
    token = body["status"]["token"]
    assert claims_of(token)["kubernetes.io"]["secret"] == {"name": "s", "uid": secret.metadata.uid}
    assert whoami(server, token)[0] == 201
    v1.delete_namespaced_secret("s", ns)
    refused_at_once(server, token)


def test_admission_lifetime_is_extended_for_pod_bound_tokens(
    server: ApiServer, v1: client.CoreV1Api, ns: str
) -> None:
    make_pod(v1, ns, "p")
    bound = {"kind": "Pod", "apiVersion": "v1", "name": "p"}
    before = time.time()
    status, body, _ = request_token(server, ns, "default", expirationSeconds=3607, boundObjectRef=bound)
    assert status == 201
    claims = claims_of(body["status"]["token"])
    assert (
        claims["exp"] - claims["iat"] == YEAR and claims["kubernetes.io"]["warnafter"] == claims["iat"] + 3607
    )
    # The status says 3607 s: a kubelet refreshes it as if it expired then.
    expires = (
        time.mktime(time.strptime(body["status"]["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
        - time.timezone
    )
    assert before + 3607 - 2 <= expires <= time.time() + 3607 + 1
    for spec in (
        {"expirationSeconds": 3607},
        {"expirationSeconds": 3607, "boundObjectRef": bound, "audiences": ["vault"]},
    ):
        status, body, _ = request_token(server, ns, "default", **spec)
        claims = claims_of(body["status"]["token"])
        assert claims["exp"] - claims["iat"] == 3607 and "warnafter" not in claims["kubernetes.io"]


def _sign(
    server: ApiServer, claims: dict[str, Any], key: Any = None, algorithm: str = "RS256", **headers: Any
) -> str:
    if key is None:
        key = serialization.load_pem_private_key((server.data_dir / "pki" / "sa.key").read_bytes(), None)
    return jwt.encode(claims, key, algorithm=algorithm, headers=headers or None)


def test_bad_tokens_get_a_bare_401(server: ApiServer, v1: client.CoreV1Api, ns: str) -> None:
    status, body, _ = request_token(server, ns, "default")
    good = body["status"]["token"]
    assert whoami(server, good)[0] == 201
    claims = claims_of(good)
    now = int(time.time())
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    head, payload, signature = good.split(".")
    status, body, _ = request_token(server, ns, "default", audiences=["vault"])
    wrong_audience = body["status"]["token"]
    unsigned = jwt.encode(claims, None, algorithm="none")
    public_pem = (server.data_dir / "pki" / "sa.pub").read_bytes()
    hs256 = base64.urlsafe_b64encode(json.dumps({"alg": "HS256"}).encode()).rstrip(b"=").decode()
    bad = {
        "malformed": "not-a-token",
        "truncated": good[: len(good) // 2],
        "no signature": f"{head}.{payload}.",
        "alg none": unsigned,
        "another key": _sign(server, claims, other_key),
        "HS256 with the public key": _hmac(hs256, payload, public_pem),
        "expired": _sign(server, {**claims, "exp": now - 120, "iat": now - 800, "nbf": now - 800}),
        "not yet valid": _sign(server, {**claims, "nbf": now + 600}),
        "wrong audience": wrong_audience,
        "another issuer": _sign(server, {**claims, "iss": "https://elsewhere"}),
        "tampered": f"{head}.{base64.urlsafe_b64encode(json.dumps({**claims, 'sub': 'system:admin'}).encode()).rstrip(b'=').decode()}.{signature}",
        "unknown account uid": _sign(
            server,
            {
                **claims,
                "kubernetes.io": {
                    **claims["kubernetes.io"],
                    "serviceaccount": {"name": "default", "uid": "x"},
                },
            },
        ),
    }
    for why, token in bad.items():
        status, body = whoami(server, token)
        assert status == 401, why
        assert body == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }, why
    log = (server.data_dir / "apiserver.log").read_text()
    assert "event=authentication_failed" in log and "service account token has expired" in log
    for token in [*bad.values(), good]:
        for part in (token, token.split(".")[-1]):
            assert len(part) < 20 or part not in log


def _hmac(header: str, payload: str, secret: bytes) -> str:
    import hashlib
    import hmac

    mac = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def test_token_review(server: ApiServer, api: client.ApiClient, ns: str) -> None:
    reviews = client.AuthenticationV1Api(api)
    status, body, _ = request_token(server, ns, "default", audiences=["vault", "other"])
    token = body["status"]["token"]
    review = reviews.create_token_review(
        client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=["vault"]))
    )
    assert review.status.authenticated and review.status.audiences == ["vault"]
    api_review = reviews.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
    assert (
        api_review.status.authenticated is False
        and "is invalid for the target audiences" in api_review.status.error
    )
    garbage = reviews.create_token_review(
        client.V1TokenReview(spec=client.V1TokenReviewSpec(token="garbage"))
    )
    assert garbage.status.authenticated is False and garbage.status.error == "invalid bearer token"
    with pytest.raises(ApiException) as err:
        reviews.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token="")))
    assert err.value.status == 400 and "token is required" in json.loads(err.value.body)["message"]


def test_openid_discovery_document(server: ApiServer, api: client.ApiClient) -> None:
    status, data, headers = _admin(server, "GET", "/.well-known/openid-configuration")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert data == {
        "issuer": DEFAULT_ISSUER,
        "jwks_uri": f"{DEFAULT_ISSUER}/openid/v1/jwks",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
    }
    # Anonymous callers are not among those system:service-account-issuer-discovery is bound to.
    assert raw(server, "GET", "/openid/v1/jwks")[0] == 403
    key = server.data_dir / "pki" / "sa.key"
    assert key.stat().st_mode & 0o777 == 0o600 and b"RSA PRIVATE KEY" in key.read_bytes()
    assert (
        serialization.load_pem_public_key((server.data_dir / "pki" / "sa.pub").read_bytes()).key_size == 2048
    )


def test_service_account_admission(server: ApiServer, v1: client.CoreV1Api, ns: str) -> None:
    with pytest.raises(ApiException) as err:
        make_pod(v1, ns, "nobody", "robot")
    assert err.value.status == 403 and json.loads(err.value.body)["message"] == (
        f'pods "nobody" is forbidden: error looking up service account {ns}/robot: serviceaccount "robot" not found'
    )
    v1.create_namespaced_service_account(
        ns, {"metadata": {"name": "robot"}, "imagePullSecrets": [{"name": "reg"}]}
    )
    pod = v1.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "p"},
            "spec": {
                "serviceAccountName": "robot",
                "initContainers": [{"name": "init", "image": "busybox"}],
                "containers": [
                    {"name": "a", "image": "busybox"},
                    {
                        "name": "own",
                        "image": "busybox",
                        "volumeMounts": [
                            {"name": "mine", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
                        ],
                    },
                ],
                "volumes": [{"name": "mine", "emptyDir": {}}],
            },
        },
    )
    spec = pod.to_dict()["spec"]
    [volume] = [v for v in pod.spec.volumes if v.name.startswith("kube-api-access-")]
    assert len(volume.name) == len("kube-api-access-") + 5
    got = client.ApiClient().sanitize_for_serialization(volume)
    assert got == {
        "name": volume.name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
        },
    }
    mount = {
        "name": volume.name,
        "read_only": True,
        "mount_path": "/var/run/secrets/kubernetes.io/serviceaccount",
    }
    assert [m for m in spec["init_containers"][0]["volume_mounts"] if m["name"] == volume.name][
        0
    ].items() >= mount.items()
    assert [m for m in spec["containers"][0]["volume_mounts"] if m["name"] == volume.name][
        0
    ].items() >= mount.items()
    assert [m["name"] for m in spec["containers"][1]["volume_mounts"]] == ["mine"]
    assert spec["service_account"] == "robot" and spec["image_pull_secrets"] == [{"name": "reg"}]

    v1.create_namespaced_service_account(
        ns, {"metadata": {"name": "quiet"}, "automountServiceAccountToken": False}
    )
    quiet = make_pod(v1, ns, "quiet", "quiet")
    assert not any(v.name.startswith("kube-api-access-") for v in quiet.spec.volumes or [])
    loud = make_pod(v1, ns, "loud", "quiet", automountServiceAccountToken=True)  # the pod's word wins
    assert any(v.name.startswith("kube-api-access-") for v in loud.spec.volumes)
    off = make_pod(v1, ns, "off", automountServiceAccountToken=False)
    assert not any(v.name.startswith("kube-api-access-") for v in off.spec.volumes or [])

    v1.create_namespaced_service_account(
        ns,
        {
            "metadata": {
                "name": "strict",
                "annotations": {"kubernetes.io/enforce-mountable-secrets": "true"},
            },
            "secrets": [{"name": "allowed"}],
        },
    )
    make_pod(v1, ns, "ok", "strict", volumes=[{"name": "s", "secret": {"secretName": "allowed"}}])
    with pytest.raises(ApiException) as err:
        make_pod(v1, ns, "no", "strict", volumes=[{"name": "s", "secret": {"secretName": "other"}}])
    assert err.value.status == 403 and json.loads(err.value.body)["message"] == (
        'pods "no" is forbidden: volume with secret.secretName="other" is not allowed because service account '
        "strict does not reference that secret"
    )


def test_pods_wait_briefly_for_the_default_account(server: ApiServer, v1: client.CoreV1Api) -> None:
    ns = f"sa-{uuid.uuid4().hex[:8]}"
    v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    late = threading.Timer(
        0.5, lambda: v1.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
    )
    late.start()
    try:
        pod = make_pod(v1, ns, "early")  # the default account arrives while the create waits for it
    finally:
        late.join()
    assert pod.spec.service_account_name == "default"
    with pytest.raises(ApiException) as err:
        make_pod(v1, f"{ns}", "x", "never")  # any other account is not waited for
    assert err.value.status == 403


def test_kubectl_create_token(server: ApiServer, v1: client.CoreV1Api, ns: str, tmp_path: Path) -> None:
    import shutil

    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    kubectl = Kubectl(server.kubeconfig, tmp_path)
    pod = make_pod(v1, ns, "p")
    token = kubectl("create", "token", "default", "-n", ns, "--duration=10m").strip()
    claims = claims_of(token)
    assert claims["exp"] - claims["iat"] == 600 and claims["sub"] == f"system:serviceaccount:{ns}:default"
    assert whoami(server, token)[0] == 201
    bound = kubectl(
        "create",
        "token",
        "default",
        "-n",
        ns,
        "--audience",
        "vault",
        "--bound-object-kind",
        "Pod",
        "--bound-object-name",
        "p",
        "--bound-object-uid",
        pod.metadata.uid,
    ).strip()
    claims = claims_of(bound)
    assert claims["aud"] == ["vault"] and claims["kubernetes.io"]["pod"] == {
        "name": "p",
        "uid": pod.metadata.uid,
    }
    failed = kubectl.run("create", "token", "default", "-n", ns, "--duration=1m", check=False)
    assert failed.returncode != 0 and "may not specify a duration less than 10 minutes" in failed.stderr


def test_max_token_expiration_shortens_with_a_warning(tmp_path: Path) -> None:
    with (
        ApiServer(tmp_path / "max", extra_args=["--service-account-max-token-expiration", "2h"]) as s,
        s.api_client() as a,
    ):
        v1 = client.CoreV1Api(a)
        v1.create_namespaced_service_account("default", {"metadata": {"name": "robot"}})
        status, body, headers = request_token(s, "default", "robot", expirationSeconds=86400)
        assert status == 201 and body["spec"]["expirationSeconds"] == 7200
        claims = claims_of(body["status"]["token"])
        assert claims["exp"] - claims["iat"] == 7200
        assert headers["Warning"] == '299 - "requested expiration of 86400 seconds shortened to 7200 seconds"'


def test_busybox_wget_can_talk_to_the_server(server: ApiServer) -> None:
    """busybox's own TLS (what a pod's wget uses, with no openssl beside it) sends no
    signature_algorithms; the server still completes the handshake, as kube-apiserver does."""
    import subprocess

    busybox = Path("/bin/busybox")
    if not busybox.exists():
        pytest.skip("busybox-static is not installed")
    proc = subprocess.run(
        [str(busybox), "wget", "-q", "-O", "-", "--no-check-certificate", f"{server.url}/version"],
        env={"PATH": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["major"] == "1"


def _key_pair(directory: Path, name: str) -> tuple[Path, Path, str]:
    from cryptography.hazmat.primitives.asymmetric import rsa

    from controlplane.apiserver.sakeys import key_id

    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key, pub = directory / f"{name}.key", directory / f"{name}.pub"
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    pub.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return key, pub, key_id(private.public_key())


def test_signing_key_rotation_with_several_verification_keys(tmp_path: Path) -> None:
    """Upstream's rotation: a new signing key, the old public key kept in --service-account-key-file
    (tokens it signed still work, the JWKS lists both), then dropped (its tokens are refused)."""
    old_key, old_pub, old_kid = _key_pair(tmp_path, "old")
    new_key, new_pub, new_kid = _key_pair(tmp_path, "new")

    def server_with(signing: Path, *verifying: Path) -> ApiServer:
        args = ["--service-account-signing-key-file", str(signing)]
        for path in verifying:
            args += ["--service-account-key-file", str(path)]
        return ApiServer(tmp_path / "api", extra_args=args)

    with server_with(old_key, old_pub) as s, s.api_client() as a:
        client.CoreV1Api(a).create_namespaced_service_account("default", {"metadata": {"name": "robot"}})
        status, body, _ = request_token(s, "default", "robot")
        assert status == 201
        old_token = body["status"]["token"]
        assert jwt.get_unverified_header(old_token)["kid"] == old_kid
        assert whoami(s, old_token)[0] == 201

    with server_with(new_key, new_pub, old_pub) as s:
        assert whoami(s, old_token)[0] == 201  # signed by the retired key, still verified
        status, body, _ = request_token(s, "default", "robot")
        new_token = body["status"]["token"]
        assert jwt.get_unverified_header(new_token)["kid"] == new_kid
        assert whoami(s, new_token)[0] == 201
        status, keys, _ = _admin(s, "GET", "/openid/v1/jwks")
        assert status == 200 and [k["kid"] for k in keys["keys"]] == [new_kid, old_kid]

    with server_with(new_key, new_pub) as s:
        assert whoami(s, old_token)[0] == 401
        assert whoami(s, new_token)[0] == 201
        status, keys, _ = _admin(s, "GET", "/openid/v1/jwks")
        assert [k["kid"] for k in keys["keys"]] == [new_kid]
