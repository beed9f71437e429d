"""--authentication-config is reloaded when its file changes, as upstream's: the directory is watched
with inotify (an editor's write, an atomic rename, a ConfigMap volume's symlink swap) and the file read
again; a valid new configuration replaces the JWT authenticators (their keys fetched anew, the token
cache emptied so no success of the old rules outlives them), an invalid one is logged and the last good
one stays."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

from asyncinotify import Inotify, Mask

from controlplane.apiserver.authnconfig import AuthenticationConfig, AuthenticationConfigError, load

log = logging.getLogger("controlplane.apiserver.authnreload")

MASK = Mask.CLOSE_WRITE | Mask.MOVED_TO | Mask.CREATE | Mask.DELETE | Mask.ATTRIB
SETTLE = 0.05  # seconds to gather the burst of events one write makes


def _digest(path: Path) -> bytes:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return b""


async def watch(path: Path, apply: Callable[[AuthenticationConfig], None]) -> None:
    """Until cancelled: each change of the file's content applied (or refused) once."""
    seen = await asyncio.to_thread(_digest, path)
    with Inotify() as inotify:
        inotify.add_watch(path.parent, MASK)
        async for _event in inotify:
            await asyncio.sleep(SETTLE)
            current = await asyncio.to_thread(_digest, path)
            if current == seen or not current:
                continue
            seen = current
            try:
                config = await asyncio.to_thread(load, path)
            except AuthenticationConfigError as err:
                log.error("event=authentication_config_rejected error=%r", str(err))
                continue
            apply(config)
            log.info("event=authentication_config_reloaded jwt=%d", len(config.jwt))
