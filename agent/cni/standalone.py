"""In-process plugin: what runs when no network service is listening (or when called directly).

Slower than the service path (it pays for importing pyroute2 on every call) but needs nothing else
running, which is what a node without its agent needs.
"""

from __future__ import annotations

import os
import sys


def run(env: dict[str, str], stdin: bytes) -> int:
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
