"""Parsing of the plugin's network configuration and the CNI_* environment.

Kept free of pyroute2 so the thin paths (client, service framing, conflist writer) can import it
cheaply and so unit tests can exercise parsing without root.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.cni import errors
from agent.cni.errors import CniError

SUPPORTED_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
DEFAULT_DATA_DIR = "/var/lib/cni/networks"
DEFAULT_BRIDGE = "cni0"
_CONTAINER_ID = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*")


@dataclass(frozen=True)
class IPRange:
    """One host-local style range: addresses rangeStart..rangeEnd of subnet, gateway excluded."""

    subnet: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address
    start: ipaddress.IPv4Address
    end: ipaddress.IPv4Address

    def __contains__(self, ip: object) -> bool:
        return isinstance(ip, ipaddress.IPv4Address) and self.start <= ip <= self.end

    def candidates(self) -> list[ipaddress.IPv4Address]:
        """Every allocatable address in order; the gateway is never handed out."""
        return list(self.iter_from(self.start))

    @property
    def size(self) -> int:
        return int(self.end) - int(self.start) + 1 - (1 if self.gateway in self else 0)

    def iter_from(self, first: ipaddress.IPv4Address) -> Iterator[ipaddress.IPv4Address]:
        """Allocatable addresses from `first` to the end of the range (lazily: a /16 has 65k)."""
        gw = int(self.gateway)
        for i in range(max(int(first), int(self.start)), int(self.end) + 1):
            if i != gw:
                yield ipaddress.IPv4Address(i)


@dataclass(frozen=True)
class PortMapping:
    """A hostPort DNAT request from the runtime's portMappings capability."""

    host_port: int
    container_port: int
    protocol: str = "tcp"
    host_ip: str = ""


@dataclass(frozen=True)
class Route:
    dst: ipaddress.IPv4Network
    gw: ipaddress.IPv4Address | None = None


@dataclass
class NetConf:
    """The subset of the bridge + host-local configuration this plugin implements."""

    cni_version: str
    name: str
    type: str
    bridge: str = DEFAULT_BRIDGE
    ranges: list[IPRange] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    mtu: int = 0
    is_gateway: bool = True
    is_default_gateway: bool = True
    ip_masq: bool = False
    hairpin_mode: bool = True
    data_dir: str = DEFAULT_DATA_DIR
    port_mappings: list[PortMapping] = field(default_factory=list)
    prev_result: dict[str, Any] | None = None
    valid_attachments: list[tuple[str, str]] | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        return self.ranges[0].gateway

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return self.ranges[0].subnet


@dataclass(frozen=True)
class CniArgs:
    """The CNI_* environment of one invocation."""

    command: str
    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    args: str = ""
    path: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> CniArgs:
        return cls(
            command=env.get("CNI_COMMAND", ""),
            container_id=env.get("CNI_CONTAINERID", ""),
            netns=env.get("CNI_NETNS", ""),
            ifname=env.get("CNI_IFNAME", ""),
            args=env.get("CNI_ARGS", ""),
            path=env.get("CNI_PATH", ""),
        )

    def require(self, *names: str) -> None:
        """Raise the spec's 'invalid environment' error for any missing variable."""
        missing = [n for n in names if not getattr(self, n)]
        if missing:
            env_names = {"container_id": "CNI_CONTAINERID", "netns": "CNI_NETNS", "ifname": "CNI_IFNAME"}
            raise CniError(
                errors.INVALID_ENV, "missing environment variables", ", ".join(env_names[m] for m in missing)
            )
        # the spec's formats; they also keep ids out of nftables comments and interface names sane
        if self.container_id and not _CONTAINER_ID.fullmatch(self.container_id):
            raise CniError(errors.INVALID_ENV, "invalid CNI_CONTAINERID", repr(self.container_id))
        if self.ifname and not _valid_ifname(self.ifname):
            raise CniError(errors.INVALID_ENV, "invalid CNI_IFNAME", repr(self.ifname))


def _valid_ifname(name: str) -> bool:
    """Linux interface name rules (what keeps it safe inside /proc and /sys paths), minus quotes and
    backslashes, which the kernel allows but which would break out of an nftables comment."""
    return 0 < len(name) <= 15 and name not in (".", "..") and not any(c in name for c in '/: \t\n"\\')


def _ci_get(mapping: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """Case-insensitive lookup: containerd sends HostPort while the spec examples use hostPort."""
    lowered = key.lower()
    for k, v in mapping.items():
        if isinstance(k, str) and k.lower() == lowered:
            return v
    return default


def _parse_range(raw: Mapping[str, Any]) -> IPRange:
    try:
        subnet = ipaddress.ip_network(str(raw["subnet"]), strict=False)
    except (KeyError, ValueError) as exc:
        raise CniError(errors.INVALID_CONFIG, "invalid range subnet", repr(raw)) from exc
    if not isinstance(subnet, ipaddress.IPv4Network):
        raise CniError(errors.INVALID_CONFIG, "only IPv4 ranges are supported", str(subnet))
    if subnet.num_addresses < 4:
        raise CniError(errors.INVALID_CONFIG, "subnet too small", str(subnet))
    try:
        gateway = ipaddress.IPv4Address(raw.get("gateway") or subnet.network_address + 1)
        start = ipaddress.IPv4Address(raw.get("rangeStart") or subnet.network_address + 1)
        end = ipaddress.IPv4Address(raw.get("rangeEnd") or subnet.broadcast_address - 1)
    except ValueError as exc:
        raise CniError(errors.INVALID_CONFIG, "invalid range address", str(exc)) from exc
    for ip in (gateway, start, end):
        if ip not in subnet:
            raise CniError(errors.INVALID_CONFIG, "range address outside subnet", f"{ip} not in {subnet}")
    if start > end:
        raise CniError(errors.INVALID_CONFIG, "rangeStart after rangeEnd", f"{start} > {end}")
    return IPRange(subnet=subnet, gateway=gateway, start=start, end=end)


def _parse_ranges(conf: Mapping[str, Any]) -> list[IPRange]:
    ipam = conf.get("ipam") or {}
    raw_sets = ipam.get("ranges") or conf.get("ranges")
    if raw_sets is None:
        subnet = ipam.get("subnet") or conf.get("subnet")
        if subnet is None:
            raise CniError(errors.INVALID_CONFIG, "no subnet", "set ipam.ranges or subnet")
        raw_sets = [
            [
                {
                    k: v
                    for k, v in {**conf, **ipam}.items()
                    if k in ("subnet", "gateway", "rangeStart", "rangeEnd")
                }
            ]
        ]
    if not isinstance(raw_sets, list) or not raw_sets:
        raise CniError(errors.INVALID_CONFIG, "ranges must be a non-empty list")
    # host-local allocates one IP per range set; we implement the first IPv4 set, which is all a
    # single-stack pod network needs.
    first = raw_sets[0]
    if isinstance(first, dict):
        first = [first]
    return [_parse_range(r) for r in first]


def _parse_port_mappings(runtime: Mapping[str, Any]) -> list[PortMapping]:
    out: list[PortMapping] = []
    for pm in _ci_get(runtime, "portMappings", None) or []:
        if not isinstance(pm, Mapping):
            raise CniError(errors.INVALID_CONFIG, "portMappings entry is not an object", repr(pm))
        try:
            host_port = int(_ci_get(pm, "hostPort", 0))
            container_port = int(_ci_get(pm, "containerPort", 0))
        except (TypeError, ValueError) as exc:
            raise CniError(errors.INVALID_CONFIG, "invalid port mapping", repr(pm)) from exc
        protocol = str(_ci_get(pm, "protocol", "tcp") or "tcp").lower()
        if protocol not in ("tcp", "udp", "sctp"):
            raise CniError(errors.INVALID_CONFIG, "unsupported protocol", protocol)
        if not (0 < host_port < 65536 and 0 < container_port < 65536):
            raise CniError(errors.INVALID_CONFIG, "port out of range", repr(pm))
        host_ip = str(_ci_get(pm, "hostIP", "") or "")
        if host_ip in ("0.0.0.0", "::"):
            host_ip = ""
        if host_ip:
            try:
                ip = ipaddress.ip_address(host_ip)
            except ValueError as exc:
                raise CniError(errors.INVALID_CONFIG, "invalid hostIP", host_ip) from exc
            if ip.version != 4:
                continue  # IPv6 host ports are not implemented (the pod network is IPv4 only)
        out.append(PortMapping(host_port, container_port, protocol, host_ip))
    return out


def _parse_routes(conf: Mapping[str, Any]) -> list[Route]:
    routes: list[Route] = []
    for r in (conf.get("ipam") or {}).get("routes") or []:
        try:
            dst = ipaddress.ip_network(r["dst"], strict=False)
            gw = ipaddress.IPv4Address(r["gw"]) if r.get("gw") else None
        except (KeyError, ValueError, TypeError) as exc:
            raise CniError(errors.INVALID_CONFIG, "invalid route", repr(r)) from exc
        if isinstance(dst, ipaddress.IPv4Network):
            routes.append(Route(dst, gw))
    return routes


def _bool(conf: Mapping[str, Any], key: str, default: bool) -> bool:
    value = conf.get(key, default)
    if not isinstance(value, bool):
        raise CniError(errors.INVALID_CONFIG, f"{key} must be a boolean", repr(value))
    return value


def parse_netconf(data: bytes | str) -> NetConf:
    """Decode stdin into a NetConf, raising CniError with the spec's decode/config codes."""
    try:
        conf = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CniError(errors.DECODE_FAILURE, "failed to decode network configuration", str(exc)) from exc
    if not isinstance(conf, dict):
        raise CniError(errors.DECODE_FAILURE, "network configuration is not a JSON object")
    version = conf.get("cniVersion", "")
    if version not in SUPPORTED_VERSIONS:
        raise CniError(
            errors.INCOMPATIBLE_VERSION,
            "incompatible CNI versions",
            f"config is {version!r}, plugin supports {', '.join(SUPPORTED_VERSIONS)}",
        )
    name = conf.get("name")
    if not isinstance(name, str) or not _CONTAINER_ID.fullmatch(name):  # the spec's network name format
        raise CniError(errors.INVALID_CONFIG, "network name missing or invalid", repr(name))
    plugin_type = str(conf.get("type", ""))
    nc = NetConf(cni_version=version, name=name, type=plugin_type, raw=conf)
    prev = conf.get("prevResult")
    nc.prev_result = prev if isinstance(prev, dict) else None
    attachments = conf.get("cni.dev/valid-attachments")
    if isinstance(attachments, list):
        nc.valid_attachments = [
            (str(_ci_get(a, "containerID", "")), str(_ci_get(a, "ifname", "")))
            for a in attachments
            if isinstance(a, dict)
        ]
    if plugin_type == "loopback":
        return nc  # the loopback network carries no addressing
    bridge = conf.get("bridge", DEFAULT_BRIDGE)
    if not isinstance(bridge, str) or not _valid_ifname(bridge):
        raise CniError(errors.INVALID_CONFIG, "invalid bridge name", repr(bridge))
    nc.bridge = bridge
    nc.ranges = _parse_ranges(conf)
    nc.routes = _parse_routes(conf)
    mtu = conf.get("mtu", 0)
    if not isinstance(mtu, int) or mtu < 0 or (mtu and mtu < 68):
        raise CniError(errors.INVALID_CONFIG, "invalid mtu", repr(mtu))
    nc.mtu = mtu
    nc.is_gateway = _bool(conf, "isGateway", True)
    nc.is_default_gateway = _bool(conf, "isDefaultGateway", True)
    if nc.is_default_gateway:
        nc.is_gateway = True
    nc.ip_masq = _bool(conf, "ipMasq", False)
    nc.hairpin_mode = _bool(conf, "hairpinMode", True)
    data_dir = conf.get("dataDir") or (conf.get("ipam") or {}).get("dataDir") or DEFAULT_DATA_DIR
    nc.data_dir = str(data_dir)
    runtime = conf.get("runtimeConfig") or {}
    if isinstance(runtime, Mapping):
        nc.port_mappings = _parse_port_mappings(runtime)
    return nc
