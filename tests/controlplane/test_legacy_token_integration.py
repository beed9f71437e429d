"""The legacy token controller on the real API server and controller manager, through the real kubectl: a
hand-made `kubernetes.io/service-account-token` Secret is filled (token, ca.crt, namespace, the account's
UID), its token authenticates as the account, and dies at once with its Secret; a Secret whose account
goes is deleted; the type's annotation is required (upstream's 422)."""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.conftest import KUBECTL, Kubectl

pytestmark = pytest.mark.integration

SECRET = """apiVersion: v1
kind: Secret
type: kubernetes.io/service-account-token
metadata:
  name: %s
  annotations: {kubernetes.io/service-account.name: robot}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    api = ApiServer(tmp_path_factory.mktemp("legacy") / "server", controllers=True)
    api.start()
    yield api
    api.stop()
    assert not api.running


def filled(kubectl: Kubectl, name: str, timeout: float = 60) -> dict:
    """The Secret once the controller has filled it (kubectl wait watches for it)."""
    kubectl(
        "wait",
        f"secret/{name}",
        "--for=jsonpath={.data.namespace}=" + base64.b64encode(b"default").decode(),
        f"--timeout={int(timeout)}s",
    )
    return json.loads(kubectl("get", "secret", name, "-o", "json"))


def whoami(kubectl: Kubectl, token: str) -> tuple[int, str]:
    proc = kubectl.run(
        "auth", "whoami", "--token", token, "-o", "jsonpath={.status.userInfo.username}", check=False
    )
    return proc.returncode, proc.stdout + proc.stderr


def gone(kubectl: Kubectl, name: str, timeout: float = 60) -> None:
    kubectl("wait", f"secret/{name}", "--for=delete", f"--timeout={int(timeout)}s")


def test_a_hand_made_token_secret_is_filled_and_authenticates(server: ApiServer, tmp_path: Path) -> None:
    kubectl = Kubectl(server.kubeconfig, tmp_path)
    kubectl("create", "serviceaccount", "robot")
    account = json.loads(kubectl("get", "serviceaccount", "robot", "-o", "json"))
    kubectl("apply", "-f", "-", input=SECRET % "robot-token")
    secret = filled(kubectl, "robot-token")
    assert (
        secret["metadata"]["annotations"]["kubernetes.io/service-account.uid"] == account["metadata"]["uid"]
    )
    assert base64.b64decode(secret["data"]["ca.crt"]) == server.ca_cert.read_bytes()
    token = base64.b64decode(secret["data"]["token"]).decode()
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims == {
        "iss": "kubernetes/serviceaccount",
        "kubernetes.io/serviceaccount/namespace": "default",
        "kubernetes.io/serviceaccount/secret.name": "robot-token",
        "kubernetes.io/serviceaccount/service-account.name": "robot",
        "kubernetes.io/serviceaccount/service-account.uid": account["metadata"]["uid"],
        "sub": "system:serviceaccount:default:robot",
    }
    assert whoami(kubectl, token) == (0, "system:serviceaccount:default:robot")
    # Upstream's legacy-token tracking: the Secret is labelled with the day its token was last used.
    day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    kubectl(
        "wait",
        "secret/robot-token",
        f"--for=jsonpath={{.metadata.labels.kubernetes\\.io/legacy-token-last-used}}={day}",
        "--timeout=30s",
    )

    # The Secret goes: its token is refused at once, cached success or not.
    kubectl("delete", "secret", "robot-token")
    code, out = whoami(kubectl, token)
    assert code == 1 and "Unauthorized" in out

    # The account goes: its token Secrets are deleted.
    kubectl("apply", "-f", "-", input=SECRET % "robot-token-2")
    second = base64.b64decode(filled(kubectl, "robot-token-2")["data"]["token"]).decode()
    assert whoami(kubectl, second)[0] == 0
    kubectl("delete", "serviceaccount", "robot")
    assert whoami(kubectl, second)[0] == 1  # at once: the account is gone
    gone(kubectl, "robot-token-2")


def test_the_account_annotation_is_required(server: ApiServer, tmp_path: Path) -> None:
    kubectl = Kubectl(server.kubeconfig, tmp_path)
    proc = kubectl.run(
        "apply",
        "-f",
        "-",
        input="apiVersion: v1\nkind: Secret\ntype: kubernetes.io/service-account-token\n"
        "metadata: {name: orphan}\n",
        check=False,
    )
    assert proc.returncode == 1
    assert (
        'Secret "orphan" is invalid: metadata.annotations[kubernetes.io/service-account.name]: Required value'
        in proc.stderr
    )
