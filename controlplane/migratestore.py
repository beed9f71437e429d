"""`pykubelet migrate-store`: storage/migrate.py's copy from SQLite to etcd, with the etcd key of each
object where the API server's kinds put it (Kind.etcd_prefix, through the built-in kind table): the
storage package knows no kind, so the command that writes etcd for the API server is assembled here."""

from __future__ import annotations

import argparse

from controlplane.apiserver.kindparts import builtin_table
from controlplane.storage import migrate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    migrate.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    return migrate.run(args, builtin_table().etcd_layout())


__all__ = ["add_arguments", "run"]
