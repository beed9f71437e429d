"""A real exec credential plugin for tests: a shell script that prints the ExecCredential a file holds
and records how it was run (runs, args and env, KUBERNETES_EXEC_INFO, whether stdin was a terminal), a
$KUBECONFIG list whose first file holds the exec user and the second the cluster, and a service account
token from the real API server's TokenRequest to hand out."""

from __future__ import annotations

import datetime
import json
import os
import textwrap
from pathlib import Path

import yaml

from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from pykubelet.rig.apiserver import ApiServer

V1 = "client.authentication.k8s.io/v1"


def plugin_kubeconfig(tmp_path: Path, admin: Path, **exec_options: object) -> str:
    """The plugin script, its state folder, and a KUBECONFIG list: [exec user + context, admin's]."""
    state = tmp_path / "state"
    state.mkdir()
    script = tmp_path / "bin" / "get-token"
    script.parent.mkdir()
    script.write_text(
        textwrap.dedent(
            """\
            #!/bin/sh
            n=$(cat "$STATE/runs" 2>/dev/null || echo 0)
            echo $((n + 1)) > "$STATE/runs"
            printf '%s' "$KUBERNETES_EXEC_INFO" > "$STATE/exec-info"
            echo "$* $GREETING" > "$STATE/args"
            [ -t 0 ] && echo terminal > "$STATE/stdin" || echo none > "$STATE/stdin"
            cat "$STATE/credential"
            """
        )
    )
    script.chmod(0o755)
    admin_doc = yaml.safe_load(admin.read_text())
    admin_doc["clusters"][0]["cluster"]["extensions"] = [
        {"name": "client.authentication.k8s.io/exec", "extension": {"audience": "eks"}}
    ]
    (tmp_path / "admin.kubeconfig").write_text(yaml.safe_dump(admin_doc))
    user = {
        "exec": {
            "apiVersion": V1,
            "command": "./bin/get-token",  # relative with a "/": against this file's folder
            "args": ["token", "--cluster", "c1"],
            "env": [{"name": "STATE", "value": str(state)}, {"name": "GREETING", "value": "hello"}],
            "interactiveMode": "Never",
            **exec_options,
        }
    }
    (tmp_path / "exec.kubeconfig").write_text(
        yaml.safe_dump(
            {
                "current-context": "cloud",
                "users": [{"name": "cloud-user", "user": user}],
                "contexts": [{"name": "cloud", "context": {"cluster": "pykubelet", "user": "cloud-user"}}],
            }
        )
    )
    return os.pathsep.join([str(tmp_path / "exec.kubeconfig"), str(tmp_path / "admin.kubeconfig")])


def credential(state: Path, token: str, expires: datetime.datetime | None = None, version: str = V1) -> None:
    status: dict[str, str] = {"token": token}
    if expires is not None:
        status["expirationTimestamp"] = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    (state / "credential").write_text(
        json.dumps({"apiVersion": version, "kind": "ExecCredential", "status": status})
    )


async def service_account_token(apiserver: ApiServer, namespace: str, cluster_role: str = "") -> str:
    """A token of `namespace`/robot (bound to `cluster_role` when given)."""
    async with KubeClient(load_kubeconfig(apiserver.kubeconfig)) as admin:
        try:
            await admin.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
            await admin.create(
                f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "robot"}}
            )
        except ApiError as err:
            if not err.already_exists:
                raise
        if cluster_role:
            binding = {
                "metadata": {"name": f"{namespace}-robot"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": cluster_role,
                },
                "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": namespace}],
            }
            await admin.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        }
        out = await admin.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/robot/token", request)
    return out["status"]["token"]
