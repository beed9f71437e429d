"""The record of a stack or a node on disk (`<dir>/stack.json`), and where a stack keeps its further nodes.

Everything that starts daemons for a state dir (the stack, a stack's further node, `pykubelet join`) writes
it, and `pykubelet down`/`reset` (pykubelet.rig.sweep) read it; it lives below all of them, importing none.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

RECORD_FILE = "stack.json"
# A multi-node stack's further nodes, each laid out as a joined node (its own record) under this dir.
NODES_DIR = "nodes"


@dataclass
class StackRecord:
    """What `down` needs to find a stack that `up` left running (or left half-started)."""

    state_dir: str
    node_name: str
    kubeconfig: str
    pids: dict[str, int]  # daemon -> pid, from the moment the process exists
    registry: str
    containerd_endpoint: str
    bridge: str
    pod_cidr: str
    ready: list[str] = field(default_factory=list)  # daemons that answered, in start order
    proxy_table: str = ""
    netpolicy_table: str = ""

    @classmethod
    def load(cls, state_dir: Path) -> StackRecord | None:
        """The record, or None when there is none or it cannot be read (then down searches instead)."""
        path = state_dir / RECORD_FILE
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def save(self) -> None:
        """Write-then-rename: a reader (or an `up` killed mid-write) never leaves half a file."""
        path = Path(self.state_dir) / RECORD_FILE
        tmp = path.with_name(f".{RECORD_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, path)
