"""Regenerate the committed Python modules for the CRI protocol (and for grpc.health.v1, which the
gRPC probe speaks, and CSI v1 with the kubelet's plugin registration API): `python -m agent.cri.regen`.

The generated modules are committed (so installing pykubelet needs no protobuf compiler) and
`tests/cri/test_protos_fresh.py` (`tests/probes/test_health_proto_fresh.py`) regenerates them into a
temporary folder and fails when they differ, so a change to protos/runtime/v1/api.proto (or
protos/grpc/health/v1/health.proto) cannot land without its Python counterpart.
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
HEALTH_PROTO = PROTO_ROOT / "grpc" / "health" / "v1" / "health.proto"
HEALTH_OUT_DIR = REPO / "agent" / "probes" / "pb"
# CSI v1 and the kubelet's plugin registration API: shared by the agent and the control plane's CSI
# sidecars, so committed to the client library (kubeclient/csi/pb).
CSI_PROTO = PROTO_ROOT / "csi" / "v1" / "csi.proto"
REGISTRATION_PROTO = PROTO_ROOT / "pluginregistration" / "v1" / "registration.proto"
CSI_OUT_DIR = REPO / "kubeclient" / "csi" / "pb"
# Each proto and the package its modules are committed to.
TARGETS = (
    (PROTO, OUT_DIR),
    (HEALTH_PROTO, HEALTH_OUT_DIR),
    (CSI_PROTO, CSI_OUT_DIR),
    (REGISTRATION_PROTO, CSI_OUT_DIR),
)


def generated_names(proto: Path) -> tuple[str, ...]:
    return tuple(proto.stem + suffix for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"))


GENERATED = generated_names(PROTO)


def generate(out_dir: Path, proto: Path = PROTO) -> list[Path]:
    """Run protoc (from grpcio-tools) into out_dir and make the gRPC module import its sibling relatively."""
    from grpc_tools import protoc  # imported here: only needed by developers, not at run time

    with tempfile.TemporaryDirectory() as tmp:
        # Compile from the folder of the proto so the module is named api_pb2, not runtime.v1.api_pb2:
        # the proto package (runtime.v1) still sets the wire names.
        args = [
            "protoc",
            f"-I{proto.parent}",
            # protobuf's well-known types (csi.proto imports wrappers.proto), shipped with grpcio-tools
            f"-I{Path(protoc.__file__).parent / '_proto'}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            str(proto),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on " + str(proto))
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        module = proto.stem + "_pb2"
        for name in generated_names(proto):
            text = (Path(tmp) / name).read_text()
            text = re.sub(rf"^import {module} as", f"from . import {module} as", text, flags=re.M)
            target = out_dir / name
            target.write_text(text)
            written.append(target)
    init = out_dir / "__init__.py"
    if not init.exists():
        source = proto.relative_to(REPO) if proto.is_relative_to(REPO) else proto
        init.write_text(f'"""Generated from {source} by `python -m agent.cri.regen`."""\n')
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, help="one folder to write all the modules to")
    args = parser.parse_args(argv)
    for proto, out_dir in TARGETS:
        for path in generate(args.out or out_dir, proto):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
