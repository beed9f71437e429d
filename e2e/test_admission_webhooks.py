"""Admission webhooks as any cluster runs them: a webhook server on the test host (HTTPS with its own
CA, the caBundle in the configuration, reached by `url`) labels the pods created in the test's namespace
and refuses those labelled deny=yes, with upstream's message. Skipped when the cluster's API server
cannot reach the test host (E2E_WEBHOOK_HOST names the address it can; by default this host's
default-route address)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubeclient.hostaddr import default_route_ip
from tests.controlplane.webhookserver import serving

pytestmark = pytest.mark.integration


def _hook(name: str, url: str, ca: str, namespace: str) -> dict:
    return {
        "name": name,
        "clientConfig": {"url": url, "caBundle": ca},
        "rules": [
            {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
        ],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    }


def _pod(name: str, image: str, labels: dict[str, str]) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(
            restart_policy="Never",
            termination_grace_period_seconds=1,
            containers=[client.V1Container(name="main", image=image, command=["sleep", "3600"])],
        ),
    )


def test_mutating_and_validating_webhooks(api_client, kube, namespace, image, tmp_path: Path) -> None:
    host = os.environ.get("E2E_WEBHOOK_HOST") or default_route_ip() or "127.0.0.1"
    adm = client.AdmissionregistrationV1Api(api_client)
    suffix = uuid.uuid4().hex[:8]
    with serving(tmp_path, host=host) as server:
        mutating = f"e2e-label-{suffix}"
        validating = f"e2e-deny-{suffix}"
        adm.create_mutating_webhook_configuration(
            {
                "metadata": {"name": mutating},
                "webhooks": [
                    _hook("label.e2e.example.com", server.url("/mutate"), server.ca_bundle, namespace)
                ],
            }
        )
        adm.create_validating_webhook_configuration(
            {
                "metadata": {"name": validating},
                "webhooks": [_hook("deny.e2e.example.com", server.url("/deny"), server.ca_bundle, namespace)],
            }
        )
        try:
            try:
                kube.create_namespaced_pod(namespace, _pod("probe", image, {"app": "probe"}), dry_run="All")
            except ApiException as err:
                if err.status == 500 and "failed calling webhook" in err.body:
                    pytest.skip(f"the API server cannot reach {host}: {json.loads(err.body)['message']}")
                raise
            created = kube.create_namespaced_pod(namespace, _pod("labelled", image, {"app": "a"}))
            assert created.metadata.labels == {"app": "a", "webhook": "seen"}
            assert kube.read_namespaced_pod("labelled", namespace).metadata.labels["webhook"] == "seen"
            with pytest.raises(ApiException) as err:
                kube.create_namespaced_pod(namespace, _pod("refused", image, {"deny": "yes"}))
            assert err.value.status == 403
            assert json.loads(err.value.body)["message"] == (
                'admission webhook "deny.e2e.example.com" denied the request: objects labelled deny=yes are refused'
            )
            reviews = [r for r in server.got("/mutate") if r.get("namespace") == namespace]
            assert {r["name"] for r in reviews} >= {"probe", "labelled", "refused"}
            assert all(r["kind"] == {"group": "", "version": "v1", "kind": "Pod"} for r in reviews)
            assert [r["dryRun"] for r in reviews if r["name"] == "probe"] == [True]
        finally:
            adm.delete_mutating_webhook_configuration(mutating)
            adm.delete_validating_webhook_configuration(validating)
