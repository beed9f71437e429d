"""Images for containers: imagePullPolicy, imagePullSecrets as CRI auth, serialized pulls, pull backoff.

The reasons and messages are upstream's, since users read them in `kubectl describe`: ErrImagePull with
the registry's reason, then ImagePullBackOff while the backoff runs, ErrImageNeverPull for policy Never.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from typing import Any

from agent.cri import CRIClient, CRIError, ImagePullError, pb
from agent.pods.backoff import BackoffTable
from agent.pods.env import Fetch
from agent.pods.events import NORMAL, WARNING, EventRecorder

_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_DOMAIN = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?$"
)
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def valid_reference(image: str) -> bool:
    """Whether `image` parses as a docker reference: [domain[:port]/]path[:tag][@digest]."""
    name = image
    if "@" in name:
        name, digest = name.split("@", 1)
        if not _DIGEST.match(digest):
            return False
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.match(tag):
            return False
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        if not _DOMAIN.match(parts[0]):
            return False
        parts = parts[1:]
    return bool(parts) and all(_COMPONENT.match(p) for p in parts)


class ImageError(Exception):
    """The image cannot be had now; `reason` is the container's waiting reason."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        self.message = message
        super().__init__(f"{reason}: {message}")


def grpc_error_text(err: ImagePullError) -> str:
    """The error as upstream shows it (Go's gRPC status text): rpc error: code = NotFound desc = ..."""
    return err.rpc_text


def go_duration(seconds: float) -> str:
    """A pull's duration as upstream's Pulled event prints it: truncated to the millisecond, then as Go
    prints a time.Duration (51ms, 1.234s, 1m2.5s, 0s)."""
    ms = int(seconds * 1000)
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    text = f"{rest // 1000}.{rest % 1000:03d}".rstrip("0").rstrip(".") + "s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    return f"{hours}h{text}" if hours else text


def default_pull_policy(image: str) -> str:
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def registry_host(image: str) -> str:
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def _matches(server: str, host: str) -> bool:
    server = re.sub(r"^https?://", "", server).split("/", 1)[0]
    if host == "docker.io" and server in ("index.docker.io", "registry-1.docker.io", "docker.io"):
        return True
    return server == host


def auth_from_secrets(secrets: list[dict[str, Any]], image: str) -> list[pb.AuthConfig]:
    """Credentials from dockerconfigjson/dockercfg secrets that match the image's registry."""
    host = registry_host(image)
    out: list[pb.AuthConfig] = []
    for secret in secrets:
        data = secret.get("data") or {}
        raw = data.get(".dockerconfigjson") or data.get(".dockercfg")
        if not raw:
            continue
        try:
            doc = json.loads(base64.b64decode(raw))
        except ValueError:
            continue
        auths = doc.get("auths", doc) if isinstance(doc, dict) else {}
        for server, entry in auths.items():
            if not isinstance(entry, dict) or not _matches(server, host):
                continue
            user, password = entry.get("username", ""), entry.get("password", "")
            if entry.get("auth") and not user:
                user, _, password = base64.b64decode(entry["auth"]).decode(errors="replace").partition(":")
            out.append(pb.AuthConfig(username=user, password=password, server_address=server))
    return out


class ImageManager:
    def __init__(
        self,
        cri: CRIClient,
        recorder: EventRecorder,
        fetch: Fetch,
        serialize: bool = True,
        backoff: BackoffTable | None = None,
    ) -> None:
        self.cri = cri
        self.recorder = recorder
        self.fetch = fetch
        self.backoff = backoff or BackoffTable()
        self._lock = asyncio.Lock() if serialize else None

    async def _secrets(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        ns = pod["metadata"]["namespace"]
        out = []
        for ref in (pod.get("spec") or {}).get("imagePullSecrets") or []:
            obj = await self.fetch("Secret", ns, ref.get("name", ""))
            if obj is not None:
                out.append(obj)
        return out

    async def ensure(
        self, pod: dict[str, Any], container: dict[str, Any], sandbox: pb.PodSandboxConfig, field: str
    ) -> str:
        """The image ID to create the container from, pulling if the policy says so."""
        image = container.get("image") or ""
        if not image or not valid_reference(image):
            msg = f'Failed to apply default image tag "{image}": couldn\'t parse image name "{image}": invalid reference format'
            self.recorder.event(pod, WARNING, "InspectFailed", msg, field)
            raise ImageError("InvalidImageName", msg)
        policy = container.get("imagePullPolicy") or default_pull_policy(image)
        present = await self.cri.image_status(image)
        if policy == "Never" or (policy == "IfNotPresent" and present is not None):
            if present is not None:
                self.recorder.event(
                    pod, NORMAL, "Pulled", f'Container image "{image}" already present on machine', field
                )
                return present.id
            msg = f'Container image "{image}" is not present with pull policy of Never'
            self.recorder.event(pod, WARNING, "ErrImageNeverPull", msg, field)
            raise ImageError("ErrImageNeverPull", msg)
        key = (pod["metadata"]["uid"], image)
        if self.backoff.remaining(key) > 0:
            msg = f'Back-off pulling image "{image}"'
            self.recorder.event(pod, NORMAL, "BackOff", msg, field)
            raise ImageError("ImagePullBackOff", msg)
        self.recorder.event(pod, NORMAL, "Pulling", f'Pulling image "{image}"', field)
        asked = time.monotonic()
        try:
            ref, started = await self._pull(image, await self._secrets(pod), sandbox)
        except ImagePullError as err:
            self.backoff.next(key)
            reason = grpc_error_text(err)
            self.recorder.event(pod, WARNING, "Failed", f'Failed to pull image "{image}": {reason}', field)
            raise ImageError("ErrImagePull", reason) from None
        done = time.monotonic()
        size = ""
        try:
            status = await self.cri.image_status(image)
            if status is not None:
                size = f" Image size: {status.size} bytes."
        except CRIError:
            pass
        self.recorder.event(
            pod,
            NORMAL,
            "Pulled",
            f'Successfully pulled image "{image}" in {go_duration(done - started)} '
            f"({go_duration(done - asked)} including waiting).{size}",
            field,
        )
        return ref

    async def _pull(
        self, image: str, secrets: list[dict[str, Any]], sandbox: pb.PodSandboxConfig
    ) -> tuple[str, float]:
        auths: list[pb.AuthConfig | None] = [*auth_from_secrets(secrets, image), None]
        if self._lock is not None:
            async with self._lock:
                return await self._try_auths(image, auths, sandbox)
        return await self._try_auths(image, auths, sandbox)

    async def _try_auths(
        self, image: str, auths: list[pb.AuthConfig | None], sandbox: pb.PodSandboxConfig
    ) -> tuple[str, float]:
        started = time.monotonic()
        last: ImagePullError | None = None
        for auth in auths:
            try:
                return await self.cri.pull_image(image, auth, sandbox), started
            except ImagePullError as err:
                last = err
        assert last is not None
        raise last
