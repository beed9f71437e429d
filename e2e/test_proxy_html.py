"""pods/proxy, services/proxy and nodes/proxy as a browser meets them: a real pod serving an HTML page
(busybox httpd) read through the API server comes back with its absolute links leading through the
proxy path (upstream's proxy transport rewrites them; relative links and other hosts are left alone),
a plain-text file byte for byte, and HEAD (the official client's connect_head_*) answers with the
headers and no body, as upstream's proxy handler passes every method."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.waiting import wait_for

pytestmark = pytest.mark.integration

PAGE = (
    '<html><head><link rel="stylesheet" href="/style.css"></head><body>'
    '<a href="/docs/">docs</a> <a href="rel/x">rel</a> <a href="http://example.com/y">away</a>'
    '<img src="/img/logo.png"></body></html>'
)
SCRIPT = (
    "mkdir -p /www && printf '%s' \"$PAGE\" > /www/index.html && printf 'plain /style.css' > /www/note.txt"
    " && exec httpd -f -p 8080 -h /www"
)


def _raw(kubeconfig: Path, path: str) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "--raw", path],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done
    return done.stdout


def _rewritten(prefix: str) -> str:
    return (
        f'<html><head><link rel="stylesheet" href="{prefix}/style.css"></head><body>'
        f'<a href="{prefix}/docs/">docs</a> <a href="rel/x">rel</a> <a href="http://example.com/y">away</a>'
        f'<img src="{prefix}/img/logo.png"></body></html>'
    )


@pytest.fixture
def site(kube, namespace, node_name, image) -> str:
    kube.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="site", labels={"app": "site"}),
            spec=client.V1PodSpec(
                node_name=node_name,
                termination_grace_period_seconds=1,
                containers=[
                    client.V1Container(
                        name="main",
                        image=image,
                        command=["sh", "-c", SCRIPT],
                        env=[client.V1EnvVar(name="PAGE", value=PAGE)],
                        readiness_probe=client.V1Probe(
                            tcp_socket=client.V1TCPSocketAction(port=8080), period_seconds=1
                        ),
                    )
                ],
            ),
        ),
    )
    wait_for(
        lambda: any(
            c.ready for c in kube.read_namespaced_pod("site", namespace).status.container_statuses or []
        ),
        what="site ready",
    )
    return "site"


def test_pod_proxy_rewrites_the_pages_links(kube, kubeconfig, namespace, site):
    prefix = f"/api/v1/namespaces/{namespace}/pods/{site}:8080/proxy"
    assert _raw(kubeconfig, f"{prefix}/index.html") == _rewritten(prefix)
    assert _raw(kubeconfig, f"{prefix}/note.txt") == "plain /style.css"
    for _ in range(5):
        data, status, headers = kube.connect_head_namespaced_pod_proxy_with_path_with_http_info(
            f"{site}:8080", namespace, "index.html"
        )
        assert (status, data) == (200, "") and headers["Content-Type"].startswith("text/html")


def test_service_proxy_rewrites_the_pages_links(kube, kubeconfig, namespace, site):
    kube.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="site"),
            spec=client.V1ServiceSpec(
                selector={"app": "site"}, ports=[client.V1ServicePort(name="http", port=80, target_port=8080)]
            ),
        ),
    )

    def served() -> bool:
        try:
            endpoints = kube.read_namespaced_endpoints("site", namespace)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return any(s.addresses for s in endpoints.subsets or [])

    wait_for(served, what="the site Service's endpoints")
    prefix = f"/api/v1/namespaces/{namespace}/services/site:http/proxy"
    assert _raw(kubeconfig, f"{prefix}/index.html") == _rewritten(prefix)


def test_node_proxy_answers_head(kube, node_name):
    data, status, _ = kube.connect_head_node_proxy_with_path_with_http_info(node_name, "healthz")
    assert (status, data) == (200, "")
