"""The network-policy agent's loop (the role kube-router's and Calico felix's policy controllers play on
each node): informers on NetworkPolicies, Pods, Namespaces and Nodes (their pod CIDRs, for the guard of
pods whose address is not known yet: rules.py); every change wakes one sync, at most one
per `min_sync_period`; a sync builds the whole wanted table from the caches (rules.py) and writes what
differs from the last one written (delta.py) in one atomic `nft -f` transaction. The first sync, the
periodic one (every `resync_period`) and any after a refused transaction replace the whole table.

One bad policy never breaks the others: a policy the agent cannot parse, or whose rules nft refuses
(found with `nft -c`, one policy at a time, only after a refused sync), keeps isolating the pods it
selects but admits nothing (fail closed), and gets one Warning event `FailedToProgramPolicy` per
version. Stopping leaves the rules (pods stay protected while the agent restarts); `cleanup` removes
the table."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kubeclient.client import KubeClient
from kubeclient.events import WARNING, EventRecorder, EventSource
from kubeclient.informer import Informer, key_of
from netpolicy.delta import delta
from netpolicy.model import PodInfo, Policy, PolicyError, isolation_only, node_cidrs, parse_pod, parse_policy
from netpolicy.nft import NftError, NftTable
from netpolicy.rules import Cluster, Ruleset, build

log = logging.getLogger("netpolicy")
Obj = dict[str, Any]
NOT_PROGRAMMED = "FailedToProgramPolicy"
COMPONENT = "pykubelet-netpolicy"


@dataclass
class AgentConfig:
    node_names: frozenset[str]
    min_sync_period: float = 0.1
    resync_period: float = 60.0
    nft: NftTable = field(default_factory=NftTable)


class PolicyAgent:
    def __init__(self, client: KubeClient, config: AgentConfig) -> None:
        self.client = client
        self.config = config
        self.policies = Informer(client, "/apis/networking.k8s.io/v1/networkpolicies")
        self.pods = Informer(client, "/api/v1/pods")
        self.namespaces = Informer(client, "/api/v1/namespaces")
        # One node (a joined host, on its node's own credential): only that Node, which the Node
        # authorizer lets a node read (a list or watch pinned by metadata.name); several: all of them.
        (only,) = config.node_names if len(config.node_names) == 1 else (None,)
        self.nodes = Informer(
            client, "/api/v1/nodes", field_selector=f"metadata.name={only}" if only else None
        )
        for informer in self._informers:
            informer.add_handler(
                on_add=lambda _o: self._wake.set(),
                on_update=lambda _o, _n: self._wake.set(),
                on_delete=lambda _o: self._wake.set(),
            )
        self._wake = asyncio.Event()
        self.last_script = ""  # the last transaction written; "" makes the next sync replace the table
        self.applied: Ruleset | None = None  # what the table holds after it
        self.syncs = 0
        self.failures = 0
        self.withheld: frozenset[str] = frozenset()  # policy keys whose rules nft refused
        self._withheld_versions: dict[str, str] = {}
        self._reported: set[tuple[str, str]] = set()
        self._parsed: dict[str, tuple[str, Policy | None]] = {}  # key -> (resourceVersion, parsed)
        self.recorder = EventRecorder(client, EventSource(COMPONENT, ",".join(sorted(config.node_names))))

    @property
    def _informers(self) -> tuple[Informer, ...]:
        return (self.policies, self.pods, self.namespaces, self.nodes)

    # --- the caches, parsed ---------------------------------------------------------------------------

    def _parse(self, obj: Obj) -> Policy | None:
        try:
            return parse_policy(obj)
        except PolicyError as err:
            self._report(obj, f"its rules cannot be used ({err}); the pods it selects admit nothing by it")
            return isolation_only(obj)

    def _parsed_policies(self) -> list[Policy]:
        """The policies parsed, each once per resourceVersion."""
        cache: dict[str, tuple[str, Policy | None]] = {}
        for obj in self.policies.list():
            key, version = key_of(obj), str((obj.get("metadata") or {}).get("resourceVersion", ""))
            known = self._parsed.get(key)
            cache[key] = known if known is not None and known[0] == version else (version, self._parse(obj))
        self._parsed = cache
        return [policy for _, policy in cache.values() if policy is not None]

    def cluster(self) -> Cluster:
        objects = self.pods.list()
        pods: list[PodInfo] = [p for p in (parse_pod(o) for o in objects) if p is not None]
        pending = [p for p in (parse_pod(o, pending=True) for o in objects) if p is not None]
        namespaces = {
            (o.get("metadata") or {}).get("name", ""): dict((o.get("metadata") or {}).get("labels") or {})
            for o in self.namespaces.list()
        }
        cidrs = {
            name: node_cidrs(o)
            for o in self.nodes.list()
            if (name := str((o.get("metadata") or {}).get("name", ""))) in self.config.node_names
        }
        return Cluster(
            tuple(self._parsed_policies()),
            tuple(pods),
            namespaces,
            self.config.node_names,
            pending=tuple(pending),
            node_cidrs=cidrs,
        )

    def _report(self, obj: Obj, problem: str) -> None:
        meta = obj.get("metadata") or {}
        marker = (key_of(obj), str(meta.get("resourceVersion", "")))
        if marker in self._reported:
            return
        self._reported.add(marker)
        log.warning("policy=%s not programmed: %s", marker[0], problem)
        self.recorder.event(obj, WARNING, NOT_PROGRAMMED, f"NetworkPolicy not programmed: {problem}")

    # --- syncing -------------------------------------------------------------------------------------

    async def _refused(self, cluster: Cluster) -> frozenset[str]:
        """The policies whose rules nft refuses on their own (each checked with the others withheld)."""
        keys = sorted({p.key for p in cluster.policies})
        bad = set()
        for key in keys:
            others = frozenset(k for k in keys if k != key)
            try:
                await self.config.nft.write(
                    build(cluster, others).script(self.config.nft.table), check_only=True
                )
            except NftError:
                bad.add(key)
        return frozenset(bad)

    def _versions(self) -> dict[str, str]:
        return {
            key_of(o): str((o.get("metadata") or {}).get("resourceVersion", "")) for o in self.policies.list()
        }

    async def sync(self) -> bool:
        started = time.monotonic()
        cluster = self.cluster()
        versions = self._versions()
        # A policy nft refused stays withheld until it changes.
        self.withheld = frozenset(
            k for k in self.withheld if self._withheld_versions.get(k) == versions.get(k)
        )
        ruleset: Ruleset = build(cluster, self.withheld)
        table = self.config.nft.table
        if self.last_script and self.applied is not None:
            script = delta(self.applied, ruleset, table)
            if not script:
                return True
        else:
            script = ruleset.script(table)
        try:
            try:
                await self.config.nft.write(script)
            except NftError as err:
                log.warning("sync refused, looking for the policy to blame: %s", err)
                bad = await self._refused(cluster)
                self.withheld |= bad
                self._withheld_versions.update({k: versions.get(k, "") for k in bad})
                for key in bad:
                    obj = self.policies.get(key)
                    if obj is not None:
                        self._report(obj, "nft refused its rules; the pods it selects admit nothing by it")
                ruleset = build(cluster, self.withheld)
                script = ruleset.script(table)  # the whole table: also mends one changed behind our back
                await self.config.nft.write(script)
        except NftError as err:
            self.failures += 1
            self.applied, self.last_script = None, ""
            log.error("sync failed: %s", err)
            return False
        self.last_script, self.applied = script, ruleset
        self.syncs += 1
        log.info(
            "synced policies=%d isolated_ingress=%d isolated_egress=%d took=%.3fs",
            len(cluster.policies),
            len(ruleset.ingress),
            len(ruleset.egress),
            time.monotonic() - started,
        )
        return True

    # --- running -------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Informers, then the sync loop until `stop` is set. The rules stay when it ends."""
        tasks = [
            asyncio.create_task(self.policies.run(), name="networkpolicies informer"),
            asyncio.create_task(self.pods.run(), name="pods informer"),
            asyncio.create_task(self.namespaces.run(), name="namespaces informer"),
            asyncio.create_task(self.nodes.run(), name="nodes informer"),
        ]
        self.recorder.start()
        try:
            synced = asyncio.gather(*(i.synced.wait() for i in self._informers))
            halt = asyncio.create_task(stop.wait())
            await asyncio.wait({halt, synced}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                synced.cancel()
                return
            await self._loop(stop)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.recorder.stop()

    async def _loop(self, stop: asyncio.Event) -> None:
        self._wake.set()
        retry = False
        while not stop.is_set():
            wake = asyncio.create_task(self._wake.wait())
            halt = asyncio.create_task(stop.wait())
            timeout = self.config.resync_period if not retry else 1.0
            await asyncio.wait({wake, halt}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            wake.cancel()
            halt.cancel()
            if stop.is_set():
                return
            if not self._wake.is_set():
                self.last_script = ""  # the periodic resync rewrites the table even when nothing changed
            self._wake.clear()
            began = time.monotonic()
            retry = not await self.sync()
            rest = self.config.min_sync_period - (time.monotonic() - began)
            if rest > 0:
                await asyncio.sleep(rest)  # the rate limit between syncs: later changes wait this long

    async def cleanup(self) -> bool:
        return await self.config.nft.remove()
