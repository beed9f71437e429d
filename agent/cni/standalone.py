"""In-process plugin: what runs when no network service is listening (or when called directly).

Slower than the service path (a fresh interpreter per call) but needs nothing else running, which is
what a node without its agent needs. Only ever runs in a short-lived process of its own.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types


def _skip_pyroute2_package_init() -> None:
    """The plugin uses only pyroute2's netlink message classes, but importing any pyroute2 module
    first runs the package's __init__, which loads all of pyroute2 (IPRoute, NDB, IPDB...) for about
    0.3 s. In this one-shot process, register the package without running its __init__ so that
    `pyroute2.netlink...` loads just what it needs (a third of the start-up time)."""
    if "pyroute2" in sys.modules:
        return
    spec = importlib.util.find_spec("pyroute2")
    if spec is None or not spec.submodule_search_locations:
        return
    package = types.ModuleType("pyroute2")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    package.__file__ = spec.origin
    sys.modules["pyroute2"] = package


def run(env: dict[str, str], stdin: bytes) -> int:
    _skip_pyroute2_package_init()
    from agent.cni.plugin import handle

    resp = handle(env, stdin)
    if resp.stdout:
        sys.stdout.write(resp.stdout)
        sys.stdout.flush()
    if resp.stderr:
        sys.stderr.write(resp.stderr)
    return resp.code


def main() -> int:
    return run(dict(os.environ), sys.stdin.buffer.read())


if __name__ == "__main__":
    sys.exit(main())
