"""The committed etcd v3 modules are what protos/etcd/etcdserverpb/rpc.proto compiles to (with the pinned
grpcio-tools), so the proto cannot change without them."""

from __future__ import annotations

from pathlib import Path

from controlplane.storage import etcdregen


def test_committed_etcd_modules_are_fresh(tmp_path: Path) -> None:
    etcdregen.generate(tmp_path)
    for name in etcdregen.GENERATED:
        committed = (etcdregen.OUT_DIR / name).read_text()
        fresh = (tmp_path / name).read_text()
        assert committed == fresh, (
            f"controlplane/storage/etcdpb/{name} is stale: run `python -m controlplane.storage.etcdregen`"
        )
