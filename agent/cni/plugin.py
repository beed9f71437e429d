"""The CNI commands (ADD, DEL, CHECK, VERSION, GC, STATUS) as one pure entry point.

`handle(env, stdin)` turns one plugin invocation into (exit code, stdout, stderr). The same function
runs in-process in the standalone executable and inside the long-lived network service, so the two
paths cannot drift apart.
"""

from __future__ import annotations

import ipaddress
import json
import os
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.cni import datapath, errors, nat
from agent.cni.errors import CniError
from agent.cni.ipam import Allocation, HostLocalStore
from agent.cni.netconf import SUPPORTED_VERSIONS, CniArgs, NetConf, parse_netconf
from agent.cni.netns import open_netns

RESULT_VERSION = "1.0.0"


@dataclass
class Response:
    code: int
    stdout: str = ""
    stderr: str = ""


def handle(env: Mapping[str, str], stdin: bytes) -> Response:
    """Run one CNI command; every failure becomes the spec's error JSON and a non-zero exit."""
    args = CniArgs.from_env(env)
    version = _peek_version(stdin)
    try:
        if args.command == "VERSION":
            return Response(
                0, json.dumps({"cniVersion": version, "supportedVersions": list(SUPPORTED_VERSIONS)})
            )
        if args.command not in ("ADD", "DEL", "CHECK", "GC", "STATUS"):
            raise CniError(errors.INVALID_ENV, "unknown CNI_COMMAND", repr(args.command))
        conf = parse_netconf(stdin)
        out = _COMMANDS[args.command](conf, args)
        return Response(0, json.dumps(out) if out is not None else "")
    except CniError as exc:
        return Response(1, exc.to_json(version), f"{args.command} {args.container_id}: {exc}\n")
    except Exception as exc:  # a bug or an unexpected kernel answer: still answer in CNI terms
        err = CniError(errors.INTERNAL, f"{type(exc).__name__}: {exc}")
        return Response(1, err.to_json(version), traceback.format_exc())


def _peek_version(stdin: bytes) -> str:
    try:
        v = json.loads(stdin).get("cniVersion")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return RESULT_VERSION
    return v if v in SUPPORTED_VERSIONS else RESULT_VERSION


def _result_version(conf: NetConf) -> str:
    """0.x configs get 0.x results; 1.x configs get 1.0.0 results, the newest format containerd 1.6
    parses (1.1 changed nothing in the ADD result that we fill in)."""
    return conf.cni_version if conf.cni_version < "1.0.0" else RESULT_VERSION


def _container_routes(conf: NetConf) -> list[tuple[ipaddress.IPv4Network, ipaddress.IPv4Address]]:
    routes: list[tuple[ipaddress.IPv4Network, ipaddress.IPv4Address]] = []
    if conf.is_default_gateway:
        routes.append((ipaddress.IPv4Network("0.0.0.0/0"), conf.gateway))
    for r in conf.routes:
        entry = (r.dst, r.gw or conf.gateway)
        if entry not in routes:
            routes.append(entry)
    return routes


# -- loopback -----------------------------------------------------------------------------------


def _loopback(conf: NetConf, args: CniArgs) -> dict[str, Any] | None:
    if args.command == "ADD":
        args.require("container_id", "netns", "ifname")
        lo = datapath.bring_up_loopback(args.netns)
        if conf.prev_result:
            # chained after the bridge plugin: pass the pod's result through, as the reference does
            return {**conf.prev_result, "cniVersion": _result_version(conf)}
        ips: dict[str, Any] = {"address": "127.0.0.1/8", "interface": 0}
        if conf.cni_version < "1.0.0":
            ips["version"] = "4"
        return {
            "cniVersion": _result_version(conf),
            "interfaces": [{"name": lo.name, "mac": lo.mac, "sandbox": lo.sandbox}],
            "ips": [ips],
            "dns": {},
        }
    if args.command == "CHECK":
        args.require("container_id", "netns", "ifname")
        state = datapath.inspect_container(args.netns, "lo")
        if state is None or not state.up:
            raise CniError(errors.CHECK_FAILED, "loopback is not up", args.netns)
    return None  # DEL, GC, STATUS: nothing to undo, the namespace takes lo with it


# -- ADD ----------------------------------------------------------------------------------------


def cmd_add(conf: NetConf, args: CniArgs) -> dict[str, Any] | None:
    if conf.type == "loopback":
        return _loopback(conf, args)
    args.require("container_id", "netns", "ifname")
    netns_fd = open_netns(args.netns)
    try:
        alloc, bridge, veth, container = _attach(conf, args, netns_fd)
    finally:
        os.close(netns_fd)
    ip_entry: dict[str, Any] = {"address": str(alloc.interface), "interface": 2}
    if conf.is_gateway:
        ip_entry["gateway"] = str(alloc.range.gateway)
    if conf.cni_version < "1.0.0":
        ip_entry["version"] = "4"
    result: dict[str, Any] = {
        "cniVersion": _result_version(conf),
        "interfaces": [
            {"name": bridge.name, "mac": bridge.mac},
            {"name": veth.host.name, "mac": veth.host.mac},
            {"name": container.name, "mac": container.mac, "sandbox": container.sandbox},
        ],
        "ips": [ip_entry],
        "routes": [{"dst": str(dst), "gw": str(gw)} for dst, gw in _container_routes(conf)],
        "dns": {},
    }
    return result


def _attach(
    conf: NetConf, args: CniArgs, netns_fd: int
) -> tuple[Allocation, datapath.LinkInfo, datapath.VethPair, datapath.LinkInfo]:
    """Reserve an address and wire the pod to the bridge; on any failure undo what was done."""
    store = HostLocalStore(conf.data_dir, conf.name)
    alloc = store.allocate(args.container_id, args.ifname, conf.ranges)
    key = nat.attachment_key(args.container_id, args.ifname)
    host_name = datapath.host_veth_name(args.container_id, args.ifname)
    try:
        gw_iface = ipaddress.IPv4Interface(f"{alloc.range.gateway}/{alloc.range.subnet.prefixlen}")
        with datapath.host_netlink() as rtnl:
            bridge = datapath.ensure_bridge(
                rtnl, conf.bridge, gw_iface if conf.is_gateway else None, conf.mtu, bool(conf.port_mappings)
            )
            if conf.is_gateway or conf.ip_masq:
                datapath.enable_ip_forward()
            nat.ensure_network(alloc.range.subnet, conf.ip_masq)
            veth = datapath.create_veth(
                rtnl, host_name, netns_fd, args.ifname, bridge.index, conf.mtu, conf.hairpin_mode
            )
        container = datapath.configure_container(
            args.netns, veth, args.ifname, alloc.interface, _container_routes(conf)
        )
        nat.add_port_mappings(key, alloc.ip, conf.port_mappings)
    except BaseException:
        _undo(args, store, host_name, key)
        raise
    return alloc, bridge, veth, container


def _undo(args: CniArgs, store: HostLocalStore, host_name: str, key: str) -> None:
    """Best-effort rollback of a half-done ADD so a retry starts clean."""
    for step in (
        lambda: nat.remove_port_mappings(key),
        lambda: _delete_host_veth(host_name),
        lambda: store.release(args.container_id, args.ifname),
    ):
        try:
            step()
        except Exception:
            pass


def _delete_host_veth(name: str) -> None:
    with datapath.host_netlink() as rtnl:
        datapath.delete_link(rtnl, name)


# -- DEL ----------------------------------------------------------------------------------------


def cmd_del(conf: NetConf, args: CniArgs) -> dict[str, Any] | None:
    """Undo ADD; every step tolerates the thing being gone already."""
    if conf.type == "loopback":
        return _loopback(conf, args)
    args.require("container_id", "ifname")
    if conf.port_mappings:
        # As upstream's portmap plugin: a DEL without port mappings has none to remove (the runtime
        # passes the pod's mappings again on DEL), so the NAT table is not even read; rules a DEL
        # could not name are GC's to remove.
        nat.remove_port_mappings(nat.attachment_key(args.container_id, args.ifname))
    _delete_host_veth(datapath.host_veth_name(args.container_id, args.ifname))
    HostLocalStore(conf.data_dir, conf.name).release(args.container_id, args.ifname, _prev_ips(conf))
    return None


def _prev_ips(conf: NetConf) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses of prevResult (libcni passes its cached ADD result to DEL)."""
    out = []
    for ip in (conf.prev_result or {}).get("ips") or []:
        try:
            iface = ipaddress.ip_interface(ip.get("address", ""))
        except (ValueError, AttributeError):
            continue
        if isinstance(iface, ipaddress.IPv4Interface):
            out.append(iface.ip)
    return out


# -- CHECK --------------------------------------------------------------------------------------


def cmd_check(conf: NetConf, args: CniArgs) -> dict[str, Any] | None:
    """Compare the kernel and IPAM with prevResult; any difference is an error."""
    if conf.type == "loopback":
        return _loopback(conf, args)
    args.require("container_id", "netns", "ifname")
    prev = conf.prev_result
    if not prev:
        raise CniError(errors.INVALID_CONFIG, "CHECK needs prevResult")
    fd = open_netns(args.netns)
    os.close(fd)
    state = datapath.inspect_container(args.netns, args.ifname)
    if state is None:
        raise CniError(errors.CHECK_FAILED, "container interface missing", f"{args.ifname} in {args.netns}")
    if not state.up:
        raise CniError(errors.CHECK_FAILED, "container interface is down", args.ifname)
    interfaces = prev.get("interfaces") or []
    for i, iface in enumerate(interfaces):
        if iface.get("sandbox") and iface.get("name") == args.ifname and iface.get("mac") != state.mac:
            raise CniError(
                errors.CHECK_FAILED, "container interface MAC changed", f"{iface.get('mac')} != {state.mac}"
            )
        if iface.get("sandbox") and iface.get("name") == args.ifname:
            container_index = i
            break
    else:
        container_index = None
    owned = HostLocalStore(conf.data_dir, conf.name).find(args.container_id, args.ifname)
    for ip in prev.get("ips") or []:
        if container_index is not None and ip.get("interface") not in (None, container_index):
            continue
        want = ipaddress.IPv4Interface(ip["address"])
        if want not in state.addresses:
            raise CniError(
                errors.CHECK_FAILED, "address missing on container interface", f"{want} on {args.ifname}"
            )
        if want.ip not in owned:
            raise CniError(
                errors.CHECK_FAILED, "address not reserved in IPAM", f"{want.ip} (reserved: {owned})"
            )
    have_routes = {dst for dst, _ in state.routes}
    for route in prev.get("routes") or []:
        dst = str(ipaddress.ip_network(route["dst"], strict=False))
        if dst not in have_routes:
            raise CniError(errors.CHECK_FAILED, "route missing in container", dst)
    with datapath.host_netlink() as rtnl:
        master = datapath.host_link_master(rtnl, datapath.host_veth_name(args.container_id, args.ifname))
    if master is None:
        raise CniError(errors.CHECK_FAILED, "host veth missing", args.container_id)
    if master != conf.bridge:
        raise CniError(errors.CHECK_FAILED, "host veth not on bridge", f"{master!r} != {conf.bridge!r}")
    return None


# -- GC and STATUS (CNI 1.1) ----------------------------------------------------------------------


def cmd_gc(conf: NetConf, args: CniArgs) -> dict[str, Any] | None:
    """Release everything not in cni.dev/valid-attachments."""
    if conf.type == "loopback":
        return None
    valid = set(conf.valid_attachments or [])
    freed = HostLocalStore(conf.data_dir, conf.name).gc(valid)
    for _, cid, ifname in freed:
        _delete_host_veth(datapath.host_veth_name(cid, ifname))
    nat.gc_port_mappings(conf.ranges[0].subnet, {nat.attachment_key(c, i) for c, i in valid})
    return None


def cmd_status(conf: NetConf, args: CniArgs) -> dict[str, Any] | None:
    if conf.type == "loopback":
        return None
    store = HostLocalStore(conf.data_dir, conf.name)
    try:
        with store.locked():
            pass
    except CniError as exc:
        raise CniError(errors.PLUGIN_NOT_AVAILABLE, "IPAM data dir not usable", str(exc)) from exc
    if store.free_count(conf.ranges) == 0:
        raise CniError(errors.PLUGIN_NOT_AVAILABLE, "no free addresses in range set")
    return None


_COMMANDS = {"ADD": cmd_add, "DEL": cmd_del, "CHECK": cmd_check, "GC": cmd_gc, "STATUS": cmd_status}
