"""A local OCI registry: Debian's `docker-registry` (distribution 2.8) on 127.0.0.1, plain HTTP.

Pods in tests pull from it for real (PullImage goes through containerd's resolver and this server),
and a missing image fails the way a real registry fails it (404 -> `not found`).
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

from pykubelet.rig.process import Daemon, free_port

REGISTRY_BINARY = "/usr/bin/docker-registry"

CONFIG = """version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


class Registry:
    """`with Registry(dir) as reg:` -> reg.address is '127.0.0.1:PORT'."""

    def __init__(self, state_dir: Path | str, port: int | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        config = self.state_dir / "config.yml"
        self.daemon = Daemon(
            "docker-registry", [REGISTRY_BINARY, "serve", str(config)], self.state_dir / "registry.log"
        )

    def _ready(self) -> bool:
        with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=1) as resp:
            return resp.status == 200

    def start(self) -> Registry:
        (self.state_dir / "storage").mkdir(parents=True, exist_ok=True)
        (self.state_dir / "config.yml").write_text(
            CONFIG.format(root=self.state_dir / "storage", port=self.port)
        )
        self.daemon.start(self._ready, timeout=30)
        return self

    def stop(self) -> None:
        self.daemon.stop()

    def __enter__(self) -> Registry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
