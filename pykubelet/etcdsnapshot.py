"""`pykubelet etcd-snapshot save|list|restore`: back up the cluster's store and bring it back (k3s's
`etcd-snapshot`), for the etcd store and for SQLite alike (pykubelet.rig.snapshot).

    pykubelet etcd-snapshot save [--name N]     # while the cluster runs
    pykubelet etcd-snapshot list
    pykubelet down; pykubelet etcd-snapshot restore N; pykubelet up ...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pykubelet.rig.snapshot import SnapshotError, listing, restore, save, snapshots_dir
from pykubelet.rig.stack import DEFAULT_STATE_DIR


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("save", "list", "ls", "restore"), help="what to do")
    parser.add_argument("snapshot", nargs="?", default="", help="restore: the snapshot's name or path")
    parser.add_argument(
        "--name", default="", help="save: the snapshot's name (default: <store>-snapshot-<time>)"
    )
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="the stack's state dir")


def run(args: argparse.Namespace) -> int:
    state_dir = args.state_dir.resolve()
    try:
        if args.action == "save":
            info = save(state_dir, args.name)
            print(f"Snapshot {info.name} saved ({info.store}, revision {info.revision}, {info.size} bytes)")
        elif args.action in ("list", "ls"):
            print(f"{'Name':<40} {'Location':<60} {'Size':>10} Created")
            for info in listing(state_dir):
                where = snapshots_dir(state_dir) / info.name
                print(f"{info.name:<40} {str(where):<60} {info.size:>10} {info.created}")
        else:
            if not args.snapshot:
                raise SnapshotError("restore: name the snapshot (pykubelet etcd-snapshot list shows them)")
            info = restore(state_dir, args.snapshot)
            print(
                f"Snapshot {info.name} restored (revision {info.revision}); start the cluster with "
                f"`pykubelet up --state-dir {state_dir}`"
            )
    except SnapshotError as err:
        print(f"pykubelet etcd-snapshot: {err}", file=sys.stderr)
        return 1
    return 0
