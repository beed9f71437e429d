"""1 000 routes through the ingress controller: the time from an object change written to the API server
to nginx serving it (p50/p99; issue 34's goal: p99 < 1 s), and what one reload costs at that size.

The real API server (rig), the real controller in this process (its informers, its sync loop, its
nginx), a backend nginx on the host's address standing for the pods (one Service, its EndpointSlice
written by hand: no node is needed). N Ingresses, one rule each (host r<i>.example, Exact path /a<i>),
and, when the Gateway API v1.2.1 CRDs are found beside the clone (shared/gateway-api), N HTTPRoutes on one
Gateway the same way (host g<i>.example). A change moves one object's path to a new one; the time runs
from the PATCH until that path answers 200 through nginx (polled every 5 ms). Reload cost: building and
rendering the whole configuration from the caches, `nginx -t` and a graceful reload of it, the
configuration's size; `nginx -t` alone on it, on it as rendered before (every server block naming a
certificate) and without any TLS server; the controller's reload (SIGHUP until the new workers start).

Before and after in the same run: unless `--after-only` (or `--smoke`), the whole measure runs first on the
controller as it was before (`PreviousController`: each sync held until the statuses it decided were
written, 0.1 s after every wake, no gc.freeze of the caches), on its own API server, its figures
prefixed `before_`. (The reload's own cut, one parse per change and one SSL context for the hosts
without a certificate, was measured the same way before: bench/results history.)
Writes ingress-routes.{json,md,svg} (default bench/results/).

    python3 bench/ingress/routes.py [--routes 1000] [--changes 15] [--after-only] [--out DIR]
    python3 bench/ingress/routes.py --smoke --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.ingress.hop import pct, pod_config
from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from ingresscontroller import controller as controller_module
from ingresscontroller import manifest, nginxconf
from ingresscontroller.controller import ControllerConfig, IngressController
from ingresscontroller.nginx import Nginx
from ingresscontroller.nginxconf import Files, Listen
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.hostaddr import default_route_ip
from kubeclient.leaderelection import LeaderElection
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.leaks import Scope
from pykubelet.rig.process import free_port

REPO = Path(__file__).resolve().parents[2]
NS = "bench"
GW = "/apis/gateway.networking.k8s.io"


def find_crds() -> Path | None:
    """The Gateway API v1.2.1 standard channel, beside the clone or its parent folder."""
    for folder in (REPO.parent, REPO.parent.parent):
        path = folder / "shared" / "gateway-api" / "v1.2.1" / "standard-install.yaml"
        if path.exists():
            return path
    return None


def ingress(i: int, path: str) -> dict:
    backend = {"service": {"name": "pod", "port": {"number": 80}}}
    rule = {
        "host": f"r{i}.example",
        "http": {"paths": [{"path": path, "pathType": "Exact", "backend": backend}]},
    }
    return {"metadata": {"name": f"r{i}"}, "spec": {"ingressClassName": manifest.CLASS, "rules": [rule]}}


def route(i: int, path: str) -> dict:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": f"g{i}"},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "hostnames": [f"g{i}.example"],
            "rules": [
                {
                    "matches": [{"path": {"type": "Exact", "value": path}}],
                    "backendRefs": [{"name": "pod", "port": 80}],
                }
            ],
        },
    }


class PreviousController(IngressController):
    """The controller before its status writes left the sync: each sync held until the statuses it
    decided were written (at 1 000 objects, a PUT each), and no gc.freeze of the caches (with
    `previous_loop`: 0.1 s after every wake, also after a quiet spell)."""

    async def sync(self) -> None:
        await super().sync()
        await self.status_work.idle()

    def freeze_if_grown(self) -> None:
        pass


def per_server_certificates(text: str, files: Files) -> str:
    """The configuration as rendered before: every server block without a certificate of its own
    names the default one (nginx then builds a context and loads the key for each)."""
    default = [
        f"        ssl_certificate {nginxconf.quote(str(files.default_cert))};",
        f"        ssl_certificate_key {nginxconf.quote(str(files.default_key))};",
    ]
    out: list[str] = []
    block: list[str] = []
    for line in text.split("\n"):
        if line == "    server {":
            block = [line]
            continue
        if block:
            block.append(line)
            if line == "    }":
                if not any("ssl_certificate " in b for b in block):
                    at = next(i for i, b in enumerate(block) if b.startswith("        server_name "))
                    block[at + 1 : at + 1] = default
                out += block
                block = []
            continue
        out.append(line)
    return "\n".join(out)


def without_tls(text: str) -> str:
    """The same configuration with no TLS at all: no `ssl` listen, no certificate."""
    lines = text.replace(" ssl default_server;", " default_server;").replace(" ssl;", ";").split("\n")
    return "\n".join(line for line in lines if "ssl_certificate" not in line)


@contextlib.contextmanager
def previous_loop() -> Iterator[None]:
    """The controller's loop waits 0.1 s after every wake while this lasts, as it did before."""
    current = controller_module.settle_delay
    controller_module.settle_delay = lambda _ended, _now, _spacing=0.0: controller_module.COALESCE
    try:
        yield
    finally:
        controller_module.settle_delay = current


KINDS: dict[str, dict[str, Any]] = {
    "ingress": {
        "plural": f"/apis/networking.k8s.io/v1/namespaces/{NS}/ingresses",
        "make": ingress,
        "host": "r",
    },
    "httproute": {"plural": f"{GW}/v1/namespaces/{NS}/httproutes", "make": route, "host": "g"},
}


def status(port: int, host: str, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path, headers={"Host": host})
        answer = conn.getresponse()
        answer.read()
        return answer.status
    except OSError:
        return 0
    finally:
        conn.close()


async def served(port: int, host: str, path: str, timeout: float = 300.0) -> float:
    """Seconds until host+path answers 200 through nginx."""
    began = time.perf_counter()
    while await asyncio.to_thread(status, port, host, path) != 200:
        if time.perf_counter() - began > timeout:
            raise TimeoutError(f"{host}{path} not served after {timeout} s")
        await asyncio.sleep(0.005)
    return time.perf_counter() - began


async def base_objects(client: KubeClient, pod_port: int, gateway_port: int | None) -> None:
    """The pod, its Service and EndpointSlice and, with `gateway_port`, a Gateway whose HTTP listener
    is on the controller's HTTP port (a listener is served on the port it names, so the routes and the
    Ingresses answer on the same port)."""
    await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
    await client.request("POST", "/apis/networking.k8s.io/v1/ingressclasses", body=manifest.ingress_class())
    service = {
        "metadata": {"name": "pod"},
        "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80}]},
    }
    await client.request("POST", f"/api/v1/namespaces/{NS}/services", body=service)
    endpoint_slice = {
        "metadata": {"name": "pod-1", "labels": {"kubernetes.io/service-name": "pod"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": pod_port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [default_route_ip()], "conditions": {"ready": True}}],
    }
    await client.request(
        "POST", f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices", body=endpoint_slice
    )
    if gateway_port is not None:
        await client.request("POST", f"{GW}/v1/gatewayclasses", body=manifest.gateway_class())
        listener = {"name": "http", "protocol": "HTTP", "port": gateway_port}
        body = {
            "metadata": {"name": "gw"},
            "spec": {"gatewayClassName": "pykubelet", "listeners": [listener]},
        }
        await client.request("POST", f"{GW}/v1/namespaces/{NS}/gateways", body=body)


async def measure_kind(
    client: KubeClient, controller: IngressController, port: int, kind: str, routes: int, changes: int
) -> dict:
    spec = KINDS[kind]
    host = spec["host"]
    began = time.perf_counter()
    for i in range(routes):
        await client.request("POST", spec["plural"], body=spec["make"](i, f"/a{i}"))
    created = time.perf_counter() - began
    last_served = await served(port, f"{host}{routes - 1}.example", f"/a{routes - 1}")
    latencies = []
    for n in range(changes):
        i = (n * 37) % routes
        body = {"spec": spec["make"](i, f"/b{n}")["spec"]}
        began = time.perf_counter()
        await client.request(
            "PATCH",
            f"{spec['plural']}/{spec['make'](i, '')['metadata']['name']}",
            body=body,
            content_type="application/merge-patch+json",
        )
        latencies.append(await served(port, f"{host}{i}.example", f"/b{n}"))
    return {
        f"{kind}_create_all_s": round(created, 2),
        f"{kind}_last_created_to_served_s": round(last_served, 3),
        f"{kind}_change_to_served_p50_s": round(pct(latencies, 0.5), 3),
        f"{kind}_change_to_served_p99_s": round(pct(latencies, 0.99), 3),
        f"{kind}_change_to_served_max_s": round(max(latencies), 3),
    }


async def nginx_test(nginx: Nginx, text: str) -> float:
    """Seconds `nginx -t` takes on `text`."""
    candidate = nginx.root / "nginx.conf.timed"
    candidate.write_text(text)
    began = time.perf_counter()
    why = await nginx.test(candidate)
    assert why is None, why
    return time.perf_counter() - began


async def reload_cost(controller: IngressController, tries: int, legacy: bool) -> dict:
    builds, applies = [], []
    text = ""
    for n in range(tries):
        began = time.perf_counter()
        ingresses = controller._ours()
        config, _ = controller._build(ingresses, controller._cluster())
        text = controller_module.render(config, controller.config.listen, controller.files)
        builds.append(time.perf_counter() - began)
        began = time.perf_counter()
        await controller.nginx.apply(text + f"# reload {n}\n")  # as the controller applies a change
        applies.append(time.perf_counter() - began)
    figures = {
        "config_bytes": len(text),
        "config_locations": text.count("location "),
        "config_certificates_named": text.count("ssl_certificate "),
        "build_and_render_p50_s": round(statistics.median(builds), 3),
        "nginx_test_and_reload_p50_s": round(statistics.median(applies), 3),
    }
    if not legacy:
        files, tester = controller.files, Nginx(controller.nginx.root, controller.nginx.binary)
        figures["nginx_test_alone_s"] = round(await nginx_test(tester, text), 3)
        figures["nginx_test_per_server_certificates_s"] = round(
            await nginx_test(tester, per_server_certificates(text, files)), 3
        )
        figures["nginx_test_without_tls_s"] = round(await nginx_test(tester, without_tls(text)), 3)
    return figures


async def measure(
    work: Path, server: ApiServer, routes: int, changes: int, crds: Path | None, legacy: bool = False
) -> dict:
    client = KubeClient(load_kubeconfig(server.kubeconfig), qps=1000, burst=1000)
    pod_root = work / "pod"
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (pod_root / "tmp" / kind).mkdir(parents=True, exist_ok=True)
    pod_port = free_port(default_route_ip())
    pod = Nginx(pod_root)
    listen = Listen("127.0.0.1", free_port(), free_port())
    config = ControllerConfig(
        controller_name=manifest.CONTROLLER,
        state_dir=work / "ingress",
        listen=listen,
        publish_address="127.0.0.1",
        election=LeaderElection("bench", enabled=False),
    )
    controller = (PreviousController if legacy else IngressController)(client, config)
    stop = asyncio.Event()
    runner = asyncio.create_task(controller.run(stop))
    figures: dict[str, Any] = {"routes": routes, "changes": changes}
    try:
        await pod.apply(pod_config(pod_root, pod_port, default_route_ip()))
        await base_objects(client, pod_port, listen.http_port if crds is not None else None)
        figures.update(await measure_kind(client, controller, listen.http_port, "ingress", routes, changes))
        if crds is not None:
            figures.update(
                await measure_kind(client, controller, listen.http_port, "httproute", routes, changes)
            )
        figures.update(await reload_cost(controller, 5 if changes > 3 else 2, legacy))
        figures["reloads"] = controller.nginx.reloads
    finally:
        stop.set()
        await runner
        await pod.stop()
        await client.close()
    return figures


def run_once(work: Path, routes: int, changes: int, crds: Path | None, legacy: bool) -> dict:
    with ApiServer(work / "api") as server:
        if crds is not None:
            install_crds(server, crds)
        if not legacy:
            return asyncio.run(measure(work, server, routes, changes, crds))
        with previous_loop():
            return asyncio.run(measure(work, server, routes, changes, crds, legacy=True))


def install_crds(server: ApiServer, crds: Path) -> None:
    kubectl = ["kubectl", "--kubeconfig", str(server.kubeconfig)]
    subprocess.run(
        [*kubectl, "apply", "--server-side", "-f", str(crds)], check=True, capture_output=True, timeout=120
    )
    subprocess.run(
        [*kubectl, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
        check=True,
        capture_output=True,
        timeout=90,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=15)
    parser.add_argument("--after-only", action="store_true", help="skip the controller as it was before")
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    if args.smoke:
        args.routes, args.changes = 5, 2
    crds = find_crds()
    work = Path(tempfile.mkdtemp(prefix="ingress-routes-"))
    started, load_start = time.monotonic(), os.getloadavg()[0]
    try:
        data: dict[str, Any] = {}
        if not (args.after_only or args.smoke):  # the smoke run (the suite's) stays as short as before
            before = run_once(work / "before", args.routes, args.changes, crds, legacy=True)
            data.update({f"before_{k}": v for k, v in before.items() if k not in ("routes", "changes")})
        data.update(run_once(work / "after", args.routes, args.changes, crds, legacy=False))
        leaked = Scope.of(work).leaked()
        assert not leaked, f"left {leaked}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [(k, v) for k, v in data.items() if k.endswith("_s")]
    kinds = "Ingresses and HTTPRoutes" if crds is not None else "Ingresses (no Gateway API CRDs found)"
    markdown = "\n".join(
        [
            f"# Ingress controller at {data['routes']} {kinds}: change to served, and reload cost",
            "",
            "`before_` figures: the controller as it was before, in the same run, on its own API server (each "
            "sync held until the statuses it decided were written, a PUT per object; 0.1 s after every wake; "
            "no gc.freeze of the caches); the others: as it is (statuses written beside the syncs, a change "
            "after a quiet spell synced at once, the cached objects frozen out of the GC's full passes).",
            f"Load average (1 min) at the start {load_start:.1f}, at the end {os.getloadavg()[0]:.1f}.",
            "",
            "| figure | value |",
            "| --- | --- |",
            *(f"| {k} | {v} |" for k, v in data.items()),
            "",
            "change_to_served: one object's Exact path patched through the API until the new path answers "
            "200 through nginx (informer, coalescing, build, render, SIGHUP, the master parsing it, new "
            "workers answering); goal p99 < 1 s (of "
            f"{data['changes']} changes, the p99 is the slowest). Reload cost at that "
            "size: build_and_render is the configuration made from the caches, nginx_test_and_reload the "
            "controller's nginx.apply (SIGHUP to the master until its new workers started); "
            "nginx_test_alone on the configuration as rendered now, "
            "nginx_test_per_server_certificates as rendered before, nginx_test_without_tls with no TLS "
            f"server at all. {time.monotonic() - started:.0f} s in all, on a shared 2-core machine.",
        ]
    )
    write_report(out, "ingress-routes", data, markdown, bar_svg("ingress controller at scale", rows, "s"))
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
