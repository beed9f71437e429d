"""Services through the API, kubectl and pods only: the EndpointSlice controller lists Ready pods, the
service proxy carries a client pod's connections to them by ClusterIP, a backend whose readiness fails
leaves the slice and stops getting new connections (and comes back), a Service without endpoints
refuses at once. Client pods run `wget` and report through their logs (no exec needed)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client

from e2e.probing import exec_action, fast, probe_pod
from e2e.waiting import finished, wait_for

pytestmark = pytest.mark.integration

MANAGED_BY = "endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io"


def backend(name: str, node: str, image: str, script: str = "touch /tmp/ready; sleep 3600") -> dict[str, Any]:
    """httpd answering its pod name on 8080 (port name http), Ready while /tmp/ready exists."""
    serve = f"mkdir -p /www && echo {name} > /www/index.html && (httpd -f -p 8080 -h /www &) && {script}"
    body = probe_pod(
        name,
        node,
        image,
        serve,
        grace=1,
        ports=[{"name": "http", "containerPort": 8080}],
        readinessProbe=fast(exec_action("cat /tmp/ready")),
    )
    body["metadata"]["labels"] = {"app": "web"}
    return body


def web_service(
    kube: Any, namespace: str, name: str = "web", selector: dict | None = None
) -> client.V1Service:
    return kube.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "selector": selector or {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
            },
        },
    )


def slice_endpoints(api_client: Any, namespace: str, service: str = "web") -> dict[str, bool]:
    """address -> ready, over the Service's controller-managed slices."""
    slices = (
        client.DiscoveryV1Api(api_client)
        .list_namespaced_endpoint_slice(
            namespace, label_selector=f"kubernetes.io/service-name={service},{MANAGED_BY}"
        )
        .items
    )
    return {e.addresses[0]: bool(e.conditions.ready) for s in slices for e in s.endpoints or []}


def run_client(kube: Any, namespace: str, node: str, image: str, script: str, timeout: float = 90) -> str:
    """A pod that runs `script` once; its log."""
    name = f"client-{uuid.uuid4().hex[:6]}"
    kube.create_namespaced_pod(namespace, probe_pod(name, node, image, script, restart="Never", grace=1))
    finished(kube, namespace, name, timeout=timeout)
    return kube.read_namespaced_pod_log(name, namespace)


def fetch_many(ip: str, count: int) -> str:
    """`count` fetches, once the Service answers at all (the proxy programs a change within about a
    second, as kube-proxy does; upstream's e2e polls for the same reason). busybox 1.35's `wget -T`
    crashes, so `timeout` bounds each try."""
    return (
        f"for i in $(seq 20); do timeout 5 wget -q -O /dev/null http://{ip}/ && break; sleep 0.5; done; "
        f"for i in $(seq {count}); do timeout 5 wget -q -O - http://{ip}/ || echo FAILED; done"
    )


def pod_ip(kube: Any, namespace: str, name: str) -> str:
    return wait_for(
        lambda: kube.read_namespaced_pod(name, namespace).status.pod_ip, timeout=60, what=f"{name}'s IP"
    )


def test_a_client_reaches_ready_backends_by_cluster_ip(kube, api_client, namespace, node_name, image):
    for name in ("web-a", "web-b"):
        kube.create_namespaced_pod(namespace, backend(name, node_name, image))
    svc = web_service(kube, namespace)
    ips = {pod_ip(kube, namespace, n) for n in ("web-a", "web-b")}
    wait_for(
        lambda: slice_endpoints(api_client, namespace) == {ip: True for ip in ips},
        timeout=60,
        what="both backends ready in the slice",
    )
    log = run_client(kube, namespace, node_name, image, fetch_many(svc.spec.cluster_ip, 24))
    answers = log.split()
    assert "FAILED" not in answers, log
    assert set(answers) == {"web-a", "web-b"}, log  # spread over both (each missed with p = 2^-24)


def test_an_unready_backend_leaves_the_slice_and_comes_back(kube, api_client, namespace, node_name, image):
    kube.create_namespaced_pod(namespace, backend("web-a", node_name, image))
    # Ready, then unready for a while (readiness fails), then ready again, on the pod's own clock.
    flapping = "touch /tmp/ready; sleep 25; rm /tmp/ready; sleep 30; touch /tmp/ready; sleep 3600"
    kube.create_namespaced_pod(namespace, backend("web-b", node_name, image, flapping))
    svc = web_service(kube, namespace)
    a, b = pod_ip(kube, namespace, "web-a"), pod_ip(kube, namespace, "web-b")
    wait_for(
        lambda: slice_endpoints(api_client, namespace) == {a: True, b: True}, timeout=60, what="both ready"
    )
    wait_for(
        lambda: slice_endpoints(api_client, namespace) == {a: True, b: False},
        timeout=60,
        what="web-b in the slice with ready=false",
    )
    log = run_client(kube, namespace, node_name, image, fetch_many(svc.spec.cluster_ip, 12))
    assert log.split() == ["web-a"] * 12, log
    wait_for(
        lambda: slice_endpoints(api_client, namespace) == {a: True, b: True},
        timeout=60,
        what="web-b ready again",
    )
    log = run_client(kube, namespace, node_name, image, fetch_many(svc.spec.cluster_ip, 24))
    assert set(log.split()) == {"web-a", "web-b"}, log


def test_a_service_without_endpoints_refuses_at_once(kube, api_client, namespace, node_name, image):
    svc = web_service(kube, namespace, "nobody", selector={"app": "nobody"})
    wait_for(
        lambda: (
            client.DiscoveryV1Api(api_client)
            .list_namespaced_endpoint_slice(
                namespace, label_selector=f"kubernetes.io/service-name=nobody,{MANAGED_BY}"
            )
            .items
        ),
        timeout=30,
        what="the placeholder slice",
    )
    # A hang would end in the timeout after 20 s; a refusal is immediate. Tried until the proxy has the
    # new Service (about a second), as upstream's e2e polls.
    script = (
        f"for i in $(seq 10); do s=$(date +%s); out=$(timeout 20 wget -q -O - http://{svc.spec.cluster_ip}/ 2>&1); "
        'rc=$?; echo "$out rc=$rc took=$(( $(date +%s) - s ))"; case "$out" in *refused*) break;; esac; '
        "sleep 1; done"
    )
    log = run_client(kube, namespace, node_name, image, script)
    last = log.strip().splitlines()[-1]
    assert "Connection refused" in last and "rc=1" in last, log
    took = int(last.rsplit("took=", 1)[1].split()[0])
    assert took <= 2, log


def test_a_client_reaches_a_service_by_short_name_and_fqdn(kube, api_client, namespace, node_name, image):
    kube.create_namespaced_pod(namespace, backend("web-a", node_name, image))
    web_service(kube, namespace)
    ip = pod_ip(kube, namespace, "web-a")
    wait_for(
        lambda: slice_endpoints(api_client, namespace) == {ip: True}, timeout=60, what="the backend ready"
    )
    fqdn = f"web.{namespace}.svc.cluster.local"
    script = (
        f"for i in $(seq 20); do timeout 5 wget -q -O /dev/null http://web/ && break; sleep 0.5; done; "
        f"echo short=$(timeout 5 wget -q -O - http://web/); echo fqdn=$(timeout 5 wget -q -O - http://{fqdn}/); "
        "echo resolv=$(grep -c 'nameserver' /etc/resolv.conf) $(grep ndots /etc/resolv.conf)"
    )
    log = run_client(kube, namespace, node_name, image, script)
    assert "short=web-a" in log and "fqdn=web-a" in log, log
    assert "ndots:5" in log, log


def test_kubernetes_default_svc_resolves_and_dns_rcodes(kube, namespace, node_name, image):
    script = (
        "nslookup kubernetes.default.svc.cluster.local 2>&1; echo ---; "
        f"nslookup nope.{namespace}.svc.cluster.local 2>&1; echo rc=$?"
    )
    log = run_client(kube, namespace, node_name, image, script)
    first, second = log.split("---", 1)
    # the first address of the cluster's service range (10.96.0.1 on kubeadm's and kind's defaults)
    assert kube.read_namespaced_service("kubernetes", "default").spec.cluster_ip in first, log
    assert "NXDOMAIN" in second, log


def test_kubernetes_default_svc_answers_tls_from_a_pod(kube, namespace, node_name, image):
    """In-cluster clients reach the API at the first address of the service range: a TLS request to
    https://kubernetes.default.svc with the pod's own token is answered by the API server."""
    script = (
        "token=$(cat /var/run/secrets/kubernetes.io/serviceaccount/token); "
        "for i in $(seq 10); do "
        'out=$(timeout 10 wget -q --no-check-certificate --header "Authorization: Bearer $token" '
        '-O - https://kubernetes.default.svc/version 2>&1) && break; sleep 1; done; echo "$out"'
    )
    log = run_client(kube, namespace, node_name, image, script)
    assert '"gitVersion"' in log, log
