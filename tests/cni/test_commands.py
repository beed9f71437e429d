"""Every CNI command through the installed executable, with and without the network service."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from cnitest import NETNS_DIR, CniFailed, Namespaces, Plugin, PodNetwork, ServiceThread, in_ns

from agent.cni import errors
from agent.cni.install import install_plugins

pytestmark = pytest.mark.integration


def error_of(plugin: Plugin, command: str, conf: dict | bytes, cid: str = "", netns: str = "") -> dict:
    code, out, _ = plugin.run(command, conf, cid, netns)
    assert code != 0, f"{command} unexpectedly succeeded: {out}"
    return json.loads(out)


def test_errors_have_spec_codes(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces
) -> None:
    ns = str(NETNS_DIR / namespaces.new())
    assert error_of(plugin, "ADD", b"{broken", "c", ns)["code"] == errors.DECODE_FAILURE
    assert (
        error_of(plugin, "ADD", network.conf(cniVersion="0.1.0"), "c", ns)["code"]
        == errors.INCOMPATIBLE_VERSION
    )
    assert error_of(plugin, "ADD", network.conf(ipam={}), "c", ns)["code"] == errors.INVALID_CONFIG
    assert error_of(plugin, "ADD", network.conf(), "", ns)["code"] == errors.INVALID_ENV
    assert error_of(plugin, "ADD", network.conf(), "c", "")["code"] == errors.INVALID_ENV
    assert error_of(plugin, "FROB", network.conf(), "c", ns)["code"] == errors.INVALID_ENV
    missing = error_of(plugin, "ADD", network.conf(), "c", "/var/run/netns/pkc-does-not-exist")
    assert missing["code"] == errors.INVALID_ENV and "does not exist" in missing["msg"]
    # none of the failed ADDs may keep an address
    assert network.ip_files() == []


def test_version(plugin: Plugin, service: object) -> None:
    out = plugin.call("VERSION", {"cniVersion": "1.0.0"})
    assert out["cniVersion"] == "1.0.0"
    assert {"0.4.0", "1.0.0", "1.1.0"} <= set(out["supportedVersions"])


def test_add_result_and_duplicate(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces
) -> None:
    ns = namespaces.new()
    conf = network.conf()
    result = plugin.add(conf, "dup", ns)
    assert result["cniVersion"] == "1.0.0"
    names = [i["name"] for i in result["interfaces"]]
    assert names[0] == network.bridge and names[2] == "eth0"
    assert result["interfaces"][2]["sandbox"] == str(NETNS_DIR / ns)
    assert result["ips"] == [
        {
            "address": f"{network.subnet.network_address + 2}/24",
            "interface": 2,
            "gateway": str(network.gateway),
        }
    ]
    assert result["routes"] == [{"dst": "0.0.0.0/0", "gw": str(network.gateway)}]
    # the MAC we report is the MAC the pod has
    link = json.loads(in_ns(ns, "ip", "-j", "link", "show", "eth0").stdout)[0]
    assert link["address"] == result["interfaces"][2]["mac"]
    open_fds = len(os.listdir("/proc/self/fd"))  # the service runs in this process
    for _ in range(5):
        with pytest.raises(CniFailed, match="duplicate allocation"):
            plugin.add(conf, "dup", ns)
    assert len(os.listdir("/proc/self/fd")) == open_fds, "a failed ADD leaked file descriptors"
    # the failed second ADD left the first attachment alone
    plugin.check(conf, result, "dup", ns)
    plugin.delete(conf, "dup", ns)


def test_del_is_idempotent(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces
) -> None:
    conf = network.conf(runtimeConfig={"portMappings": [{"hostPort": 18941, "containerPort": 80}]})
    plugin.delete(conf, "never-added", namespaces.new())
    ns = namespaces.new()
    plugin.add(conf, "gone", ns)
    namespaces.delete(ns)  # the runtime may destroy the netns before calling DEL
    plugin.call("DEL", conf, "gone", str(NETNS_DIR / ns))
    plugin.call("DEL", conf, "gone", "")  # and may call DEL again without a netns at all
    assert network.ip_files() == [] and network.nat_rules() == [] and network.bridge_ports() == []


def test_check_reports_removed_address(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces
) -> None:
    ns = namespaces.new()
    conf = network.conf()
    result = plugin.add(conf, "chk", ns)
    try:
        plugin.check(conf, result, "chk", ns)
        in_ns(ns, "ip", "addr", "del", result["ips"][0]["address"], "dev", "eth0")
        with pytest.raises(CniFailed) as info:
            plugin.check(conf, result, "chk", ns)
        assert info.value.error["code"] == errors.CHECK_FAILED
        assert "address missing" in info.value.error["msg"]
        assert result["ips"][0]["address"] in info.value.error["details"]
    finally:
        plugin.delete(conf, "chk", ns)


def test_check_reports_missing_interface_and_route(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces
) -> None:
    conf = network.conf()
    a, b = namespaces.new(), namespaces.new()
    ra, rb = plugin.add(conf, "chk-a", a), plugin.add(conf, "chk-b", b)
    try:
        in_ns(a, "ip", "route", "del", "default")
        with pytest.raises(CniFailed, match="route missing"):
            plugin.check(conf, ra, "chk-a", a)
        in_ns(b, "ip", "link", "del", "eth0")
        with pytest.raises(CniFailed, match="interface missing"):
            plugin.check(conf, rb, "chk-b", b)
        with pytest.raises(CniFailed) as info:
            plugin.call("CHECK", conf, "chk-a", str(NETNS_DIR / a))  # no prevResult
        assert info.value.error["code"] == errors.INVALID_CONFIG
    finally:
        plugin.delete(conf, "chk-a", a)
        plugin.delete(conf, "chk-b", b)


def test_gc_and_status(plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces) -> None:
    keep, drop = namespaces.new(), namespaces.new()
    mapped = network.conf(runtimeConfig={"portMappings": [{"hostPort": 18942, "containerPort": 80}]})
    plugin.add(mapped, "keep", keep)
    plugin.add(
        network.conf(runtimeConfig={"portMappings": [{"hostPort": 18943, "containerPort": 80}]}), "drop", drop
    )
    gc_conf = network.conf(
        cniVersion="1.1.0", **{"cni.dev/valid-attachments": [{"containerID": "keep", "ifname": "eth0"}]}
    )
    plugin.call("GC", gc_conf)
    assert len(network.ip_files()) == 1
    assert network.nat_rules() == ["keep/eth0"]
    assert len(network.bridge_ports()) == 1
    assert plugin.call("STATUS", network.conf(cniVersion="1.1.0")) is None
    plugin.delete(mapped, "keep", keep)


def test_status_reports_exhausted_range(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces
) -> None:
    tiny = network.conf(
        cniVersion="1.1.0",
        ipam={
            "ranges": [
                [
                    {
                        "subnet": str(network.subnet),
                        "rangeStart": str(network.subnet.network_address + 2),
                        "rangeEnd": str(network.subnet.network_address + 2),
                    }
                ]
            ]
        },
    )
    ns = namespaces.new()
    plugin.add(tiny, "only", ns)
    try:
        with pytest.raises(CniFailed) as info:
            plugin.call("STATUS", tiny)
        assert info.value.error["code"] == errors.PLUGIN_NOT_AVAILABLE
        with pytest.raises(CniFailed, match="no IP addresses available"):
            plugin.add(tiny, "second", namespaces.new())
    finally:
        plugin.delete(tiny, "only", ns)


def test_loopback_plugin(plugin_bin: Path, socket_path: str, service: object, namespaces: Namespaces) -> None:
    lo = Plugin(plugin_bin / "loopback", {"PYKUBELET_CNI_SOCKET": socket_path})
    ns = namespaces.new()
    conf = {"cniVersion": "1.0.0", "name": "cni-loopback", "type": "loopback"}
    result = lo.add(conf, "lo-test", ns)
    assert result["interfaces"][0]["name"] == "lo" and result["ips"][0]["address"] == "127.0.0.1/8"
    assert "UP" in json.loads(in_ns(ns, "ip", "-j", "link", "show", "lo").stdout)[0]["flags"]
    lo.delete(conf, "lo-test", ns)


def test_works_without_the_service(
    plugin: Plugin, socket_path: str, network: PodNetwork, namespaces: Namespaces
) -> None:
    """No service listening: the shim runs the in-process Python plugin instead."""
    assert not os.path.exists(socket_path)
    ns = namespaces.new()
    conf = network.conf()
    result = plugin.add(conf, "standalone", ns)
    assert ipaddress.ip_interface(result["ips"][0]["address"]).ip in network.subnet
    plugin.check(conf, result, "standalone", ns)
    plugin.delete(conf, "standalone", ns)


def test_python_forwarder_when_no_compiler(
    tmp_path: Path, socket_path: str, service: object, network: PodNetwork, namespaces: Namespaces
) -> None:
    bin_dir = tmp_path / "bin"
    install_plugins(bin_dir, socket_path, compile_shim=False)
    assert (bin_dir / "pykubelet-cni").read_text().startswith("#!")
    forwarder = Plugin(bin_dir / "pykubelet-cni")
    ns = namespaces.new()
    conf = network.conf()
    before = service.service.requests  # type: ignore[attr-defined]
    forwarder.add(conf, "fwd", ns)
    forwarder.delete(conf, "fwd", ns)
    assert service.service.requests == before + 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", ["0.4.0", "1.1.0"])
def test_result_versions(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces, version: str
) -> None:
    """0.x configs get 0.x results (with per-IP "version"); 1.1 configs get 1.0.0 results, which is
    what containerd 1.6 can parse."""
    ns = namespaces.new()
    conf = network.conf(cniVersion=version)
    result = plugin.add(conf, f"v{version}", ns)
    if version == "0.4.0":
        assert result["cniVersion"] == "0.4.0" and result["ips"][0]["version"] == "4"
    else:
        assert result["cniVersion"] == "1.0.0" and "version" not in result["ips"][0]
    plugin.delete(conf, f"v{version}", ns)


def test_large_config_through_shim_and_fallback(
    plugin: Plugin, socket_path: str, network: PodNetwork, namespaces: Namespaces
) -> None:
    """A config bigger than a pipe buffer reaches the plugin intact on both shim paths."""
    conf = network.conf(padding="x" * 200_000)
    ns = namespaces.new()
    result = plugin.add(conf, "big-fallback", ns)  # no service: the shim replays stdin to Python
    plugin.check(conf, result, "big-fallback", ns)
    with ServiceThread(socket_path):
        result = plugin.add(conf, "big-service", namespaces.new())
        assert ipaddress.ip_interface(result["ips"][0]["address"]).ip in network.subnet
        plugin.call("DEL", conf, "big-service", "")
    plugin.delete(conf, "big-fallback", ns)


def test_service_survives_garbage(plugin: Plugin, socket_path: str, service: object) -> None:
    for junk in (b"", b"GET / HTTP/1.1\r\n\r\n", b"PKCNI1\nCNI_COMMAND=ADD"):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(socket_path)
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            assert s.recv(100) == b""  # dropped without an answer
    # and it still answers proper requests afterwards
    assert plugin.call("VERSION", {"cniVersion": "1.0.0"})["cniVersion"] == "1.0.0"


def test_standalone_daemon(
    plugin: Plugin, socket_path: str, network: PodNetwork, namespaces: Namespaces
) -> None:
    """`pykubelet-cni serve` as its own process: serves the shim, and SIGTERM takes its socket away."""
    exe = shutil.which("pykubelet-cni")
    if exe is None:
        pytest.skip("pykubelet-cni console script not installed (pip install -e .)")
    daemon = subprocess.Popen([exe, "serve", "--socket", socket_path], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(socket_path):
            assert daemon.poll() is None and time.monotonic() < deadline, "daemon did not come up"
            time.sleep(0.05)
        ns = namespaces.new()
        conf = network.conf()
        plugin.add(conf, "daemon", ns)
        plugin.delete(conf, "daemon", ns)
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=30)
    assert daemon.returncode == 0, err
    assert "cni ADD" not in err  # no failed request was logged
    assert not os.path.exists(socket_path)


def test_mtu_hairpin_and_no_default_route(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces
) -> None:
    ns = namespaces.new()
    conf = network.conf(
        mtu=1400,
        hairpinMode=False,
        isDefaultGateway=False,
        ipam={
            "ranges": [[{"subnet": str(network.subnet)}]],
            "routes": [{"dst": "192.168.77.0/24"}],
        },
    )
    result = plugin.add(conf, "knobs", ns)
    host_veth = result["interfaces"][1]["name"]
    try:
        assert Path(f"/sys/class/net/{host_veth}/brport/hairpin_mode").read_text().strip() == "0"
        assert Path(f"/sys/class/net/{host_veth}/mtu").read_text().strip() == "1400"
        assert Path(f"/sys/class/net/{network.bridge}/mtu").read_text().strip() == "1400"
        pod_link = json.loads(in_ns(ns, "ip", "-j", "link", "show", "eth0").stdout)[0]
        assert pod_link["mtu"] == 1400
        routes = {r["dst"]: r.get("gateway") for r in json.loads(in_ns(ns, "ip", "-j", "-4", "route").stdout)}
        assert "default" not in routes
        assert routes["192.168.77.0/24"] == str(network.gateway)  # ipam routes go via the gateway
        assert result["routes"] == [{"dst": "192.168.77.0/24", "gw": str(network.gateway)}]
        plugin.check(conf, result, "knobs", ns)
    finally:
        plugin.delete(conf, "knobs", ns)


def test_service_socket_is_root_only(socket_path: str, service: object) -> None:
    assert os.stat(socket_path).st_mode & 0o777 == 0o600
