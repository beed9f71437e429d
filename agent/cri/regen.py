"""Regenerate the committed Python modules for the CRI protocol: `python -m agent.cri.regen`.

The generated modules are committed (so installing pykubelet needs no protobuf compiler) and
`tests/cri/test_protos_fresh.py` regenerates them into a temporary folder and fails when they differ,
so a change to protos/runtime/v1/api.proto cannot land without its Python counterpart.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO / "protos"
PROTO = PROTO_ROOT / "runtime" / "v1" / "api.proto"
OUT_DIR = Path(__file__).resolve().parent / "pb"
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def generate(out_dir: Path) -> list[Path]:
    """Run protoc (from grpcio-tools) into out_dir and make the gRPC module import its sibling relatively."""
    from grpc_tools import protoc  # imported here: only needed by developers, not at run time

    with tempfile.TemporaryDirectory() as tmp:
        # Compile from the folder of the proto so the module is named api_pb2, not runtime.v1.api_pb2:
        # the proto package (runtime.v1) still sets the wire names.
        args = [
            "protoc",
            f"-I{PROTO.parent}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            str(PROTO),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on " + str(PROTO))
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name in GENERATED:
            text = (Path(tmp) / name).read_text()
            text = re.sub(r"^import api_pb2 as", "from . import api_pb2 as", text, flags=re.M)
            target = out_dir / name
            target.write_text(text)
            written.append(target)
    init = out_dir / "__init__.py"
    if not init.exists():
        init.write_text('"""Generated from protos/runtime/v1/api.proto by `python -m agent.cri.regen`."""\n')
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="folder to write the modules to")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
