"""Every component's /metrics in a running stack passes `promtool check metrics` (Prometheus' own linter,
from Debian's prometheus package, which `./dev test` installs): the API server, the kubelet's /metrics,
/metrics/cadvisor, /metrics/resource and /metrics/probes, kube-proxy, the scheduler, the controller
manager, the cluster DNS and the metrics server. Each is scraped as Prometheus would (the admin's client
certificate where the port is authorized) after some work, so the families have samples.

What fails the test: an exposition promtool cannot parse, a counter whose name does not end in
`_total`, a series written twice (promtool does not look for that; we do), and any `_created` series.
promtool's other lint findings (help text, units, `_total` on a gauge that upstream names so) are
printed, not failed on: several are upstream's own names."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from dnslib import DNSRecord
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from e2e.waiting import wait_for
from tests.rig.stacks import leased_stack

pytestmark = pytest.mark.integration

# promtool's findings that are errors here (the rest are printed).
FATAL_LINT = ('counter metrics should have "_total" suffix',)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    if os.geteuid() != 0:
        pytest.skip("the stack needs root")
    if shutil.which("promtool") is None:
        pytest.fail("promtool is missing: ./dev test installs Debian's prometheus package")
    with leased_stack(tmp_path_factory.mktemp("promtool-stack"), "pm", "promtool-node") as s:
        yield s


def scrape(url: str, cert: tuple[Path, Path] | None) -> str:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert is not None:
        ctx.load_cert_chain(*cert)
    with urllib.request.urlopen(url, context=ctx if url.startswith("https") else None, timeout=10) as resp:
        assert resp.status == 200, url
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4"), url
        return resp.read().decode()


def promtool(text: str) -> tuple[list[str], list[str]]:
    """(errors, other findings) of `promtool check metrics` over one exposition."""
    out = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    errors = [line for line in lines if "error while linting" in line or any(f in line for f in FATAL_LINT)]
    if out.returncode not in (0, 3):  # 3: lint findings only
        errors.append(f"promtool exited {out.returncode}")
    return errors, [line for line in lines if line not in errors]


def duplicates_and_created(text: str) -> list[str]:
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    problems = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            if key in seen:
                problems.append(f"duplicate series {sample.name}{dict(key[1])}")
            seen.add(key)
            if sample.name.endswith("_created"):
                problems.append(f"_created series {sample.name}")
    return problems


def some_work(stack) -> None:  # type: ignore[no-untyped-def]
    """A pod with a probe (probe, cadvisor and resource series), a DNS question (coredns_*), a metrics
    round (the metrics server's scrape)."""
    with stack.apiserver.api_client() as api:
        v1 = client.CoreV1Api(api)
        v1.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": "scraped"},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "main",
                            "image": stack.images.busybox,
                            "command": ["sleep", "3600"],
                            "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                        }
                    ],
                },
            },
        )

        def ready() -> bool:
            statuses = v1.read_namespaced_pod("scraped", "default").status.container_statuses or []
            return bool(statuses) and statuses[0].ready

        wait_for(ready, timeout=120, interval=0.5, what="pod ready")
    DNSRecord.question("kubernetes.default.svc.cluster.local").send(
        stack.dns_address, stack.dns_port, timeout=3
    )


def endpoints(stack) -> dict[str, str]:  # type: ignore[no-untyped-def]
    api = stack.apiserver
    kubelet = f"https://127.0.0.1:{stack.kubelet_port}"
    return {
        "apiserver": f"{api.url.replace(api.host, '127.0.0.1')}/metrics",
        "kubelet": f"{kubelet}/metrics",
        "kubelet cadvisor": f"{kubelet}/metrics/cadvisor",
        "kubelet resource": f"{kubelet}/metrics/resource",
        "kubelet probes": f"{kubelet}/metrics/probes",
        "kube-proxy": f"http://127.0.0.1:{stack.proxy_metrics_port}/metrics",
        "scheduler": f"https://127.0.0.1:{api.scheduler_port}/metrics",
        "controller manager": f"https://127.0.0.1:{api.controller_manager_port}/metrics",
        "dns": f"http://127.0.0.1:{stack.dns_metrics_port}/metrics",
        # on the node address, as the rig binds it (the aggregator reaches it there)
        "metrics server": f"https://{stack.dns_address}:{stack.metrics_server_port}/metrics",
    }


def test_every_components_metrics_pass_promtool(stack) -> None:  # type: ignore[no-untyped-def]
    some_work(stack)
    admin = (stack.apiserver.data_dir / "pki" / "admin.crt", stack.apiserver.data_dir / "pki" / "admin.key")
    failures: dict[str, list[str]] = {}
    for name, url in endpoints(stack).items():
        try:
            text = wait_for(lambda url=url: scrape(url, admin), timeout=30, interval=0.5, retrying=(OSError,))
        except OSError:
            for log in sorted(stack.config.state_dir.rglob("*.log")):
                print(f"--- {log}\n{log.read_text(errors='replace')[-2000:]}")
            raise
        assert text.strip(), f"{name}: empty exposition at {url}"
        errors, findings = promtool(text)
        errors += duplicates_and_created(text)
        for line in findings:
            print(f"{name}: promtool: {line}")
        if errors:
            failures[name] = errors
    assert not failures, failures
