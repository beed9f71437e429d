"""The service proxy for real: against the real API server (on the proxy's own identity,
system:kube-proxy), writing real nftables rules with `nft -f`, in network namespaces of the test's own
(so the host's rules are never touched), and real connections through them. Run under the host lock.

The table is diffed against the set of chains and map elements the Services need; deleting a Service
removes its rules; a sync nft refuses leaves the previous ruleset; `--cleanup` removes the table;
traffic to a ClusterIP reaches a ready backend and a Service without endpoints refuses at once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from e2e.waiting import wait_for_async
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.leaks import Scope
from pykubelet.rig.process import free_port
from serviceproxy.conntrack import Conntrack
from serviceproxy.model import ServicePortName
from serviceproxy.nft import Nft, NftError
from serviceproxy.proxier import Proxier, ProxyConfig
from serviceproxy.rules import ChainNames, hash_and_truncate
from tests.serviceproxy.netlab import BACKEND_IP, EXTRA_BACKEND_IP, NetLab

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and nftables"),
]

TABLE = "kube-proxy"
FIXED_CHAINS = {
    "filter-prerouting",
    "filter-input",
    "filter-forward",
    "filter-output",
    "filter-output-post-dnat",
    "nat-prerouting",
    "nat-output",
    "nat-postrouting",
    "mark-for-masquerade",
    "masquerading",
    "reject-chain",
    "service-endpoints-check",
    "cluster-ips-check",
    "services",
    "firewall-check",
}


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("proxy-api")) as server:
        yield server


@pytest.fixture(scope="module")
def proxy_kubeconfig(apiserver: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The proxy's own identity, as the rig issues it: system:kube-proxy, bound to system:node-proxier."""
    return apiserver.client_kubeconfig(
        "system:kube-proxy", (), tmp_path_factory.mktemp("proxy") / "proxy.kubeconfig"
    )


@pytest.fixture(scope="module")
def v1(apiserver: ApiServer) -> Iterator[client.CoreV1Api]:
    with apiserver.api_client() as api:
        yield client.CoreV1Api(api)


@pytest.fixture(scope="module")
def discovery(apiserver: ApiServer) -> Iterator[client.DiscoveryV1Api]:
    with apiserver.api_client() as api:
        yield client.DiscoveryV1Api(api)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[NetLab]:
    lab = NetLab().open()
    try:
        yield lab
    finally:
        lab.close()
        leaked = Scope.of(tmp_path, named_netns=lab.names).leaked(settle=2.0)
        assert not leaked, f"left on the host: {leaked}"


@pytest.fixture
def namespace(v1: client.CoreV1Api) -> Iterator[str]:
    name = f"p-{os.urandom(4).hex()}"
    v1.create_namespace({"metadata": {"name": name}})
    yield name
    v1.delete_namespace(name)


@pytest.fixture
async def proxier(proxy_kubeconfig: Path, lab: NetLab) -> AsyncIterator[Proxier]:
    kube = KubeClient(load_kubeconfig(proxy_kubeconfig), component="kube-proxy")
    proxier = Proxier(
        kube,
        ProxyConfig(
            node_name="n1",
            cluster_cidr="10.250.0.0/24",
            min_sync_period=0.05,
            nft=Nft(TABLE, netns=lab.client),
            conntrack=Conntrack(lab.client),
        ),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(proxier.run(stop))
    try:
        yield proxier
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await kube.close()
        await proxier.cleanup()


def service(v1: client.CoreV1Api, ns: str, name: str, **spec: Any) -> client.V1Service:
    ports = spec.pop("ports", [{"name": "http", "port": 80, "targetPort": 8080}])
    return v1.create_namespaced_service(ns, {"metadata": {"name": name}, "spec": {"ports": ports, **spec}})


def endpoint_slice(
    discovery: client.DiscoveryV1Api,
    ns: str,
    service_name: str,
    addresses: list[str],
    ready: bool = True,
    port: int = 8080,
) -> None:
    discovery.create_namespaced_endpoint_slice(
        ns,
        {
            "metadata": {
                "name": f"{service_name}-abc",
                "labels": {"kubernetes.io/service-name": service_name},
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": [a], "conditions": {"ready": ready}, "nodeName": "n1"} for a in addresses
            ],
        },
    )


def _verdict(value: Any) -> str:
    if isinstance(value, dict):
        for kind in ("goto", "jump"):
            if kind in value:
                return f"{kind} {value[kind]['target']}"
        return next(iter(value))
    return str(value)


def _key(value: Any) -> str:
    if isinstance(value, dict) and "concat" in value:
        return " . ".join(str(v) for v in value["concat"])
    return str(value)


async def table(lab: NetLab) -> dict[str, Any] | None:
    """The kernel's table as comparable data: chain -> rule count, map/set -> {key: verdict}."""
    objects = await Nft(TABLE, netns=lab.client).table_json()
    if objects is None:
        return None
    chains: dict[str, int] = {}
    maps: dict[str, dict[str, str | None]] = {}
    for o in objects:
        if "chain" in o:
            chains.setdefault(o["chain"]["name"], 0)
        elif "rule" in o:
            chains[o["rule"]["chain"]] = chains.get(o["rule"]["chain"], 0) + 1
        for kind in ("map", "set"):
            if kind in o:
                elements: dict[str, str | None] = {}
                for elem in o[kind].get("elem", []):
                    if kind == "map":
                        elements[_key(elem[0])] = _verdict(elem[1])
                    else:
                        elements[_key(elem)] = None
                maps[o[kind]["name"]] = elements
    return {"chains": chains, "maps": maps}


def _endpoint_chain(name: ServicePortName, ip: str, port: int) -> str:
    return "endpoint-" + hash_and_truncate(f"{name.chain_base}__{ip}/{port}")


async def test_the_table_is_exactly_what_the_services_need(proxier, lab, v1, discovery, namespace):
    web = service(v1, namespace, "web")
    idle = service(
        v1, namespace, "idle", type="NodePort", ports=[{"name": "dns", "port": 53, "protocol": "UDP"}]
    )
    endpoint_slice(discovery, namespace, "web", [BACKEND_IP, EXTRA_BACKEND_IP])
    kubernetes = v1.read_namespaced_service("kubernetes", "default")
    k8s_port = v1.read_namespaced_endpoints("kubernetes", "default").subsets[0].ports[0].port
    web_name = ServicePortName(namespace, "web", "http", "TCP")
    k8s_name = ServicePortName("default", "kubernetes", "https", "TCP")
    web_chain, k8s_chain = ChainNames.of(web_name).cluster, ChainNames.of(k8s_name).cluster
    node_port = idle.spec.ports[0].node_port
    expected = {
        "chains": {
            **{c: None for c in FIXED_CHAINS},
            web_chain: 2,  # masquerade off-cluster sources, then numgen over both endpoints
            _endpoint_chain(web_name, BACKEND_IP, 8080): 2,  # hairpin masquerade, DNAT
            _endpoint_chain(web_name, EXTRA_BACKEND_IP, 8080): 2,
            k8s_chain: 2,
            _endpoint_chain(k8s_name, "127.0.0.1", k8s_port): 2,
        },
        "maps": {
            "service-ips": {
                f"{web.spec.cluster_ip} . tcp . 80": f"goto {web_chain}",
                f"{kubernetes.spec.cluster_ip} . tcp . 443": f"goto {k8s_chain}",
            },
            "service-nodeports": {},
            "no-endpoint-services": {f"{idle.spec.cluster_ip} . udp . 53": "goto reject-chain"},
            "no-endpoint-nodeports": {f"udp . {node_port}": "goto reject-chain"},
            "firewall-ips": {},
            "cluster-ips": {
                ip: None for ip in (web.spec.cluster_ip, idle.spec.cluster_ip, kubernetes.spec.cluster_ip)
            },
        },
    }

    async def matches() -> dict | None:
        got = await table(lab)
        if got is None:
            return None
        chains = {c: (n if expected["chains"].get(c) is not None else None) for c, n in got["chains"].items()}
        return got if chains == expected["chains"] and got["maps"] == expected["maps"] else None

    try:
        await wait_for_async(matches, what="the expected table", timeout=15.0, interval=0.05)
    except AssertionError:
        pytest.fail(
            f"table differs:\n{json.dumps(await table(lab), indent=1, sort_keys=True)}\n"
            f"expected:\n{json.dumps(expected, indent=1, sort_keys=True)}"
        )
    rules = await Nft(TABLE, netns=lab.client).listing()
    assert f"numgen random mod 2 vmap {{ 0 : goto {_endpoint_chain(web_name, BACKEND_IP, 8080)}" in rules
    assert f"meta l4proto tcp dnat to {BACKEND_IP}:8080" in rules

    v1.delete_namespaced_service("web", namespace)

    async def web_gone() -> bool:
        got = await table(lab)
        return (
            bool(got)
            and not any(f"-{namespace}/web/" in c for c in got["chains"])
            and web.spec.cluster_ip not in json.dumps(got["maps"])
        )

    await wait_for_async(web_gone, what="web's rules removed", timeout=15.0, interval=0.05)


async def test_traffic_reaches_a_ready_backend_and_no_endpoints_refuse(
    proxier, lab, v1, discovery, namespace
):
    await asyncio.to_thread(lab.serve, f"{BACKEND_IP}:8080", "from-backend")
    web = service(v1, namespace, "web")
    empty = service(v1, namespace, "empty")
    endpoint_slice(discovery, namespace, "web", [BACKEND_IP])

    async def reached() -> tuple | None:
        answer = await asyncio.to_thread(lab.get, f"http://{web.spec.cluster_ip}/")
        return answer if answer[:2] == ("ok", "from-backend") else None

    await wait_for_async(reached, what="the backend through the ClusterIP", timeout=15.0, interval=0.05)
    outcome, _, took = await asyncio.to_thread(lab.get, f"http://{empty.spec.cluster_ip}/")
    assert outcome == "refused" and took < 1.0
    outcome, _, took = await asyncio.to_thread(lab.get, f"http://{web.spec.cluster_ip}:81/")
    assert outcome == "refused" and took < 1.0  # a port the ClusterIP does not serve


async def test_udp_conntrack_entries_of_a_gone_endpoint_are_flushed(proxier, lab, v1, discovery, namespace):
    await asyncio.to_thread(lab.serve_udp, f"{BACKEND_IP}:5353", "first")
    await asyncio.to_thread(lab.serve_udp, f"{EXTRA_BACKEND_IP}:5353", "second")
    dns = service(
        v1, namespace, "dns", ports=[{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353}]
    )
    body = {
        "metadata": {"name": "dns-abc", "labels": {"kubernetes.io/service-name": "dns"}},
        "addressType": "IPv4",
        "ports": [{"name": "dns", "port": 5353, "protocol": "UDP"}],
        "endpoints": [{"addresses": [BACKEND_IP], "conditions": {"ready": True}}],
    }
    discovery.create_namespaced_endpoint_slice(namespace, body)
    ip = dns.spec.cluster_ip

    async def answer(expected: str) -> bool:
        return await asyncio.to_thread(lab.ask_udp, ip, 53, 40053) == expected

    await wait_for_async(
        lambda: answer("first"),
        what="the first backend over UDP",
        timeout=15.0,
        interval=0.05,
    )
    # The same client flow now has a conntrack entry to the first backend; the endpoint is replaced.
    body["endpoints"] = [{"addresses": [EXTRA_BACKEND_IP], "conditions": {"ready": True}}]
    discovery.replace_namespaced_endpoint_slice("dns-abc", namespace, body)
    # Without the flush the entry would keep this flow on the first backend (still up) until it expires.
    await wait_for_async(
        lambda: answer("second"),
        what="the flow moved to the new backend",
        timeout=10,
        interval=0.05,
    )
    listed = subprocess.run(
        ["ip", "netns", "exec", lab.client, "conntrack", "-L", "-p", "udp", "--orig-dst", ip],
        capture_output=True,
        text=True,
    )
    assert BACKEND_IP not in listed.stdout.replace(f"src={BACKEND_IP}", "")  # no entry DNATs there any more


async def test_a_failed_sync_leaves_the_previous_ruleset(proxier, lab, v1, discovery, namespace):
    service(v1, namespace, "web")
    endpoint_slice(discovery, namespace, "web", [BACKEND_IP])
    nft = Nft(TABLE, netns=lab.client)
    await wait_for_async(
        lambda: _has(nft, f"-{namespace}/web/"),
        what="web's rules",
        timeout=15.0,
        interval=0.05,
    )
    before = await nft.listing()
    real_partial = proxier.writer.partial
    proxier.writer.partial = lambda old, new: (
        real_partial(old, new) + "add rule ip kube-proxy services bogus\n"
    )  # type: ignore[method-assign]
    failures = proxier.failures
    db = service(v1, namespace, "db")
    await wait_for_async(
        lambda: _true(proxier.failures > failures),
        what="the sync to fail",
        timeout=15.0,
        interval=0.05,
    )
    assert await nft.listing() == before  # nothing of the failed transaction was applied
    assert proxier.need_full
    proxier.writer.partial = real_partial  # type: ignore[method-assign]
    proxier._queue()  # the retry (a full sync) goes through
    await wait_for_async(
        lambda: _has(nft, f"{db.spec.cluster_ip} . tcp . 80 : goto reject-chain"),
        what="recovery",
        timeout=15.0,
        interval=0.05,
    )
    with pytest.raises(NftError):
        await nft.apply("add rule ip kube-proxy services bogus\n")


async def _true(value: bool) -> bool:
    return value


async def _has(nft: Nft, text: str) -> bool:
    try:
        return text in await nft.listing()
    except NftError:
        return False


async def test_the_command_serves_health_and_metrics_and_cleanup_removes_the_table(proxy_kubeconfig, lab):
    health, metrics = free_port(), free_port()
    argv = [
        sys.executable,
        "-m",
        "pykubelet",
        "proxy",
        "--kubeconfig",
        str(proxy_kubeconfig),
        "--hostname-override",
        "n1",
        "--netns",
        lab.client,
        "--min-sync-period",
        "100ms",
        "--healthz-bind-address",
        f"127.0.0.1:{health}",
        "--metrics-bind-address",
        f"127.0.0.1:{metrics}",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:

        def healthz() -> dict | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health}/healthz", timeout=2) as resp:
                    return json.loads(resp.read()) if resp.status == 200 else None
            except OSError:
                return None

        body = await wait_for_async(
            lambda: asyncio.to_thread(healthz),
            what="healthz",
            timeout=15.0,
            interval=0.05,
        )
        assert body["nodeEligible"] is True and body["lastUpdated"].endswith("+0000 UTC")
        await wait_for_async(
            lambda: _has(Nft(TABLE, netns=lab.client), "chain services"),
            what="the table",
            timeout=15.0,
            interval=0.05,
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        for name in (
            "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "kubeproxy_sync_full_proxy_rules_duration_seconds_count",
            "kubeproxy_network_programming_duration_seconds",
        ):
            assert name in text, name
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert await table(lab) is not None  # stopping leaves the rules (connections survive a restart)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    done = subprocess.run(
        [sys.executable, "-m", "pykubelet", "proxy", "--cleanup", "--netns", lab.client],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert await table(lab) is None


def proxy_command(kubeconfig: Path, lab: NetLab, health: int) -> subprocess.Popen[str]:
    """`pykubelet proxy` as its own process in the lab's client namespace, as the rig runs it."""
    argv = [
        sys.executable,
        "-m",
        "pykubelet",
        "proxy",
        "--kubeconfig",
        str(kubeconfig),
        "--hostname-override",
        "n1",
        "--cluster-cidr",
        "10.250.0.0/24",
        "--netns",
        lab.client,
        "--min-sync-period",
        "100ms",
        "--healthz-bind-address",
        f"127.0.0.1:{health}",
        "--metrics-bind-address",
        "",
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


def _stop(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
    return proc.returncode


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return resp.status == 200 and not json.loads(resp.read())["lastUpdated"].startswith("1970")
    except OSError:
        return False


async def test_a_restarted_proxy_keeps_established_connections_and_drops_stale_rules(
    proxy_kubeconfig, lab, v1, discovery, namespace
):
    await asyncio.to_thread(lab.serve_echo, f"{BACKEND_IP}:8080")
    echo = service(v1, namespace, "echo")
    service(v1, namespace, "gone")
    endpoint_slice(discovery, namespace, "echo", [BACKEND_IP])
    endpoint_slice(discovery, namespace, "gone", [BACKEND_IP])
    gone_chain = ChainNames.of(ServicePortName(namespace, "gone", "http", "TCP")).cluster
    health = free_port()
    proc = proxy_command(proxy_kubeconfig, lab, health)
    conn = None
    try:
        address = f"{echo.spec.cluster_ip}:80"
        conn = await wait_for_async(
            lambda: asyncio.to_thread(lab.connect, address),
            what="a connection via the ClusterIP",
            timeout=15.0,
            interval=0.05,
        )
        assert await asyncio.to_thread(conn.say, "before") == "echo before"
        assert await _has(Nft(TABLE, netns=lab.client), gone_chain)

        assert _stop(proc) == 0
        # While the proxy is down its rules stay and the connection still works; a Service deleted
        # meanwhile must not survive the restart.
        assert await asyncio.to_thread(conn.say, "down") == "echo down"
        v1.delete_namespaced_service("gone", namespace)
        discovery.delete_namespaced_endpoint_slice("gone-abc", namespace)
        proc = proxy_command(proxy_kubeconfig, lab, health)
        await wait_for_async(
            lambda: asyncio.to_thread(_healthy, health),
            what="the restarted proxy's first sync",
            timeout=15.0,
            interval=0.05,
        )
        listing = await Nft(TABLE, netns=lab.client).listing()
        assert gone_chain not in listing, "the deleted Service's chain survived the restart"
        assert ChainNames.of(ServicePortName(namespace, "echo", "http", "TCP")).cluster in listing
        assert await asyncio.to_thread(conn.say, "after") == "echo after"
        fresh = await asyncio.to_thread(lab.connect, address)
        assert fresh is not None, "no new connection after the restart"
        assert await asyncio.to_thread(fresh.say, "new") == "echo new"
        fresh.close()
    finally:
        if conn is not None:
            conn.close()
        _stop(proc)
        await Nft(TABLE, netns=lab.client).delete_table()


async def test_source_ranges_admit_only_listed_clients_to_a_load_balancer_ip(
    proxier, lab, v1, discovery, namespace
):
    await asyncio.to_thread(lab.serve, f"{BACKEND_IP}:8080", "from-backend")
    subprocess.run(
        ["ip", "-n", lab.client, "route", "add", "192.0.2.0/24", "via", BACKEND_IP], check=True, timeout=10
    )
    service(v1, namespace, "web", type="LoadBalancer", loadBalancerSourceRanges=["10.250.0.1/32"])
    v1.patch_namespaced_service_status(
        "web", namespace, {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}}
    )
    endpoint_slice(discovery, namespace, "web", [BACKEND_IP])

    async def reached() -> tuple | None:
        answer = await asyncio.to_thread(lab.get, "http://192.0.2.10/", None, 1.0)
        return answer if answer[:2] == ("ok", "from-backend") else None

    await wait_for_async(
        reached,
        what="the backend through the LB IP from inside the range",
        timeout=15.0,
        interval=0.05,
    )
    v1.patch_namespaced_service("web", namespace, {"spec": {"loadBalancerSourceRanges": ["10.99.0.0/16"]}})
    chain = ChainNames.of(ServicePortName(namespace, "web", "http", "TCP")).firewall
    await wait_for_async(
        lambda: _has(Nft(TABLE, netns=lab.client), "10.99.0.0/16"),
        what="the new range in the table",
        timeout=15.0,
        interval=0.05,
    )
    assert await _has(Nft(TABLE, netns=lab.client), f"chain {chain}")
    outcome, _, _ = await asyncio.to_thread(lab.get, "http://192.0.2.10/", None, 1.0)
    assert outcome == "timeout"  # dropped, not refused: the firewall drops outside sources
    # the ClusterIP is not subject to the ranges
    web = v1.read_namespaced_service("web", namespace)
    outcome, text, _ = await asyncio.to_thread(lab.get, f"http://{web.spec.cluster_ip}/")
    assert (outcome, text) == ("ok", "from-backend")


def _health(port: int) -> tuple[int, dict[str, Any], str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return resp.status, json.loads(resp.read()), resp.headers["X-Load-Balancing-Endpoint-Weight"]
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), err.headers["X-Load-Balancing-Endpoint-Weight"]
    except OSError:
        return 0, {}, ""


async def test_health_check_node_port_of_a_local_load_balancer(proxier, lab, v1, discovery, namespace):
    svc = service(v1, namespace, "web", type="LoadBalancer", externalTrafficPolicy="Local")
    port = svc.spec.health_check_node_port
    assert port
    endpoint_slice(discovery, namespace, "web", [BACKEND_IP, EXTRA_BACKEND_IP])  # both on n1, this node
    expected = {
        "service": {"namespace": namespace, "name": "web"},
        "localEndpoints": 2,
        "serviceProxyHealthy": True,
    }
    got = await wait_for_async(
        lambda: asyncio.to_thread(lambda: (lambda r: r if r[0] == 200 else None)(_health(port))),
        what="200 with two local endpoints",
        timeout=15.0,
        interval=0.05,
    )
    assert got == (200, expected, "2")
    discovery.patch_namespaced_endpoint_slice(
        "web-abc",
        namespace,
        {"endpoints": [{"addresses": [BACKEND_IP], "conditions": {"ready": True}, "nodeName": "n2"}]},
    )
    got = await wait_for_async(
        lambda: asyncio.to_thread(lambda: (lambda r: r if r[0] == 503 else None)(_health(port))),
        what="503 once no endpoint is local",
        timeout=15.0,
        interval=0.05,
    )
    assert got == (503, {**expected, "localEndpoints": 0}, "0")
    v1.delete_namespaced_service("web", namespace)
    await wait_for_async(
        lambda: asyncio.to_thread(lambda: _health(port)[0] == 0),
        what="the port closed",
        timeout=15.0,
        interval=0.05,
    )


async def _warned(v1: client.CoreV1Api, namespace: str, name: str) -> str | None:
    events = await asyncio.to_thread(v1.list_namespaced_event, namespace)
    for e in events.items:
        if e.involved_object.name == name and e.reason == "FailedToProgramRules" and e.type == "Warning":
            return e.message
    return None


async def test_a_service_port_in_conflict_is_left_out_and_the_rest_written(
    proxier, lab, v1, discovery, namespace
):
    """Two Services taking one address and port (an externalIP both name; a node port given twice
    before the API server checked them is the same case): the later one by name gets no rules and a
    Warning event, every other Service's rules are written."""
    nft = Nft(TABLE, netns=lab.client)
    service(v1, namespace, "a-first", externalIPs=["192.0.2.50"])
    service(v1, namespace, "b-second", externalIPs=["192.0.2.50"])
    other = service(v1, namespace, "c-other")
    for name in ("a-first", "b-second", "c-other"):
        endpoint_slice(discovery, namespace, name, [BACKEND_IP])
    await wait_for_async(
        lambda: _has(nft, f"{other.spec.cluster_ip} . tcp . 80 : goto service-"),
        what="the other Service's rules",
        timeout=15.0,
        interval=0.05,
    )
    listing = await nft.listing()
    assert f"-{namespace}/a-first/tcp/http" in listing
    assert f"-{namespace}/b-second/" not in listing
    assert "192.0.2.50 . tcp . 80 : goto external-" in listing
    message = await wait_for_async(
        lambda: _warned(v1, namespace, "b-second"), what="the Warning event", timeout=15.0, interval=0.1
    )
    assert f"192.0.2.50 . tcp . 80 is already programmed for service port {namespace}/a-first:http" in message
    assert proxier.failures == 0
    # the first one gone, the second one's rules are written
    v1.delete_namespaced_service("a-first", namespace)
    await wait_for_async(
        lambda: _has(nft, f"-{namespace}/b-second/tcp/http"), what="b's rules", timeout=15.0, interval=0.05
    )


async def test_a_service_nft_refuses_is_left_out_and_the_rest_written(
    proxier, lab, v1, discovery, namespace, monkeypatch
):
    """Rules nft refuses for one Service (injected here: a rule nft cannot parse in its chain) fail
    the full sync once; the Services to blame are found with `nft -c`, left out with a Warning event,
    and the rest of the table is written in the same sync."""
    import serviceproxy.proxier as proxier_module
    from serviceproxy.ruleset import Chain

    real_build = proxier_module.build

    def build_with_a_bad_service(ports, endpoints, settings):
        rs = real_build(ports, endpoints, settings)
        for name, chain in list(rs.chains.items()):
            if f"-{namespace}/bad/" in name:
                rs.chains[name] = Chain(chain.name, (*chain.rules, "bogus"), chain.hook, chain.comment)
        return rs

    nft = Nft(TABLE, netns=lab.client)
    good = service(v1, namespace, "good")
    endpoint_slice(discovery, namespace, "good", [BACKEND_IP])
    await wait_for_async(
        lambda: _has(nft, f"{good.spec.cluster_ip} . tcp . 80 : goto service-"),
        what="good's rules",
        timeout=15.0,
        interval=0.05,
    )
    monkeypatch.setattr(proxier_module, "build", build_with_a_bad_service)
    failures = proxier.failures
    bad = service(v1, namespace, "bad")
    endpoint_slice(discovery, namespace, "bad", [EXTRA_BACKEND_IP])
    later = service(v1, namespace, "later")
    await wait_for_async(
        lambda: _true(proxier.failures > failures),
        what="the partial sync to fail",
        timeout=15.0,
        interval=0.05,
    )
    proxier._queue()  # the full sync that follows a failure
    await wait_for_async(
        lambda: _has(nft, f"{later.spec.cluster_ip} . tcp . 80 : goto reject-chain"),
        what="the rest written",
        timeout=15.0,
        interval=0.05,
    )
    listing = await nft.listing()
    assert f"{good.spec.cluster_ip} . tcp . 80 : goto service-" in listing
    assert bad.spec.cluster_ip not in listing
    assert [str(n) for n in proxier.unwritable] == [f"{namespace}/bad:http"]
    message = await wait_for_async(
        lambda: _warned(v1, namespace, "bad"), what="the Warning event", timeout=15.0, interval=0.1
    )
    assert "nftables refused them" in message
    assert not proxier.need_full
