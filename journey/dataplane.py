"""The dataplane tried for real: for each Service of the journey that has a ready endpoint, connect to
its cluster address and port from inside one of the journey's running pods (pods/exec, as `kubectl exec
POD -- nc ...` would), and to one ready endpoint the same way. What the API shows cannot say whether
traffic arrives; only a connection can.

The connection is busybox's (and most images') `nc -w 3 IP PORT -e true`: exit 0 connected, 1 refused or
timed out. An image without nc, a caller who may not create pods/exec, or no running pod to try from
leave the boundary untried, and the verdict says why. TCP ports only (UDP has no handshake to see)."""

from __future__ import annotations

import asyncio
from typing import Any

from journey.diagnose import Facts, Probe
from journey.graph import Journey, Obj, meta
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.podexec import exec_in_pod

CONNECT_TIMEOUT = 3  # seconds nc waits for the handshake
EXEC_BOUND = 20.0  # seconds one exec may take, all told
NO_ADDRESS = ("", "None")


def _ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()
    )
    return status.get("phase") == "Running" and ready and not meta(pod).get("deletionTimestamp")


def _host_port(ip: str, port: Any) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def targets(journey: Journey) -> list[tuple[str, str, int, str, int]]:
    """(service label, cluster IP, port, endpoint IP, endpoint port) for each Service with a cluster
    address, a TCP port and a ready endpoint behind that port."""
    out = []
    for svc in journey.of_kind("Service"):
        spec, name = svc.get("spec") or {}, meta(svc).get("name")
        ip = spec.get("clusterIP") or ""
        port = next((p for p in spec.get("ports") or () if (p.get("protocol") or "TCP") == "TCP"), None)
        if spec.get("type") == "ExternalName" or ip in NO_ADDRESS or port is None:
            continue
        endpoint = _ready_endpoint(journey, str(name), str(port.get("name") or ""))
        if endpoint is not None:
            out.append((f"Service {name}", ip, int(port["port"]), *endpoint))
    return out


def _ready_endpoint(journey: Journey, service: str, port_name: str) -> tuple[str, int] | None:
    for s in journey.of_kind("EndpointSlice"):
        if (meta(s).get("labels") or {}).get("kubernetes.io/service-name") != service:
            continue
        port = next((p for p in s.get("ports") or () if (p.get("name") or "") == port_name), None)
        for e in s.get("endpoints") or ():
            if port and port.get("port") and (e.get("conditions") or {}).get("ready") and e.get("addresses"):
                return str(e["addresses"][0]), int(port["port"])
    return None


async def _connects(client: KubeClient, pod: Obj, ip: str, port: int) -> tuple[bool | None, str]:
    m = meta(pod)
    container = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name")
    command = ["nc", "-w", str(CONNECT_TIMEOUT), ip, str(port), "-e", "true"]
    async with asyncio.timeout(EXEC_BOUND):
        done = await exec_in_pod(client, str(m.get("namespace")), str(m.get("name")), command, container)
    if done.exit_code in (0, 1):
        return done.exit_code == 0, ""
    why = done.message or done.stderr.strip() or f"exit code {done.exit_code}"
    return None, f"could not run nc in pod {m.get('name')}: {why}"


async def probe(client: KubeClient, facts: Facts) -> None:
    """Fill facts.probes (or facts.probes_note)."""
    journey = facts.journey
    assert journey is not None
    wanted = targets(journey)
    if not wanted:
        return
    pods = sorted((p for p in journey.of_kind("Pod") if _ready(p)), key=lambda p: str(meta(p).get("name")))
    if not pods:
        facts.probes_note = "no running, ready pod of the journey to try the Service from"
        return
    pod = pods[0]
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    for service, ip, port, endpoint_ip, endpoint_port in wanted:
        try:
            answered, note = await _connects(client, pod, ip, port)
            reached = (
                (await _connects(client, pod, endpoint_ip, endpoint_port))[0] if answered is False else None
            )
        except ApiError as err:
            facts.probes_note = f"could not exec in pod {meta(pod).get('name')}: {err.message or err}"
            facts.probes.clear()
            return
        except TimeoutError:
            answered, reached, note = (
                None,
                None,
                f"exec in pod {meta(pod).get('name')} took over {EXEC_BOUND:.0f} s",
            )
        facts.probes.append(
            Probe(
                service,
                _host_port(ip, port),
                _host_port(endpoint_ip, endpoint_port),
                str(meta(pod).get("name")),
                node,
                answered,
                reached,
                note,
            )
        )
