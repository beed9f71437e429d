"""Service environment variables, as upstream's getServiceEnvVarMap and envvars.FromServices make them:
for every Service with a cluster IP in the pod's namespace (when spec.enableServiceLinks, default true)
and always for `kubernetes` in `default`, `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT` (the first port),
`<NAME>_SERVICE_PORT_<PORTNAME>` for named ports, and the Docker-link variables `<NAME>_PORT`,
`<NAME>_PORT_<port>_<PROTO>` with `_PROTO`, `_PORT` and `_ADDR`. Names are upper-cased with `-` as `_`.

They may be referenced as $(VAR) by the container's own variables, which win over them.
"""

from __future__ import annotations

from typing import Any

MASTER_SERVICES = ("kubernetes",)
NOT_SYNCED = "services have not yet been read at least once, cannot construct envvars"


def _var(name: str) -> str:
    return name.upper().replace("-", "_")


def _ip_set(service: dict[str, Any]) -> bool:
    ip = (service.get("spec") or {}).get("clusterIP") or ""
    return ip not in ("", "None")


def visible_services(pod: dict[str, Any], services: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ns = pod["metadata"]["namespace"]
    links = (pod.get("spec") or {}).get("enableServiceLinks")
    links = True if links is None else bool(links)
    chosen: dict[str, dict[str, Any]] = {}
    for svc in services:
        meta = svc.get("metadata") or {}
        if not _ip_set(svc):
            continue
        name = meta.get("name", "")
        if meta.get("namespace") == "default" and name in MASTER_SERVICES:
            chosen.setdefault(name, svc)
        elif meta.get("namespace") == ns and links:
            chosen[name] = svc
    return [chosen[name] for name in sorted(chosen)]


def _link_variables(prefix: str, ip: str, ports: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for i, port in enumerate(ports):
        proto = port.get("protocol") or "TCP"
        number = int(port.get("port") or 0)
        host_port = f"[{ip}]:{number}" if ":" in ip else f"{ip}:{number}"
        url = f"{proto.lower()}://{host_port}"
        if i == 0:
            out.append((f"{prefix}_PORT", url))
        base = f"{prefix}_PORT_{number}_{proto.upper()}"
        out += [
            (base, url),
            (f"{base}_PROTO", proto.lower()),
            (f"{base}_PORT", str(number)),
            (f"{base}_ADDR", ip),
        ]
    return out


def service_env(pod: dict[str, Any], services: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for svc in visible_services(pod, services):
        spec = svc.get("spec") or {}
        ip = spec["clusterIP"]
        ports = spec.get("ports") or []
        prefix = _var(svc["metadata"]["name"])
        out.append((f"{prefix}_SERVICE_HOST", ip))
        if ports:
            out.append((f"{prefix}_SERVICE_PORT", str(int(ports[0].get("port") or 0))))
        for port in ports:
            if port.get("name"):
                out.append((f"{prefix}_SERVICE_PORT_{_var(port['name'])}", str(int(port.get("port") or 0))))
        out += _link_variables(prefix, ip, ports)
    return out
