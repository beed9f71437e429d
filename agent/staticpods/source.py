"""The static pod source: the manifests in staticPodPath (a directory, or one file), as upstream's file
source reads them (pkg/kubelet/config/file.go, file_linux.go).

The directory is watched with inotify (a file written and closed, created, moved in or out, deleted) and
read again every fileCheckFrequency (20 s) whatever the watch says, as upstream re-lists. Names starting
with a dot are ignored (editors' swap files, upstream's `[^.]*` glob), subdirectories are not entered.
Each pass yields the whole set of static pods; the pods whose UIDs came or went are handed to
`on_change` (an edit makes a new UID, so an edited manifest is one pod gone and one new).

A manifest that does not make a pod (agent/staticpods/manifest.py) gets one log line and one Warning
event on the Node per new problem, and nothing else: the other manifests' pods run on. Two manifests
naming the same pod: the first in name order wins, the second is reported the same way.

It needs no API server: the pods come from the disk, so they run while the control plane is away (or,
as with kubeadm, before it exists: it is itself static pods).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncinotify import Inotify, Mask

from agent.staticpods.keys import CONFIG_SEEN, full_name
from agent.staticpods.manifest import ManifestError, static_pod

log = logging.getLogger("agent.staticpods")

WATCH_MASK = (
    Mask.CREATE
    | Mask.CLOSE_WRITE
    | Mask.DELETE
    | Mask.MOVED_TO
    | Mask.MOVED_FROM
    | Mask.ATTRIB
    | Mask.DELETE_SELF
    | Mask.MOVE_SELF
)
SETTLE = 0.05  # seconds to gather the burst of events one write makes before reading again
INVALID_REASON = "FailedStaticPodManifest"

Warn = Callable[[str, str], None]  # (reason, message): a Warning event on the Node


@dataclass(frozen=True)
class Manifest:
    path: str
    data: bytes | None  # None: not readable
    error: str = ""


def manifest_files(root: Path) -> list[Manifest]:
    """The manifests under `root` in upstream's order; blocking (run in a thread)."""
    if root.is_file():
        entries = [root]
    elif root.is_dir():
        entries = sorted(p for p in root.iterdir() if not p.name.startswith("."))
    else:
        return []
    out = []
    for entry in entries:
        if entry.is_dir():
            log.debug("not recursing into manifest path path=%s", entry)
            continue
        if not entry.is_file():
            continue
        try:
            out.append(Manifest(str(entry), entry.read_bytes()))
        except OSError as err:
            out.append(Manifest(str(entry), None, f"{entry}: {err.strerror}"))
    return out


class StaticPodSource:
    def __init__(
        self,
        path: str,
        node_name: str,
        period: float,
        on_change: Callable[[set[str]], None],
        warn: Warn,
    ) -> None:
        self.root = Path(path.rstrip(os.sep) or os.sep)
        self.node_name = node_name
        self.period = period
        self.on_change = on_change
        self.warn = warn
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> pod
        self._seen: dict[str, str] = {}  # uid -> config.seen, kept while the pod exists
        self._reported: dict[str, str] = {}  # file -> the problem last reported for it
        self.passes = 0

    def get(self, uid: str) -> dict[str, Any] | None:
        return self.pods.get(uid)

    def by_full_name(self, name: str) -> dict[str, Any] | None:
        for pod in self.pods.values():
            if full_name(pod) == name:
                return pod
        return None

    def list(self) -> list[dict[str, Any]]:
        return list(self.pods.values())

    def _report(self, path: str, problem: str) -> None:
        if self._reported.get(path) == problem:
            return
        self._reported[path] = problem
        log.warning("static pod manifest not used path=%s error=%r", path, problem)
        self.warn(INVALID_REASON, problem)

    def _pods_of(self, manifests: list[Manifest]) -> dict[str, dict[str, Any]]:
        pods: dict[str, dict[str, Any]] = {}
        names: dict[str, str] = {}
        for manifest in manifests:
            try:
                if manifest.data is None:
                    raise ManifestError(manifest.error)
                pod = static_pod(manifest.data, manifest.path, self.node_name)
            except ManifestError as err:
                self._report(manifest.path, str(err))
                continue
            name, uid = full_name(pod), pod["metadata"]["uid"]
            if name in names:
                self._report(
                    manifest.path, f"{manifest.path}: pod {name} is already defined by {names[name]}, ignored"
                )
                continue
            names[name] = manifest.path
            self._reported.pop(manifest.path, None)
            pod["metadata"]["annotations"][CONFIG_SEEN] = self._seen.setdefault(
                uid, pod["metadata"]["annotations"][CONFIG_SEEN]
            )
            pods[uid] = pod
        return pods

    async def rescan(self) -> set[str]:
        """Read the manifests again; the UIDs that came or went (also handed to on_change)."""
        manifests = await asyncio.to_thread(manifest_files, self.root)
        present = {m.path for m in manifests}
        for path in [p for p in self._reported if p not in present]:
            del self._reported[path]  # a bad file removed: a new bad file of that name is news again
        pods = self._pods_of(manifests)
        changed = set(pods) ^ set(self.pods)
        self.pods = pods
        for uid in [u for u in self._seen if u not in pods]:
            del self._seen[uid]
        self.passes += 1
        if changed:
            log.info(
                "static pods changed count=%d added=%s removed=%s",
                len(pods),
                sorted(full_name(pods[u]) for u in changed if u in pods),
                sorted(changed - set(pods)),
            )
            self.on_change(changed)
        return changed

    def _watched_dir(self) -> Path:
        return self.root if self.root.is_dir() else self.root.parent

    def _relevant(self, name: Path | None) -> bool:
        if name is None:
            return True  # the directory itself
        if name.name.startswith("."):
            return False
        return self.root.is_dir() or name.name == self.root.name

    async def run(self) -> None:
        """Watch and re-list until cancelled (the caller did the first rescan)."""
        while True:
            try:
                with Inotify() as inotify:
                    watched = self._watched_dir()
                    inotify.add_watch(watched, WATCH_MASK)
                    await self.rescan()  # what changed between the last pass and the watch
                    await self._watch(inotify, watched)
            except OSError as err:
                log.debug("manifest path not watched path=%s error=%r", self.root, str(err))
                await asyncio.sleep(self.period)
                await self.rescan()

    async def _watch(self, inotify: Inotify, watched: Path) -> None:
        """Until the directory to watch is another (created, removed or replaced)."""
        while watched == self._watched_dir():
            try:
                async with asyncio.timeout(self.period):  # not wait_for: 3.11's can lose the agent's cancel
                    event = await inotify.get()
            except TimeoutError:
                await self.rescan()  # fileCheckFrequency
                continue
            if event.mask & (Mask.DELETE_SELF | Mask.MOVE_SELF | Mask.IGNORED):
                await self.rescan()
                return  # the directory went: watch again once it is back
            if not self._relevant(event.name):
                continue
            await asyncio.sleep(SETTLE)
            await self.rescan()
