"""The Node authorizer and NodeRestriction as a cluster in mode Node,RBAC enforces them, through kubectl
with the node's identity (the administrator impersonates `system:node:<node>` in `system:nodes`, which is
what the Node authorizer judges): a node reads the secrets of its own pods only, may not change another
Node, and may not give itself node-restriction.kubernetes.io/ labels."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException


def node_kubectl(kubeconfig, node: str, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "--as",
            f"system:node:{node}",
            "--as-group",
            "system:nodes",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def admin(kubeconfig, *args: str, input: str | None = None) -> str:  # type: ignore[no-untyped-def]
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def pod_with_secret(name: str, node: str, secret: str, image: str) -> str:
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  nodeName: {node}
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - {{name: c, image: {image}, command: [sleep, "3600"], volumeMounts: [{{name: s, mountPath: /s}}]}}
  volumes:
  - {{name: s, secret: {{secretName: {secret}}}}}
"""


@pytest.fixture
def other_node(kubeconfig):  # type: ignore[no-untyped-def]
    """A second Node object (no kubelet behind it)."""
    name = f"e2e-other-{uuid.uuid4().hex[:6]}"
    admin(kubeconfig, "apply", "-f", "-", input=f"apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\n")
    yield name
    admin(kubeconfig, "delete", "node", name, "--wait=false")


def test_a_node_reads_only_its_own_pods_secrets(kubeconfig, namespace, node_name, image, other_node) -> None:  # type: ignore[no-untyped-def]
    for secret in ("mine", "theirs"):
        admin(kubeconfig, "-n", namespace, "create", "secret", "generic", secret, "--from-literal=k=v")
    admin(
        kubeconfig,
        "-n",
        namespace,
        "apply",
        "-f",
        "-",
        input=pod_with_secret("mine", node_name, "mine", image),
    )
    admin(
        kubeconfig,
        "-n",
        namespace,
        "apply",
        "-f",
        "-",
        input=pod_with_secret("theirs", other_node, "theirs", image),
    )
    own = node_kubectl(
        kubeconfig, node_name, "-n", namespace, "get", "secret", "mine", "-o", "jsonpath={.data.k}"
    )
    assert own.returncode == 0 and own.stdout == "dg==", own.stderr
    theirs = node_kubectl(kubeconfig, node_name, "-n", namespace, "get", "secret", "theirs")
    assert theirs.returncode != 0
    assert theirs.stderr.strip().splitlines()[-1] == (
        f'Error from server (Forbidden): secrets "theirs" is forbidden: User "system:node:{node_name}" cannot get '
        f'resource "secrets" in API group "" in the namespace "{namespace}": no relationship found between node '
        f"'{node_name}' and this object"
    )
    listing = node_kubectl(kubeconfig, node_name, "-n", namespace, "get", "secrets")
    assert listing.returncode != 0 and "No Object name found" in listing.stderr


def test_a_node_cannot_patch_another_node(kubeconfig, node_name, other_node) -> None:  # type: ignore[no-untyped-def]
    # kubectl patch (and label) read the Node first, which the Node authorizer already refuses ...
    proc = node_kubectl(
        kubeconfig,
        node_name,
        "patch",
        "node",
        other_node,
        "--type=merge",
        "-p",
        '{"metadata":{"labels":{"example.com/x":"y"}}}',
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (
        f'Error from server (Forbidden): nodes "{other_node}" is forbidden: User "system:node:{node_name}" cannot get '
        f"resource \"nodes\" in API group \"\" at the cluster scope: node '{node_name}' cannot read '{other_node}', "
        "only its own Node object"
    )
    # ... and the PATCH itself, which it lets through, NodeRestriction refuses.
    api = config.new_client_from_config(config_file=str(kubeconfig))
    api.set_default_header("Impersonate-User", f"system:node:{node_name}")
    api.set_default_header("Impersonate-Group", "system:nodes")
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(api).patch_node(other_node, {"metadata": {"labels": {"example.com/x": "y"}}})
    assert err.value.status == 403
    assert json.loads(err.value.body)["message"] == (
        f'nodes "{other_node}" is forbidden: node "{node_name}" is not allowed to modify node "{other_node}"'
    )


def test_a_node_cannot_label_itself_node_restriction(kubeconfig, node_name) -> None:  # type: ignore[no-untyped-def]
    proc = node_kubectl(
        kubeconfig, node_name, "label", "node", node_name, "node-restriction.kubernetes.io/x=y"
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (
        f'Error from server (Forbidden): nodes "{node_name}" is forbidden: is not allowed to modify labels: '
        "node-restriction.kubernetes.io/x"
    )
    # What it may set, it sets.
    proc = node_kubectl(
        kubeconfig, node_name, "label", "node", node_name, "example.com/e2e=yes", "--overwrite"
    )
    assert proc.returncode == 0, proc.stderr
    admin(kubeconfig, "label", "node", node_name, "example.com/e2e-")
    labels = admin(kubeconfig, "get", "node", node_name, "-o", "jsonpath={.metadata.labels}")
    assert "node-restriction.kubernetes.io/x" not in labels
