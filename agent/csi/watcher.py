"""The plugin registration folder (<root-dir>/plugins_registry), watched as upstream's pluginwatcher
does: a unix socket appearing there is a plugin asking to register. The agent asks it GetInfo; a
CSIPlugin whose versions include a 1.x gets NodeGetInfo on its CSI endpoint, is handed to `on_register`
(the CSINode entry and the Node's topology labels) and, when all went well, told
NotifyRegistrationStatus(registered); a plugin of another type, a version not served, or any failure is
told why (registered false, upstream's error text) and is not kept. A socket going away deregisters
its driver (`on_deregister`). The folder is watched with inotify and read again whenever the watch
must be set up anew; the first pass registers what is already there (a driver that outlived an agent
restart).
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

from asyncinotify import Inotify, Mask

from agent.csi.registry import DriverRegistry, RegisteredDriver
from kubeclient.csi.client import CSICallError, CSIClient, notify_registration, registration_info

log = logging.getLogger("agent.csi")

CSI_PLUGIN = "CSIPlugin"
WATCH_MASK = Mask.CREATE | Mask.DELETE | Mask.MOVED_TO | Mask.MOVED_FROM | Mask.DELETE_SELF | Mask.MOVE_SELF
RETRY = 5.0  # seconds before a failed registration is tried again while its socket stays

OnRegister = Callable[[RegisteredDriver], Awaitable[None]]
OnDeregister = Callable[[str], Awaitable[None]]


class RegistrationError(Exception):
    """The plugin cannot be registered; the message is what it is told."""


def _sockets(folder: Path) -> set[str]:
    out = set()
    try:
        for entry in os.scandir(folder):
            if not entry.name.startswith(".") and stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                out.add(entry.path)
    except OSError:
        pass
    return out


def _supports_v1(versions: tuple[str, ...]) -> bool:
    return any(v.lstrip("v").split(".")[0] == "1" for v in versions)


class PluginWatcher:
    def __init__(
        self, folder: str, registry: DriverRegistry, on_register: OnRegister, on_deregister: OnDeregister
    ) -> None:
        self.folder = Path(folder)
        self.registry = registry
        self.on_register = on_register
        self.on_deregister = on_deregister
        self._known: set[str] = set()

    async def run(self) -> None:
        await asyncio.to_thread(self.folder.mkdir, parents=True, exist_ok=True)
        while True:
            try:
                with Inotify() as inotify:
                    inotify.add_watch(self.folder, WATCH_MASK)
                    await self.rescan()
                    await self._watch(inotify)
            except OSError as err:
                log.warning("plugin registration folder not watched path=%s error=%r", self.folder, str(err))
            await asyncio.sleep(RETRY)

    async def _watch(self, inotify: Inotify) -> None:
        while True:
            try:
                async with asyncio.timeout(RETRY):  # a failed registration is retried while its socket stays
                    event = await inotify.get()
            except TimeoutError:
                await self.rescan()
                continue
            if event.mask & (Mask.DELETE_SELF | Mask.MOVE_SELF | Mask.IGNORED):
                return
            await self.rescan()

    async def rescan(self) -> None:
        present = await asyncio.to_thread(_sockets, self.folder)
        for socket in sorted(self._known - present):
            self._known.discard(socket)
            driver = self.registry.by_socket(socket)
            if driver is not None:
                await self.deregister(driver.name)
        for socket in sorted(present - self._known):
            if await self.register(socket):
                self._known.add(socket)

    async def register(self, socket: str) -> bool:
        """The handshake with one registration socket; True when the plugin is registered (or is not a
        CSI plugin, which this node leaves alone after telling it so)."""
        try:
            info = await registration_info(socket)
        except CSICallError as err:
            log.warning("plugin GetInfo failed socket=%s error=%r", socket, str(err))
            return False
        try:
            if info.type != CSI_PLUGIN:
                raise RegistrationError(
                    f"no handler registered for plugin type: {info.type} at socket {socket}"
                )
            if not _supports_v1(info.versions):
                raise RegistrationError(
                    f"RegisterPlugin error -- plugin validation failed with err: rpc error: none of the versions "
                    f"specified {list(info.versions)} are supported"
                )
            endpoint = info.endpoint or socket
            client = CSIClient(endpoint)
            try:
                node = await client.node_info()
            except CSICallError as err:
                await client.close()
                raise RegistrationError(
                    f"RegisterPlugin error -- failed to get plugin info using RPC GetPluginInfo at socket "
                    f"{socket}, err: {err}"
                ) from None
            driver = RegisteredDriver(info.name, endpoint, socket, info.versions, node, client)
            old = self.registry.add(driver)
            if old is not None and old.client is not client:
                await old.client.close()
            try:
                await self.on_register(driver)
            except Exception as err:  # the API refused or was away: told to the plugin, tried again
                self.registry.remove(driver.name)
                await client.close()
                raise RegistrationError(f"RegisterPlugin error -- {err}") from None
        except RegistrationError as err:
            log.warning("plugin not registered name=%s socket=%s error=%r", info.name, socket, str(err))
            await self._notify(socket, False, str(err))
            return info.type != CSI_PLUGIN
        log.info("CSI driver registered name=%s endpoint=%s node_id=%s", info.name, endpoint, node.node_id)
        await self._notify(socket, True, "")
        return True

    async def deregister(self, name: str) -> None:
        driver = self.registry.remove(name)
        if driver is None:
            return
        await driver.client.close()
        log.info("CSI driver deregistered name=%s", name)
        try:
            await self.on_deregister(name)
        except Exception as err:
            log.warning("CSI driver deregistration not written name=%s error=%r", name, str(err))

    async def _notify(self, socket: str, registered: bool, error: str) -> None:
        try:
            await notify_registration(socket, registered, error)
        except CSICallError as err:
            log.warning("plugin NotifyRegistrationStatus failed socket=%s error=%r", socket, str(err))

    async def close(self) -> None:
        for name in self.registry.names():
            driver = self.registry.remove(name)
            if driver is not None:
                await driver.client.close()
