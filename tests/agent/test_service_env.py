"""Service environment variables (upstream's getServiceEnvVarMap and envvars.FromServices) and the
kernel hostname with setHostnameAsFQDN (GetNodenameForKernel): pure, no containerd."""

from __future__ import annotations

import pytest

from agent.config import AgentConfig
from agent.pods.dns import DNS
from agent.pods.env import resolve_env
from agent.pods.sandbox import HostnameError, kernel_hostname, sandbox_config
from agent.pods.service_env import service_env


def svc(name, ns, ip, *ports):
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"clusterIP": ip, "ports": list(ports)}}


def pod(ns="web", **spec):
    return {
        "metadata": {"name": "p", "namespace": ns, "uid": "u"},
        "spec": {"containers": [{"name": "c"}], **spec},
    }


SERVICES = [
    svc("kubernetes", "default", "10.96.0.1", {"name": "https", "port": 443, "protocol": "TCP"}),
    svc("redis-main", "web", "10.96.0.20", {"port": 6379}, {"name": "dns", "port": 53, "protocol": "UDP"}),
    svc("headless", "web", "None", {"port": 80}),
    svc("elsewhere", "other", "10.96.0.30", {"port": 80}),
]


def test_variables_for_the_namespace_and_the_master_service():
    env = dict(service_env(pod(), SERVICES))
    assert env["REDIS_MAIN_SERVICE_HOST"] == "10.96.0.20" and env["REDIS_MAIN_SERVICE_PORT"] == "6379"
    assert env["REDIS_MAIN_SERVICE_PORT_DNS"] == "53"
    assert env["REDIS_MAIN_PORT"] == "tcp://10.96.0.20:6379"
    assert env["REDIS_MAIN_PORT_6379_TCP"] == "tcp://10.96.0.20:6379"
    assert (
        env["REDIS_MAIN_PORT_6379_TCP_PROTO"],
        env["REDIS_MAIN_PORT_6379_TCP_PORT"],
        env["REDIS_MAIN_PORT_6379_TCP_ADDR"],
    ) == ("tcp", "6379", "10.96.0.20")
    assert env["REDIS_MAIN_PORT_53_UDP"] == "udp://10.96.0.20:53"
    assert env["KUBERNETES_SERVICE_HOST"] == "10.96.0.1" and env["KUBERNETES_SERVICE_PORT_HTTPS"] == "443"
    assert not any(k.startswith(("HEADLESS_", "ELSEWHERE_")) for k in env)


def test_enable_service_links_false_keeps_only_the_master_service():
    env = dict(service_env(pod(enableServiceLinks=False), SERVICES))
    assert "KUBERNETES_SERVICE_HOST" in env and not any(k.startswith("REDIS_MAIN") for k in env)


async def test_container_variables_win_and_may_reference_service_ones():
    async def fetch(kind, ns, name):
        return None

    container = {
        "name": "c",
        "env": [
            {"name": "REDIS_MAIN_SERVICE_PORT", "value": "1"},
            {"name": "URL", "value": "redis://$(REDIS_MAIN_SERVICE_HOST)"},
        ],
    }
    env = await resolve_env(pod(), container, fetch, services=service_env(pod(), SERVICES))
    values = dict(env)
    assert values["REDIS_MAIN_SERVICE_PORT"] == "1" and values["URL"] == "redis://10.96.0.20"
    assert [k for k, _ in env].count("REDIS_MAIN_SERVICE_PORT") == 1


def test_set_hostname_as_fqdn():
    p = pod(hostname="db-0", subdomain="db", setHostnameAsFQDN=True)
    assert kernel_hostname(p, "cluster.local") == "db-0.db.web.svc.cluster.local"
    assert kernel_hostname(pod(hostname="db-0", subdomain="db"), "cluster.local") == "db-0"
    assert kernel_hostname(pod(hostname="db-0", setHostnameAsFQDN=True), "cluster.local") == "db-0"
    assert (
        sandbox_config(AgentConfig(node_name="n", cluster_domain="cluster.local"), p, 0, DNS(), "n").hostname
        == "db-0.db.web.svc.cluster.local"
    )
    long = pod(hostname="a" * 40, subdomain="b" * 10, setHostnameAsFQDN=True)
    with pytest.raises(
        HostnameError,
        match=r"^failed to construct FQDN from pod hostname and cluster domain, FQDN a+\.b+\.web\.svc\.cluster\.local is too long \(64 characters is the max, 73 characters requested\)$",
    ):
        kernel_hostname(long, "cluster.local")
