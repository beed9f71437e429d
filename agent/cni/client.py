"""`pykubelet-cni`: hand the invocation to the network service, or run it in-process;
`pykubelet-cni serve` runs the service itself when no agent hosts it.

Imports only the standard library and the tiny protocol module, so the fast path stays cheap; the
in-process fallback (pyroute2 and all) is imported only when no service answers.
"""

from __future__ import annotations

import errno
import os
import socket
import sys

from agent.cni import protocol


def call_service(path: str, env: dict[str, str], stdin: bytes) -> tuple[int, bytes, bytes] | None:
    """Send one invocation; None when nobody listens on the socket (use the fallback)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        try:
            sock.connect(path)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTDIR):
                return None
            raise
        sock.sendall(protocol.encode_request(env, stdin))
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    finally:
        sock.close()
    return protocol.decode_response(b"".join(chunks))


def main() -> int:
    if sys.argv[1:2] == ["serve"]:  # `pykubelet-cni serve [--socket PATH]`: the standalone daemon
        from agent.cni.service import main as serve

        return serve(sys.argv[2:])
    env = dict(os.environ)
    stdin = sys.stdin.buffer.read()
    answer = call_service(protocol.default_socket_path(), env, stdin)
    if answer is None:
        if sys.flags.no_site:  # started by the -S forwarder: site-packages (pyroute2) are needed now
            import site

            site.main()
        from agent.cni import standalone

        return standalone.run(env, stdin)
    code, out, err = answer
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    sys.stderr.buffer.write(err)
    return code


if __name__ == "__main__":
    sys.exit(main())
