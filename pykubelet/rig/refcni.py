"""A pod network made of the reference CNI plugins from Debian (bridge + host-local + loopback).

The rig's default network until pykubelet's own plugin is used everywhere, and the baseline that
plugin is compared against. Everything it makes (conflist, bridge, IPAM files) lives under names and
folders the caller chooses, and remove() takes it all away again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

REFERENCE_CNI_BIN_DIR = Path("/usr/lib/cni")


@dataclass
class ReferenceBridgeNetwork:
    conf_dir: Path
    data_dir: Path
    name: str = "pykubelet-ref"
    bridge: str = "pykref0"
    subnet: str = "10.85.0.0/24"
    bin_dir: Path = REFERENCE_CNI_BIN_DIR

    @property
    def conflist_path(self) -> Path:
        return self.conf_dir / f"10-{self.name}.conflist"

    def conflist(self) -> dict:
        return {
            "cniVersion": "1.0.0",
            "name": self.name,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.data_dir),
                        "ranges": [[{"subnet": self.subnet}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }

    def write(self) -> Path:
        """Write the conflist in place by rename, which is what makes containerd reload it."""
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.conflist_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.conflist(), indent=2))
        os.replace(tmp, self.conflist_path)
        return self.conflist_path

    def remove(self) -> None:
        self.conflist_path.unlink(missing_ok=True)
        shutil.rmtree(self.data_dir, ignore_errors=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
