"""A kubeconfig `exec` credential plugin against the real API server, as client-go runs one (how EKS,
GKE, AKS and OIDC kubeconfigs authenticate): the plugin is a real script that prints the ExecCredential
a file holds (a service account token the server accepts, from TokenRequest) and records how it was run.
The kubeconfig is a $KUBECONFIG list: the first file holds the exec user and its context, the second
(the server's admin kubeconfig) the cluster, merged as kubectl merges them."""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from pykubelet.rig.apiserver import ApiServer
from tests.kubeclient.execplugin import V1, credential, plugin_kubeconfig, service_account_token

pytestmark = pytest.mark.integration
REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
REVIEW_BODY = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("exec-api")) as server:
        yield server


async def whoami(client: KubeClient) -> str:
    return (await client.create(REVIEW, REVIEW_BODY))["status"]["userInfo"]["username"]


async def test_the_plugin_runs_once_per_credential_and_again_after_a_401(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    token = await service_account_token(apiserver, "exec-a")
    config = load_kubeconfig(plugin_kubeconfig(tmp_path, apiserver.kubeconfig, provideClusterInfo=True))
    state = tmp_path / "state"
    credential(state, "not-a-token")
    async with KubeClient(config, max_attempts=1) as client:
        with pytest.raises(ApiError) as err:
            await whoami(client)
        assert err.value.status == 401
        credential(state, token, datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1))
        # The 401 spent the cached credential: the plugin runs again and its new token is accepted.
        assert await whoami(client) == "system:serviceaccount:exec-a:robot"
        assert await whoami(client) == "system:serviceaccount:exec-a:robot"
        assert (state / "runs").read_text().strip() == "2"  # cached until it expires
    assert (state / "args").read_text().strip() == "token --cluster c1 hello"
    assert (state / "stdin").read_text().strip() == "none"  # interactiveMode Never: no stdin
    info = json.loads((state / "exec-info").read_text())
    admin = yaml.safe_load(apiserver.kubeconfig.read_text())["clusters"][0]["cluster"]
    assert info == {
        "kind": "ExecCredential",
        "apiVersion": V1,
        "spec": {
            "cluster": {
                "server": admin["server"],
                "certificate-authority-data": admin["certificate-authority-data"],
                "config": {"audience": "eks"},
            },
            "interactive": False,
        },
    }
    assert base64.b64decode(info["spec"]["cluster"]["certificate-authority-data"]).startswith(b"-----BEGIN")


async def test_an_expired_credential_is_fetched_again_and_bad_plugins_get_client_gos_errors(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    token = await service_account_token(apiserver, "exec-b")
    config = load_kubeconfig(plugin_kubeconfig(tmp_path, apiserver.kubeconfig))
    state = tmp_path / "state"
    credential(state, token, datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=5))
    async with KubeClient(config, max_attempts=1) as client:
        await whoami(client)
        await whoami(client)
        assert (state / "runs").read_text().strip() == "2"  # expired: every request runs it again
        assert "cluster" not in json.loads((state / "exec-info").read_text())["spec"]  # no provideClusterInfo
        credential(state, token, version="client.authentication.k8s.io/v1beta1")
        with pytest.raises(
            ApiError, match=f"exec plugin is configured to use API version {V1}, plugin returned version"
        ):
            await whoami(client)
        (state / "credential").unlink()  # cat fails: the plugin exits 1
        with pytest.raises(ApiError, match="executable .*get-token failed with exit code 1"):
            await whoami(client)


async def test_a_missing_plugin_names_itself_and_its_install_hint(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    listed = plugin_kubeconfig(
        tmp_path,
        apiserver.kubeconfig,
        command="gke-gcloud-auth-plugin-absent",
        installHint="Install it with gcloud.",
    )
    async with KubeClient(load_kubeconfig(listed), max_attempts=1) as client:
        with pytest.raises(ApiError) as err:
            await whoami(client)
    assert err.value.message == (
        "getting credentials: exec: executable gke-gcloud-auth-plugin-absent not found\n\nInstall it with gcloud."
    )


async def test_a_plugin_may_give_a_client_certificate(apiserver: ApiServer, tmp_path: Path) -> None:
    """Status with clientCertificateData/clientKeyData and no token: the TLS handshake proves who the
    user is (a certificate of the cluster's CA for exec-cert-user here)."""
    issued = apiserver.client_kubeconfig("exec-cert-user", ("devs",), tmp_path / "issued" / "kubeconfig")
    user = yaml.safe_load(issued.read_text())["users"][0]["user"]
    config = load_kubeconfig(plugin_kubeconfig(tmp_path, apiserver.kubeconfig))
    status = {
        "clientCertificateData": base64.b64decode(user["client-certificate-data"]).decode(),
        "clientKeyData": base64.b64decode(user["client-key-data"]).decode(),
    }
    (tmp_path / "state" / "credential").write_text(
        json.dumps({"apiVersion": V1, "kind": "ExecCredential", "status": status})
    )
    async with KubeClient(config, max_attempts=1) as client:
        assert await whoami(client) == "exec-cert-user"
        assert await whoami(client) == "exec-cert-user"
    assert (tmp_path / "state" / "runs").read_text().strip() == "1"
