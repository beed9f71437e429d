"""Start and stop the project's API server as a subprocess (tests, benchmarks and `pykubelet up`).

One owner starts it, waits until /readyz answers, and kills it (and only it) on stop, so no test leaves a
server behind. The server writes DIR/admin.kubeconfig on every start.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def api_client(kubeconfig: str | os.PathLike[str]) -> ApiClient:
    """An official-client ApiClient for a kubeconfig (its own Configuration, not the global default)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ApiServer:
    """The API server in `data_dir` on `port` (0: a free port is chosen before start)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int = 0,
        *,
        extra_args: list[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.log_path = Path(log_path) if log_path else self.data_dir / "apiserver.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "admin.kubeconfig"

    def api_client(self) -> ApiClient:
        """The official client as the cluster admin (a context manager: `with server.api_client() as api`)."""
        return api_client(self.kubeconfig)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_cert(self) -> Path:
        return self.data_dir / "pki" / "ca.crt"

    def start(self, timeout: float = 60.0) -> ApiServer:
        if self.process is not None and self.process.poll() is None:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "pykubelet",
            "server",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        self._wait_ready(timeout)
        return self

    def client_kubeconfig(self, user: str, groups: tuple[str, ...], path: str | os.PathLike[str]) -> Path:
        """A kubeconfig for another identity, with a client certificate from the cluster CA.

        e.g. `client_kubeconfig("system:node:n1", ("system:nodes",), dir / "kubelet.kubeconfig")` for a node
        agent. The server must have started once (the CA exists).
        """
        from controlplane.apiserver.certs import ensure_pki, issue_client_cert, write_kubeconfig

        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        pki = ensure_pki(self.data_dir)
        safe = user.replace(":", "_").replace("/", "_")
        cert, key = target.parent / f"{safe}.crt", target.parent / f"{safe}.key"
        issue_client_cert(pki, user, groups, cert, key)
        write_kubeconfig(target, self.url, pki, cert, key, user=safe)
        return target

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        last_error = ""
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"apiserver exited early; see {self.log_path}:\n{self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2) as resp:
                    if resp.status == 200 and self.kubeconfig.exists():
                        return
            except (urllib.error.URLError, OSError) as err:
                last_error = str(err)
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"apiserver not ready after {timeout}s ({last_error}); log:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; always reaps the child."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """SIGKILL without warning: what a crash looks like to the store."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
