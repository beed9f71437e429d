"""Credentials from a kubeconfig `exec` plugin (client.authentication.k8s.io/v1 and v1beta1), as
client-go's exec authenticator gets them: how EKS (`aws eks get-token`), GKE (`gke-gcloud-auth-plugin`),
AKS (`kubelogin`) and OIDC (`kubectl oidc-login`) kubeconfigs prove who the user is.

The plugin runs with the kubeconfig's args, our environment plus its `env`, and KUBERNETES_EXEC_INFO (an
ExecCredential whose spec says whether it may talk to the user and, with provideClusterInfo, the cluster);
it prints an ExecCredential whose status holds a token and/or a client certificate and key (and an
expirationTimestamp). The credential is kept until it expires; a 401 marks it spent, so the next request runs the plugin again (client-go refreshes
after a 401 too, and like it we do not resend the refused request). Standard input goes to the plugin only
in interactive mode (interactiveMode Never: never; IfAvailable: when ours is a terminal; Always: required).
The plugin runs as a child process the event loop awaits, never blocking it; one run serves every
request waiting for it.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

GROUP = "client.authentication.k8s.io"
VERSIONS = (f"{GROUP}/v1", f"{GROUP}/v1beta1")
EXEC_INFO_ENV = "KUBERNETES_EXEC_INFO"
CLUSTER_CONFIG_EXTENSION = f"{GROUP}/exec"  # a cluster extension handed to the plugin as spec.cluster.config
INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")


class ExecError(Exception):
    """The plugin is misconfigured, could not run, or printed no usable credential (client-go's texts)."""


@dataclass(frozen=True)
class ExecConfig:
    """A kubeconfig user's `exec` stanza, checked as clientcmd checks it."""

    api_version: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    install_hint: str = ""
    provide_cluster_info: bool = False
    interactive_mode: str = "IfAvailable"

    @classmethod
    def parse(cls, stanza: dict[str, Any], user: str) -> ExecConfig:
        api_version = stanza.get("apiVersion") or ""
        if api_version not in VERSIONS:
            raise ExecError(
                f"exec plugin: invalid apiVersion {api_version!r}"
                if api_version
                else f"apiVersion must be specified for {user} to use exec authentication plugin"
            )
        if not stanza.get("command"):
            raise ExecError(f"command must be specified for {user} to use exec authentication plugin")
        mode = stanza.get("interactiveMode") or ""
        if not mode:
            if api_version.endswith("/v1"):  # v1 makes it required; v1beta1 defaults it
                raise ExecError(
                    f"interactiveMode must be specified for {user} to use exec authentication plugin"
                )
            mode = "IfAvailable"
        if mode not in INTERACTIVE_MODES:
            raise ExecError(f"invalid interactiveMode for {user}: {json.dumps(mode)}")
        env = []
        for item in stanza.get("env") or []:
            if not isinstance(item, dict) or not item.get("name"):
                raise ExecError(
                    f"env variable name must be specified for {user} to use exec authentication plugin"
                )
            env.append((str(item["name"]), str(item.get("value", ""))))
        return cls(
            api_version=api_version,
            command=str(stanza["command"]),
            args=tuple(str(a) for a in stanza.get("args") or ()),
            env=tuple(env),
            install_hint=str(stanza.get("installHint") or ""),
            provide_cluster_info=bool(stanza.get("provideClusterInfo")),
            interactive_mode=mode,
        )


def cluster_info(cluster: dict[str, Any], ca_data: bytes | None) -> dict[str, Any]:
    """The ExecCredential's spec.cluster for a kubeconfig cluster entry (the CA always as data)."""
    info: dict[str, Any] = {"server": cluster.get("server", "")}
    for key in ("tls-server-name", "insecure-skip-tls-verify"):
        if cluster.get(key):
            info[key] = cluster[key]
    if ca_data:
        info["certificate-authority-data"] = base64.b64encode(ca_data).decode()
    for key in ("proxy-url", "disable-compression"):
        if cluster.get(key):
            info[key] = cluster[key]
    for extension in cluster.get("extensions") or []:
        if isinstance(extension, dict) and extension.get("name") == CLUSTER_CONFIG_EXTENSION:
            info["config"] = extension.get("extension")
    return info


@dataclass
class Credential:
    token: str  # "" when the plugin gave a client certificate only
    expires: datetime.datetime | None = None
    certificate: tuple[bytes, bytes] | None = field(default=None, repr=False)  # (cert PEM, key PEM)

    def expired(self, now: datetime.datetime) -> bool:
        return self.expires is not None and now > self.expires


@dataclass
class ExecAuthenticator:
    """Runs the plugin when there is no credential, it expired, or the server refused it (401)."""

    config: ExecConfig
    cluster: dict[str, Any] = field(default_factory=dict)  # spec.cluster when provideClusterInfo
    runs: int = 0  # how often the plugin ran (for tests and logs)
    _credential: Credential | None = field(default=None, init=False, repr=False)
    _lock: asyncio.Lock | None = field(default=None, init=False, repr=False)

    async def credential(self) -> Credential:
        """The cached credential, or a new one from the plugin when there is none or it expired."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            now = datetime.datetime.now(datetime.UTC)
            if self._credential is None or self._credential.expired(now):
                self._credential = await self._run()
            return self._credential

    def refused(self, token: str) -> None:
        """The server answered 401 to `token`: the next request runs the plugin again (unless another
        run replaced the credential already)."""
        if self._credential is not None and self._credential.token == token:
            self._credential = None

    def _interactive(self) -> bool:
        mode = self.config.interactive_mode
        if mode == "Never":
            return False
        terminal = sys.stdin is not None and sys.stdin.isatty()
        if mode == "Always" and not terminal:
            raise ExecError("exec plugin cannot support interactive mode: standard input is not a terminal")
        return terminal

    def exec_info(self, interactive: bool) -> str:
        spec: dict[str, Any] = {}
        if self.config.provide_cluster_info:
            spec["cluster"] = self.cluster
        spec["interactive"] = interactive
        return json.dumps(
            {"kind": "ExecCredential", "apiVersion": self.config.api_version, "spec": spec},
            separators=(",", ":"),
        )

    async def _run(self) -> Credential:
        interactive = self._interactive()
        env = {**os.environ, **dict(self.config.env), EXEC_INFO_ENV: self.exec_info(interactive)}
        command = self.config.command
        try:
            process = await asyncio.create_subprocess_exec(
                command,
                *self.config.args,
                env=env,
                stdin=None if interactive else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
            )
        except (FileNotFoundError, PermissionError):
            hint = f"\n\n{self.config.install_hint}" if self.config.install_hint else ""
            raise ExecError(f"exec: executable {command} not found{hint}") from None
        stdout, _ = await process.communicate()
        self.runs += 1
        if process.returncode:
            raise ExecError(f"exec: executable {command} failed with exit code {process.returncode}")
        return self._decode(stdout)

    def _decode(self, stdout: bytes) -> Credential:
        try:
            cred = json.loads(stdout)
        except ValueError as err:
            raise ExecError(f"decoding stdout: {err}") from None
        if not isinstance(cred, dict) or not cred.get("apiVersion") or cred.get("kind") != "ExecCredential":
            raise ExecError("decoding stdout: couldn't get version/kind; json parse error")
        if cred["apiVersion"] != self.config.api_version:
            raise ExecError(
                f"exec plugin is configured to use API version {self.config.api_version}, "
                f"plugin returned version {cred['apiVersion']}"
            )
        status = cred.get("status")
        if not isinstance(status, dict):
            raise ExecError("exec plugin didn't return a status field")
        token = status.get("token") or ""
        cert, key = status.get("clientCertificateData") or "", status.get("clientKeyData") or ""
        if not token and not cert and not key:
            raise ExecError("exec plugin didn't return a token or cert/key pair")
        if bool(cert) != bool(key):
            raise ExecError("exec plugin returned only certificate or key, not both")
        pair = (str(cert).encode(), str(key).encode()) if cert else None
        return Credential(token, _timestamp(status.get("expirationTimestamp")), pair)


def _timestamp(value: Any) -> datetime.datetime | None:
    if not value:
        return None
    try:
        when = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise ExecError(f"decoding stdout: invalid expirationTimestamp {value!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)
