"""Regenerate the committed Python modules for etcd's v3 API: `python -m controlplane.storage.etcdregen`.

The modules under controlplane/storage/etcdpb are committed (installing pykubelet needs no protobuf
compiler) and `tests/controlplane/test_storage_etcd_proto.py` regenerates them into a temporary folder
and fails when they differ, so protos/etcd/etcdserverpb/rpc.proto cannot change without them. The
control plane may not import the agent (an import-linter contract), so this is its own small generator
rather than agent.cri.regen's.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROTO = REPO / "protos" / "etcd" / "etcdserverpb" / "rpc.proto"
OUT_DIR = Path(__file__).resolve().parent / "etcdpb"
GENERATED = tuple(PROTO.stem + suffix for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"))


def generate(out_dir: Path) -> list[Path]:
    """protoc (grpcio-tools) into out_dir; the gRPC module imports its sibling relatively."""
    from grpc_tools import protoc  # a developer's tool, never needed at run time

    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"-I{PROTO.parent}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            str(PROTO),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {PROTO}")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        module = PROTO.stem + "_pb2"
        for name in GENERATED:
            text = (Path(tmp) / name).read_text()
            text = re.sub(rf"^import {module} as", f"from . import {module} as", text, flags=re.M)
            (out_dir / name).write_text(text)
            written.append(out_dir / name)
    init = out_dir / "__init__.py"
    if not init.exists():
        init.write_text(
            '"""Generated from protos/etcd/etcdserverpb/rpc.proto by `python -m controlplane.storage.etcdregen`."""\n'
        )
    return written


def main() -> int:
    for path in generate(OUT_DIR):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
