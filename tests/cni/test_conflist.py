"""The conflist the agent writes for containerd."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent.cni.conflist import build_conflist, write_conflist
from agent.cni.netconf import parse_netconf


def test_conflist_is_our_plugin_then_loopback(tmp_path: Path) -> None:
    path = write_conflist(tmp_path / "net.d", "10.244.7.0/24", data_dir="/d")
    doc = json.loads(path.read_text())
    assert path.name == "10-pykubelet.conflist"
    assert doc["cniVersion"] == "1.0.0"
    assert [p["type"] for p in doc["plugins"]] == ["pykubelet-cni", "loopback"]
    assert doc["plugins"][0]["capabilities"] == {"portMappings": True}
    # what libcni hands the plugin (network name and version injected) must parse as our config
    plugin_conf = {**doc["plugins"][0], "name": doc["name"], "cniVersion": doc["cniVersion"]}
    nc = parse_netconf(json.dumps(plugin_conf))
    assert str(nc.subnet) == "10.244.7.0/24" and str(nc.gateway) == "10.244.7.1" and nc.data_dir == "/d"
    assert [n for n in os.listdir(path.parent)] == [path.name]  # no temporary file left


def test_rewrite_replaces_atomically_and_skips_unchanged(tmp_path: Path) -> None:
    path = write_conflist(tmp_path, "10.244.7.0/24")
    inode = path.stat().st_ino
    assert write_conflist(tmp_path, "10.244.7.0/24").stat().st_ino == inode  # unchanged: untouched
    write_conflist(tmp_path, "10.244.8.0/24")
    assert path.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert "10.244.8.0/24" in path.read_text()


def test_rejects_ipv6_pod_cidr() -> None:
    with pytest.raises(ValueError):
        build_conflist("fd00::/64")
