"""`pykubelet dns` as a process, with CoreDNS's side endpoints: /health answers "OK" at once, /ready is
503 naming the kubernetes plugin until the Services and EndpointSlices are listed (the API server is down
when it starts) and 200 "OK" after, and /metrics counts each question under CoreDNS's names."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from dnslib import RCODE, DNSRecord
from prometheus_client.parser import text_string_to_metric_families

from e2e.waiting import wait_for
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.process import Daemon, free_port
from pykubelet.rig.stack import dns_argv
from tests.clusterdns.test_dns_server_integration import DNS_GROUPS, DNS_USER

pytestmark = pytest.mark.integration


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


class DnsProcess:
    def __init__(self, kubeconfig: Path, log: Path) -> None:
        self.port, self.health, self.ready, self.metrics = (free_port() for _ in range(4))
        argv = [
            *dns_argv(kubeconfig, "127.0.0.1", self.port, (self.health, self.ready, self.metrics)),
            "--resolv-conf",
            "/nonexistent",
        ]
        self.daemon = Daemon("pykubelet dns", argv, log)

    def url(self, port: int, path: str) -> str:
        return f"http://127.0.0.1:{port}{path}"


@pytest.fixture
def stopped_apiserver(tmp_path: Path) -> Iterator[tuple[ApiServer, Path]]:
    """An API server that has written its PKI and the DNS identity's kubeconfig, then stopped."""
    server = ApiServer(tmp_path / "api")
    server.start()
    kubeconfig = server.client_kubeconfig(DNS_USER, DNS_GROUPS, tmp_path / "dns.kubeconfig")
    server.stop()
    try:
        yield server, kubeconfig
    finally:
        server.stop()


def test_health_ready_and_metrics_as_coredns_serves_them(stopped_apiserver, tmp_path: Path) -> None:
    server, kubeconfig = stopped_apiserver
    dns = DnsProcess(kubeconfig, tmp_path / "dns.log")
    dns.daemon.start(lambda: get(dns.url(dns.health, "/health"))[0] == 200, timeout=30)
    try:
        assert get(dns.url(dns.health, "/health")) == (200, "OK")
        # The kubernetes plugin has not listed anything: not ready, and CoreDNS names who is not.
        assert get(dns.url(dns.ready, "/ready")) == (503, "kubernetes")

        server.start()
        wait_for(lambda: get(dns.url(dns.ready, "/ready")) == (200, "OK"), timeout=60, interval=0.2)

        def requests_total() -> float:
            _, text = get(dns.url(dns.metrics, "/metrics"))
            families = {f.name: f for f in text_string_to_metric_families(text)}
            assert not any(s.name.endswith("_created") for f in families.values() for s in f.samples)
            return sum(
                s.value
                for s in families["coredns_dns_requests"].samples
                if s.labels
                == {
                    "server": "dns://127.0.0.1:" + str(dns.port),
                    "zone": ".",
                    "view": "",
                    "proto": "udp",
                    "family": "1",
                    "type": "A",
                }
            )

        # The DNS port opens once the zone is synced; the first answer may race that.
        wait_for(lambda: _answers(dns.port), timeout=30, interval=0.2)
        before = requests_total()
        reply = DNSRecord.parse(
            DNSRecord.question("kubernetes.default.svc.cluster.local").send("127.0.0.1", dns.port, timeout=3)
        )
        assert reply.header.rcode == RCODE.NOERROR and reply.rr
        assert requests_total() == before + 1
        _, text = get(dns.url(dns.metrics, "/metrics"))
        assert (
            'coredns_dns_responses_total{plugin="kubernetes",rcode="NOERROR",server="dns://127.0.0.1:'
            + str(dns.port)
            + '",view="",zone="."}'
            in text
        )
        assert "coredns_build_info{" in text and "coredns_panics_total 0.0" in text
    finally:
        dns.daemon.stop()


def _answers(port: int) -> bool:
    try:
        DNSRecord.question("kubernetes.default.svc.cluster.local").send("127.0.0.1", port, timeout=1)
    except OSError:
        return False
    return True


def test_an_address_that_is_not_host_port_is_refused_at_start(tmp_path: Path) -> None:
    import subprocess

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pykubelet",
            "dns",
            "--kubeconfig",
            str(tmp_path / "none"),
            "--ready-bind-address",
            "8181",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert "--ready-bind-address: invalid address '8181': want host:port" in out.stderr
