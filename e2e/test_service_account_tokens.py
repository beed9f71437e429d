"""Service-account credentials as a pod meets them, through the API and kubectl only: the
kube-api-access volume the ServiceAccount admission plugin adds, the files the node projects into it
(upstream's modes), a process in the pod calling the API with its own token, the token dying with its
pod, `kubectl create token`, TokenReview, wrong audiences and the issuer's discovery documents.

Authorization is RBAC's, as on a kubeadm or kind cluster: an unbound service account may not list its
namespace's pods (403) but may ask who it is (SelfSubjectReview, which every authenticated user may
create); bound to `view`, the same token may list them.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
import shutil
import socket
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml
from kubernetes import client
from kubernetes import config as kconfig
from kubernetes.client.exceptions import ApiException

from e2e.waiting import wait_for

pytestmark = pytest.mark.integration

MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
WHOAMI = '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}'


def api_endpoint(kube: Any) -> tuple[str, int]:
    """Where pods reach the API server: the `default/kubernetes` Endpoints. A single-machine cluster
    advertises its loopback address; its pods reach that host through their default gateway ("")."""
    ep = kube.read_namespaced_endpoints("kubernetes", "default")
    ip, port = ep.subsets[0].addresses[0].ip, ep.subsets[0].ports[0].port
    return ("" if ipaddress.ip_address(ip).is_loopback else ip), port


def caller_script(host: str, port: int) -> str:
    """Read the projected files, then call the API with them (busybox wget: the token and namespace go
    into the request; the CA is printed for the test to check against the server's certificate); then
    list the namespace's pods again each second (for a minute at most, each try given five seconds and
    printed) until the account may."""
    return f"""
D={MOUNT}
HOST={host or "$(ip route | awk '/^default/ {print $3}')"}
TOKEN=$(cat $D/token); NS=$(cat $D/namespace)
echo modes $(stat -L -c %a $D/token $D/ca.crt $D/namespace)
echo links $(for f in token ca.crt namespace; do readlink $D/$f; done)
echo "ns $NS"
echo "token $TOKEN"
echo "ca $(base64 $D/ca.crt | tr -d '\\n')"
echo "whoami $(wget -q -O - --no-check-certificate --header "Authorization: Bearer $TOKEN" \\
  --header "Content-Type: application/json" --post-data '{WHOAMI}' \\
  https://$HOST:{port}/apis/authentication.k8s.io/v1/selfsubjectreviews 2>/tmp/wget.err)"
echo "wget-errors $HOST $(tr '\\n' ' ' < /tmp/wget.err)"
echo "pods $(wget -S -O /dev/null --no-check-certificate --header "Authorization: Bearer $TOKEN" \\
  https://$HOST:{port}/api/v1/namespaces/$NS/pods 2>&1 | grep -o 'HTTP/1.1 [0-9]*' | head -1)"
echo done
n=0
while [ $n -lt 60 ]; do
  s=$(timeout 5 wget -S -O /dev/null --no-check-certificate --header "Authorization: Bearer $TOKEN" \
    https://$HOST:{port}/api/v1/namespaces/$NS/pods 2>&1 | grep -oE 'HTTP/1.1 [0-9]+|wget: .*' | head -1)
  echo "try-$n $s"
  [ "$s" = "HTTP/1.1 200" ] && break
  n=$((n+1)); sleep 1
done
echo "bound $s"
exec sleep 3600
"""


def log_with(kube: Any, namespace: str, pod: str, marker: str, timeout: float = 90) -> str:
    """The pod's log once it holds `marker`: the node answers 404 until it has seen the new pod (its
    kubelet's `pod "x" does not exist`) and 400 while the container has not started yet."""

    seen = [""]

    def read() -> str | None:
        try:
            text = kube.read_namespaced_pod_log(pod, namespace)
        except ApiException as err:
            if err.status in (400, 404):
                return None
            raise
        seen[0] = text
        return text if marker in text else None

    try:
        return wait_for(read, timeout=timeout, what=f"{marker!r} in the log of {pod}")
    except AssertionError as err:
        shown = [line for line in seen[0].splitlines() if not line.startswith(("token ", "ca "))]
        status = kube.read_namespaced_pod(pod, namespace).status
        states = [(c.name, c.restart_count, c.state) for c in status.container_statuses or []]
        raise AssertionError(
            f"{err}; pod {status.phase} {status.reason or ''} {states}; the log so far, token and CA"
            " left out:\n" + "\n".join(shown)
        ) from None


def fields_of(log: str) -> dict[str, str]:
    return {k: v for k, _, v in (line.partition(" ") for line in log.splitlines())}


def api_as(kubeconfig: Path, token: str) -> client.ApiClient:
    """The official client against the cluster's API with a bearer token instead of the kubeconfig's user."""
    cluster = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in cluster["contexts"] if c["name"] == cluster["current-context"])["context"]
    server = next(c for c in cluster["clusters"] if c["name"] == context["cluster"])["cluster"]
    configuration = client.Configuration()
    configuration.host = server["server"]
    if server.get("certificate-authority-data"):
        ca = kubeconfig.parent / ".e2e-ca.crt"
        ca.write_bytes(base64.b64decode(server["certificate-authority-data"]))
        configuration.ssl_ca_cert = str(ca)
    elif server.get("certificate-authority"):
        configuration.ssl_ca_cert = server["certificate-authority"]
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


def whoami(kubeconfig: Path, token: str) -> tuple[int, Any]:
    """(status, userInfo) of a SelfSubjectReview made with the token."""
    with api_as(kubeconfig, token) as api:
        try:
            review = client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview())
        except ApiException as err:
            return err.status, None
        return 201, review.status.user_info


def api_server(kubeconfig: Path) -> str:
    cluster = yaml.safe_load(kubeconfig.read_text())
    return cluster["clusters"][0]["cluster"]["server"]


def test_a_pod_calls_the_api_with_its_own_credentials(kube, namespace, node_name, image, kubeconfig):
    host, port = api_endpoint(kube)
    check_init = (
        f'test -s {MOUNT}/token && test -s {MOUNT}/ca.crt && test "$(cat {MOUNT}/namespace)" = {namespace}'
    )
    kube.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="caller"),
            spec=client.V1PodSpec(
                node_name=node_name,
                termination_grace_period_seconds=1,
                init_containers=[
                    client.V1Container(name="init", image=image, command=["sh", "-c", check_init])
                ],
                containers=[
                    client.V1Container(
                        name="main", image=image, command=["sh", "-c", caller_script(host, port)]
                    )
                ],
            ),
        ),
    )
    pod = kube.read_namespaced_pod("caller", namespace)
    [volume] = [v for v in pod.spec.volumes if v.name.startswith("kube-api-access-")]
    assert re.fullmatch(r"kube-api-access-[a-z0-9]{5}", volume.name)
    assert pod.spec.service_account_name == "default"
    sources = volume.projected.sources
    assert volume.projected.default_mode == 0o644
    assert (sources[0].service_account_token.path, sources[0].service_account_token.expiration_seconds) == (
        "token",
        3607,
    )
    assert sources[1].config_map.name == "kube-root-ca.crt" and sources[1].config_map.items[0].key == "ca.crt"
    assert sources[2].downward_api.items[0].field_ref.field_path == "metadata.namespace"
    for c in [*pod.spec.init_containers, *pod.spec.containers]:
        assert any(m.name == volume.name and m.mount_path == MOUNT and m.read_only for m in c.volume_mounts)

    log = log_with(kube, namespace, "caller", "done")
    got = fields_of(log)
    assert "modes" in got and "whoami" in got, log
    assert got["modes"] == "644 644 644" and got["links"] == "..data/token ..data/ca.crt ..data/namespace"
    assert got["ns"] == namespace
    # The CA is the cluster's (kube-root-ca.crt), and it verifies the API server's certificate.
    ca = base64.b64decode(got["ca"]).decode()
    assert ca == kube.read_namespaced_config_map("kube-root-ca.crt", namespace).data["ca.crt"]
    context = ssl.create_default_context(cadata=ca)
    url = urllib.parse.urlsplit(api_server(kubeconfig))
    with context.wrap_socket(
        socket.create_connection((url.hostname, url.port or 443), timeout=10), server_hostname=url.hostname
    ) as tls:
        assert tls.getpeercert()
    # From inside the pod, the API knows the caller as the pod's account, bound to the pod.
    assert got["whoami"], log
    user = json.loads(got["whoami"])["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{namespace}:default"
    assert (
        f"system:serviceaccounts:{namespace}" in user["groups"] and "system:authenticated" in user["groups"]
    )
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["caller"]
    assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [pod.metadata.uid]
    assert got["pods"] == "HTTP/1.1 403"  # authenticated, but RBAC grants an unbound account nothing
    # Bound to `view` in its namespace, the same token may list the pods.
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="default-view"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="view"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="default", namespace=namespace)],
        ),
    )
    bound = log_with(kube, namespace, "caller", "bound ", timeout=120)  # 60 tries of 1-6 s
    tries = [line for line in bound.splitlines() if line.startswith("try-")]
    assert fields_of(bound)["bound"] == "HTTP/1.1 200", tries

    token = got["token"]
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == f"system:serviceaccount:{namespace}:default"
    assert claims["kubernetes.io"]["pod"] == {"name": "caller", "uid": pod.metadata.uid}
    assert claims["kubernetes.io"]["node"]["name"] == node_name
    assert whoami(kubeconfig, token)[0] == 201
    # The pod goes, and its token with it (after the API server's token cache forgets it).
    kube.delete_namespaced_pod("caller", namespace)

    def gone() -> bool:
        try:
            kube.read_namespaced_pod("caller", namespace)
            return False
        except ApiException as err:
            return err.status == 404

    wait_for(gone, timeout=60, what="the pod to be gone")
    # kube-apiserver remembers a token that authenticated for 10 s (its token cache), so the refusal may
    # come that much after the pod is gone; a well-separated bound.
    wait_for(
        lambda: whoami(kubeconfig, token)[0] == 401, timeout=30, what="the dead pod's token to be refused"
    )


def test_kubectl_create_token_and_token_review(kube, api_client, namespace, kubeconfig):
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    env = {
        "KUBECONFIG": str(kubeconfig),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(kubeconfig.parent),
    }

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=60)

    made = kubectl("create", "token", "default", "-n", namespace, "--duration=10m")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 600
    status, user = whoami(kubeconfig, token)
    assert status == 201 and user.username == f"system:serviceaccount:{namespace}:default"
    sa = kube.read_namespaced_service_account("default", namespace)
    assert user.uid == sa.metadata.uid

    reviews = client.AuthenticationV1Api(api_client)
    good = reviews.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
    assert good.status.authenticated and good.status.user.username == user.username
    assert good.status.user.groups[:2] == ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    bad = reviews.create_token_review(
        client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token[:-8] + "AAAAAAAA"))
    )
    assert bad.status.authenticated is not True

    # A token for another audience is no good for the API, though it is a valid token for that audience.
    other = kubectl("create", "token", "default", "-n", namespace, "--audience", "vault.example")
    assert other.returncode == 0, other.stderr
    vault_token = other.stdout.strip()
    assert whoami(kubeconfig, vault_token)[0] == 401
    for_vault = reviews.create_token_review(
        client.V1TokenReview(spec=client.V1TokenReviewSpec(token=vault_token, audiences=["vault.example"]))
    )
    assert for_vault.status.authenticated and for_vault.status.audiences == ["vault.example"]
    # Bad input: unauthenticated, and the answer says nothing about why.
    for garbage in ("x", "a.b.c", token.rsplit(".", 1)[0] + "."):
        status, _ = whoami(kubeconfig, garbage)
        assert status == 401
    too_short = kubectl("create", "token", "default", "-n", namespace, "--duration=5m")
    assert too_short.returncode != 0 and "may not specify a duration less than 10 minutes" in too_short.stderr


def test_issuer_discovery_documents_verify_the_tokens(api_client, namespace, kubeconfig):
    config = _get_json(kubeconfig, "/.well-known/openid-configuration")
    jwks = _get_json(kubeconfig, "/openid/v1/jwks")
    assert (
        config["jwks_uri"].endswith("/openid/v1/jwks")
        and "RS256" in config["id_token_signing_alg_values_supported"]
    )
    token = (
        client.CoreV1Api(api_client)
        .create_namespaced_service_account_token(
            "default",
            namespace,
            client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=["vault.example"])),
        )
        .status.token
    )
    kid = jwt.get_unverified_header(token)["kid"]
    [key] = [k for k in jwks["keys"] if k["kid"] == kid]
    claims = jwt.decode(
        token, jwt.PyJWK(key).key, algorithms=["RS256"], audience="vault.example", issuer=config["issuer"]
    )
    assert claims["sub"] == f"system:serviceaccount:{namespace}:default"


def _get_json(kubeconfig: Path, path: str) -> Any:
    """GET a non-resource path with the kubeconfig's own credentials."""
    cfg = client.Configuration()
    kconfig.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        response = api.rest_client.pool_manager.request(
            "GET", cfg.host + path, headers=api.default_headers | _auth_headers(cfg)
        )
        assert response.status == 200, (path, response.status)
        return json.loads(response.data)


def _auth_headers(cfg: client.Configuration) -> dict[str, str]:
    token = (cfg.api_key or {}).get("authorization")
    return {"Authorization": token} if token else {}
