"""Install the Debian packages that pykubelet drives, where they are missing.

Idempotent and quiet when everything is present: it asks dpkg first and runs apt-get only for what
is absent, so `./dev test` and `pykubelet up` can call it every time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO

# Package -> a file it installs, used to tell whether it is there without asking apt.
PACKAGES: dict[str, str] = {
    "containerd": "/usr/bin/containerd",
    "runc": "/usr/sbin/runc",
    "containernetworking-plugins": "/usr/lib/cni/bridge",
    "busybox-static": "/bin/busybox",
    "docker-registry": "/usr/bin/docker-registry",
    "iproute2": "/sbin/ip",
    "nftables": "/usr/sbin/nft",
    "iptables": "/usr/sbin/iptables",
    "etcd-server": "/usr/bin/etcd",
    # etcdctl: `pykubelet etcd-snapshot` saves and restores with etcd's own snapshot tool, and the tests read
    # what is stored (encryption at rest) as an administrator would.
    "etcd-client": "/usr/bin/etcdctl",
    # The service proxy flushes stale UDP conntrack entries with it (as kube-proxy does).
    "conntrack": "/usr/sbin/conntrack",
    # The CNI plugin's executable is a small C shim compiled on the node (agent/cni/install.py).
    "gcc": "/usr/bin/gcc",
    "libc6-dev": "/usr/include/stdio.h",
    # The ingress controller's proxy (ingresscontroller/README.md says why nginx).
    "nginx": "/usr/sbin/nginx",
}


# What only the tests need (`./dev test` installs them; `pykubelet up` and `join` never do): promtool,
# which checks every component's /metrics exposition. Debian's package also ships the Prometheus
# server, whose unit a systemd host would start on :9090, so it stays off the runtime list.
TEST_PACKAGES: dict[str, str] = {
    "prometheus": "/usr/bin/promtool",
    # The load generator of bench/ingress/hop.py's concurrent figures (its smoke run is in the suite).
    "wrk": "/usr/bin/wrk",
}


def _dpkg_installed(package: str) -> bool:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
    )
    return out.returncode == 0 and "install ok installed" in out.stdout


def missing_packages(packages: Iterable[str] | None = None) -> list[str]:
    names = list(packages or PACKAGES)
    if shutil.which("dpkg-query") is None:
        known = {**PACKAGES, **TEST_PACKAGES}
        return [p for p in names if not os.path.exists(known.get(p, "/nonexistent"))]
    return [p for p in names if not _dpkg_installed(p)]


def ensure_packages(packages: Iterable[str] | None = None, log_path: Path | None = None) -> list[str]:
    """apt-get install whatever is missing; returns what was installed. Needs root on Debian/Ubuntu.
    apt's output goes to `log_path` (appended) when given, else the update's to stderr."""
    missing = missing_packages(packages)
    if not missing:
        return []
    if shutil.which("apt-get") is None:
        raise RuntimeError(
            f"missing packages {missing} and no apt-get to install them (Debian/Ubuntu needed)"
        )
    if os.geteuid() != 0:
        raise RuntimeError(f"missing packages {missing}: run as root to install them")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with contextlib.ExitStack() as files:
        log: IO[bytes] | None = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log = files.enter_context(open(log_path, "ab"))
            log.write(f"pykubelet: installing {' '.join(missing)}\n".encode())
            log.flush()
        else:
            print(f"pykubelet: installing {' '.join(missing)}", file=sys.stderr)
        apt = {"env": env, "check": True, "stderr": log}
        subprocess.run(["apt-get", "update", "-qq"], stdout=log, **apt)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
            stdout=log or subprocess.DEVNULL,
            **apt,
        )
    return missing


def main(argv: list[str] | None = None) -> int:
    """`python -m pykubelet.rig.install [--test]`: the runtime packages, and with --test the tests' too."""
    args = sys.argv[1:] if argv is None else argv
    ensure_packages([*PACKAGES, *TEST_PACKAGES] if "--test" in args else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
