"""An operator's first day, through kubectl only: install a CustomResourceDefinition, wait for it to be
established, create custom objects (defaults filled in, unknown fields dropped, invalid ones refused
naming the field, a CEL rule refusing with its message), read them with the printer columns, scale
one through its scale subresource, and uninstall the CRD, which takes its objects with it."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import yaml

from e2e.waiting import wait_for


def run(kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    proc = run(kubeconfig, *args, stdin=stdin)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"backups.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "backups", "singular": "backup", "kind": "Backup", "shortNames": ["bk"]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "Schedule", "type": "string", "jsonPath": ".spec.schedule"},
                        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["schedule"],
                                    "x-kubernetes-validations": [
                                        {"rule": "self.replicas <= 5", "message": "at most five replicas"}
                                    ],
                                    "properties": {
                                        "schedule": {"type": "string"},
                                        "replicas": {"type": "integer", "default": 1},
                                        "retention": {"type": "string", "default": "7d"},
                                    },
                                },
                                "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                            },
                        }
                    },
                }
            ],
        },
    }


def backup(group: str, name: str, namespace: str, **spec: Any) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": f"{group}/v1",
            "kind": "Backup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedule": "@daily", **spec},
        }
    )


def test_custom_resource_lifecycle(kubeconfig: Path, namespace: str) -> None:
    group = f"e2e{uuid.uuid4().hex[:8]}.example.com"
    name = f"backups.{group}"
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(crd(group)))
    try:
        kubectl(kubeconfig, "wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
        # served once established (discovery may lag a moment behind the condition)
        wait_for(
            lambda: run(kubeconfig, "get", name, "-n", namespace).returncode == 0, timeout=30, what="served"
        )

        kubectl(
            kubeconfig,
            "apply",
            "--validate=false",
            "-f",
            "-",
            stdin=backup(group, "nightly", namespace, extra="dropped"),
        )
        obj = json.loads(kubectl(kubeconfig, "get", name, "nightly", "-n", namespace, "-o", "json"))
        assert obj["spec"] == {"schedule": "@daily", "replicas": 1, "retention": "7d"}

        bad = run(kubeconfig, "apply", "-f", "-", stdin=backup(group, "bad", namespace, replicas="two"))
        assert bad.returncode != 0
        assert (
            'spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"'
            in bad.stderr
        )
        ruled = run(kubeconfig, "apply", "-f", "-", stdin=backup(group, "big", namespace, replicas=9))
        assert ruled.returncode != 0 and "at most five replicas" in ruled.stderr

        table = kubectl(kubeconfig, "get", "bk", "-n", namespace).splitlines()
        assert table[0].split() == ["NAME", "SCHEDULE", "REPLICAS"]
        assert table[1].split() == ["nightly", "@daily", "1"]

        kubectl(kubeconfig, "scale", f"{name}/nightly", "-n", namespace, "--replicas=3")
        replicas = kubectl(
            kubeconfig, "get", name, "nightly", "-n", namespace, "-o", "jsonpath={.spec.replicas}"
        )
        assert replicas == "3"
    finally:
        kubectl(kubeconfig, "delete", "crd", name, "--wait=true", "--timeout=120s")
    gone = run(kubeconfig, "get", "crd", name)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_a_crd_group_version_is_a_local_apiservice(kubeconfig: Path) -> None:
    """kube-aggregator's crdRegistrationController: each served version of a CRD is an APIService
    `<version>.<group>` (Local, Available, automanaged), removed with the CRD."""
    group = f"e2e{uuid.uuid4().hex[:8]}.example.com"
    name, apiservice = f"backups.{group}", f"v1.{group}"
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(crd(group)))
    try:
        kubectl(kubeconfig, "wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
        kubectl(kubeconfig, "wait", "--for=condition=Available", f"apiservice/{apiservice}", "--timeout=60s")
        obj = json.loads(kubectl(kubeconfig, "get", "apiservice", apiservice, "-o", "json"))
        assert obj["metadata"]["labels"]["kube-aggregator.kubernetes.io/automanaged"] == "true"
        assert (obj["spec"]["group"], obj["spec"]["version"]) == (group, "v1")
        assert (obj["spec"]["groupPriorityMinimum"], obj["spec"]["versionPriority"]) == (1000, 100)
        assert obj["spec"].get("service") is None
        row = kubectl(kubeconfig, "get", "apiservice", apiservice, "--no-headers").split()
        assert row[1:3] == ["Local", "True"]
    finally:
        kubectl(kubeconfig, "delete", "crd", name, "--wait=true", "--timeout=120s")
    wait_for(
        lambda: run(kubeconfig, "get", "apiservice", apiservice).returncode != 0,
        timeout=60,
        what="the APIService removed",
    )
