"""The host-path CSI driver (pykubelet.csidriver) started as a process, as the rig and a node run it; what
a node reports of a claim's volume (shared with the agent's persistent-volume stack tests)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.waiting import wait_for


@dataclass
class RunningDriver:
    process: subprocess.Popen
    endpoint: str
    registration_dir: Path
    state_dir: Path
    call_log: Path

    def calls(self, method: str) -> list[dict]:
        if not self.call_log.exists():
            return []
        lines = [json.loads(line) for line in self.call_log.read_text().splitlines()]
        return [c["request"] for c in lines if c["method"] == method]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)


def mounts_under(root: Path) -> list[str]:
    """The mount points at or below `root` in this process's mount namespace (the host's)."""
    prefix = str(root).rstrip("/") + "/"
    with open("/proc/self/mountinfo") as f:
        return [p for p in (line.split()[4] for line in f) if p == str(root) or p.startswith(prefix)]


def start_driver(base: Path, *extra: str, node_id: str = "node-a") -> RunningDriver:
    registration = base / "plugins_registry"
    registration.mkdir(parents=True, exist_ok=True)
    endpoint = str(base / "plugins" / "csi.sock")
    driver = RunningDriver(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pykubelet.csidriver",
                "--endpoint",
                endpoint,
                "--node-id",
                node_id,
                "--state-dir",
                str(base / "state"),
                "--registration-dir",
                str(registration),
                "--call-log",
                str(base / "calls.jsonl"),
                *extra,
            ]
        ),
        endpoint,
        registration,
        base / "state",
        base / "calls.jsonl",
    )
    deadline = time.monotonic() + 30
    while not (os.path.exists(endpoint) and any(registration.glob("*-reg.sock"))):
        if driver.process.poll() is not None or time.monotonic() > deadline:
            driver.stop()
            raise RuntimeError("the CSI driver did not come up")
        time.sleep(0.05)
    return driver


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path: a unix socket's path must fit in 108 bytes, pytest's tmp_path may not."""
    path = Path(tempfile.mkdtemp(prefix="csi", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def csi_driver(short_dir: Path) -> Iterator[RunningDriver]:
    driver = start_driver(
        short_dir, "--topology-key", "topology.hostpath.csi.pykubelet.io/node", "--max-volumes", "7"
    )
    yield driver
    driver.stop()


def volume_stats_reported(kube, node: str, namespace: str, pod_name: str, claim: str, path: Path) -> None:
    """The node's /metrics and /stats/summary (through the API server's nodes/proxy) carry the figures of
    the file system holding `path` for the claim's volume (the pod's volume `data`): kubelet_volume_stats_*
    labelled namespace and persistentvolumeclaim, and the pod's volume entry with its pvcRef."""
    fs = os.statvfs(path)
    labels = {"namespace": namespace, "persistentvolumeclaim": claim}

    def series() -> dict[str, float]:
        text = kube.connect_get_node_proxy_with_path(node, "metrics")
        return {
            s.name: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name.startswith("kubelet_volume_stats_") and s.labels == labels
        }

    got = wait_for(lambda: len(series()) == 6 and series(), 60, what="the claim's volume stats series")
    assert got["kubelet_volume_stats_capacity_bytes"] == fs.f_blocks * fs.f_frsize
    assert got["kubelet_volume_stats_inodes"] == fs.f_files
    assert 0 < got["kubelet_volume_stats_used_bytes"] <= got["kubelet_volume_stats_capacity_bytes"]
    assert 0 < got["kubelet_volume_stats_inodes_used"] <= got["kubelet_volume_stats_inodes"]
    assert {k.removeprefix("kubelet_volume_stats_") for k in got} == {
        "capacity_bytes",
        "available_bytes",
        "used_bytes",
        "inodes",
        "inodes_free",
        "inodes_used",
    }
    raw = kube.connect_get_node_proxy_with_path(node, "stats/summary", _preload_content=False)
    summary = json.loads(raw.data)
    (entry,) = [p for p in summary["pods"] if p["podRef"]["name"] == pod_name]
    (volume,) = [v for v in entry["volume"] if v["name"] == "data"]
    assert volume["pvcRef"] == {"name": claim, "namespace": namespace}
    assert (volume["capacityBytes"], volume["inodes"]) == (fs.f_blocks * fs.f_frsize, fs.f_files)
