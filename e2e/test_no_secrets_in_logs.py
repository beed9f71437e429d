"""No token, key or secret value reaches a log line of the project's own stack (the API server, the
controller manager, the scheduler, the node agent), after a run that used them every way a cluster
does: a Secret in a pod's env and volume, the pod's projected token (fetched and written by the agent),
`kubectl create token`, TokenReview of good and bad tokens, bearer requests the API refuses.
Needs the project's own stack (its log files); skipped elsewhere."""

from __future__ import annotations

import base64
import secrets
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from e2e.test_service_account_tokens import log_with, whoami

pytestmark = pytest.mark.integration


def _key_lines(pem: bytes) -> list[str]:
    """The base64 lines of a PEM key: any of them in a log would be a leak."""
    return [line for line in pem.decode().splitlines() if line and not line.startswith("-----")]


def test_no_secret_reaches_a_log(stack, kube, api_client, namespace, node_name, image, kubeconfig):
    value = f"s3cret-{secrets.token_hex(12)}"
    kube.create_namespaced_secret(
        namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="creds"), string_data={"password": value}),
    )
    script = 'cat /var/run/secrets/kubernetes.io/serviceaccount/token; echo; test "$(cat /creds/password)" = "$PASSWORD" && echo same; exec sleep 3600'
    kube.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="user"),
            spec=client.V1PodSpec(
                node_name=node_name,
                termination_grace_period_seconds=1,
                volumes=[
                    client.V1Volume(name="creds", secret=client.V1SecretVolumeSource(secret_name="creds"))
                ],
                containers=[
                    client.V1Container(
                        name="main",
                        image=image,
                        command=["sh", "-c", script],
                        env=[
                            client.V1EnvVar(
                                name="PASSWORD",
                                value_from=client.V1EnvVarSource(
                                    secret_key_ref=client.V1SecretKeySelector(name="creds", key="password")
                                ),
                            )
                        ],
                        volume_mounts=[client.V1VolumeMount(name="creds", mount_path="/creds")],
                    )
                ],
            ),
        ),
    )
    log = log_with(kube, namespace, "user", "same")
    pod_token = log.splitlines()[0]
    env = {
        "KUBECONFIG": str(kubeconfig),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(kubeconfig.parent),
    }
    made = subprocess.run(
        ["kubectl", "create", "token", "default", "-n", namespace],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    cli_token = made.stdout.strip()
    vault_token = (
        client.CoreV1Api(api_client)
        .create_namespaced_service_account_token(
            "default",
            namespace,
            client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=["vault"])),
        )
        .status.token
    )
    forged = cli_token[:-10] + "AAAAAAAAAA"
    assert whoami(kubeconfig, pod_token)[0] == 201 and whoami(kubeconfig, cli_token)[0] == 201
    for refused in (forged, vault_token, "not-a-token-" + secrets.token_hex(8)):
        assert whoami(kubeconfig, refused)[0] == 401
    reviews = client.AuthenticationV1Api(api_client)
    for token in (pod_token, forged):
        reviews.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
    kube.delete_namespaced_pod("user", namespace)

    api_dir = Path(stack.apiserver.data_dir)
    logs = {
        path.name: path.read_text(errors="replace")
        for path in (
            api_dir / "apiserver.log",
            api_dir / "controller-manager.log",
            api_dir / "scheduler.log",
            Path(stack.config.state_dir) / "agent" / "agent.log",
        )
        if path.exists()
    }
    assert set(logs) >= {"apiserver.log", "agent.log", "controller-manager.log"}
    assert (
        "event=authentication_failed" in logs["apiserver.log"]
    )  # the refusals were logged, without the tokens
    kubeconfig_user = yaml.safe_load(Path(kubeconfig).read_text())["users"][0]["user"]
    forbidden = {
        "the secret's value": [value, base64.b64encode(value.encode()).decode()],
        "a token": [
            t for token in (pod_token, cli_token, vault_token, forged) for t in (token, token.split(".")[2])
        ],
        "the signing key": _key_lines((api_dir / "pki" / "sa.key").read_bytes()),
        "the admin's key": _key_lines(base64.b64decode(kubeconfig_user["client-key-data"])),
    }
    for name, text in logs.items():
        for what, needles in forbidden.items():
            for needle in needles:
                assert needle not in text, f"{what} is in {name}"
