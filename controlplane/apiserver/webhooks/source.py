"""The webhook configurations in memory, parsed once: upstream's configuration managers keep an
informer's view and rebuild their sorted webhook list on change. Here the watch cache calls us
synchronously on every commit of the configuration buckets (WatchCache.subscribe), so the next request
sees a change, and a request never lists or parses anything."""

from __future__ import annotations

import base64
import binascii
import weakref
from dataclasses import dataclass
from typing import Any

from controlplane.apiserver import cel
from controlplane.apiserver.webhooks.rules import Rule, selector
from controlplane.storage.cache import CacheEvent, WatchCache
from kubeclient.selectors import Selector

Obj = dict[str, Any]

MUTATING_BUCKET = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
VALIDATING_BUCKET = "validatingwebhookconfigurations.admissionregistration.k8s.io"


@dataclass(frozen=True)
class MatchCondition:
    name: str
    expression: str


@dataclass(frozen=True)
class Service:
    namespace: str
    name: str
    port: int
    path: str


def client_config(cc: Obj) -> tuple[str, Service | None, bytes]:
    """A WebhookClientConfig's (url, service, CA bundle); an undecodable caBundle is an empty one (the
    configuration's validation has already refused it)."""
    svc = cc.get("service")
    try:
        bundle = base64.b64decode(cc.get("caBundle") or "")
    except (binascii.Error, ValueError):
        bundle = b""
    service = (
        Service(
            svc.get("namespace", ""), svc.get("name", ""), int(svc.get("port") or 443), svc.get("path") or ""
        )
        if isinstance(svc, dict)
        else None
    )
    return cc.get("url") or "", service, bundle


@dataclass(frozen=True)
class Webhook:
    configuration: str
    name: str
    rules: tuple[Rule, ...]
    namespace_selector: Selector
    object_selector: Selector
    failure_policy: str
    match_policy: str
    side_effects: str
    timeout: int
    reinvoke: bool
    url: str
    service: Service | None
    ca_bundle: bytes
    match_conditions: tuple[MatchCondition, ...]

    @property
    def fails_open(self) -> bool:
        return self.failure_policy == "Ignore"

    @classmethod
    def parse(cls, configuration: str, hook: Obj) -> Webhook:
        url, service, bundle = client_config(hook.get("clientConfig") or {})
        return cls(
            configuration,
            hook.get("name", ""),
            tuple(Rule.parse(r) for r in hook.get("rules") or []),
            selector(hook.get("namespaceSelector")),
            selector(hook.get("objectSelector")),
            hook.get("failurePolicy") or "Fail",
            hook.get("matchPolicy") or "Equivalent",
            hook.get("sideEffects") or "",
            int(hook.get("timeoutSeconds") or 10),
            hook.get("reinvocationPolicy") == "IfNeeded",
            url,
            service,
            bundle,
            tuple(
                MatchCondition(c.get("name", ""), c.get("expression", ""))
                for c in hook.get("matchConditions") or []
            ),
        )


def _compile_conditions(hooks: list[Webhook]) -> None:
    for hook in hooks:
        for cond in hook.match_conditions:
            try:
                cel.compile_expression(cond.expression)
            except cel.CelError:
                pass  # validation refused it on write; an old stored one fails at match time


class WebhookSource:
    """The sorted webhooks of one bucket, kept in step with the cache. The plugin is one object for
    the process (the kinds table holds it), so a view is kept per watch cache: two servers in one
    process (tests) never see each other's configurations."""

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
        self._views: weakref.WeakKeyDictionary[WatchCache, _View] = weakref.WeakKeyDictionary()

    def hooks(self, cache: WatchCache) -> tuple[Webhook, ...]:
        view = self._views.get(cache)
        if view is None:
            view = self._views[cache] = _View(cache, self.bucket)
        return view.hooks


class _View:
    def __init__(self, cache: WatchCache, bucket: str) -> None:
        self._configs: dict[str, list[Webhook]] = {}
        self.hooks: tuple[Webhook, ...] = ()
        for cached in cache.subscribe(bucket, self._on_event):
            self._put(cached.obj)
        self._rebuild()

    def _put(self, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        hooks = [Webhook.parse(name, h) for h in obj.get("webhooks") or [] if isinstance(h, dict)]
        _compile_conditions(hooks)
        self._configs[name] = hooks

    def _on_event(self, event: CacheEvent) -> None:
        if event.type == "DELETED":
            self._configs.pop(event.obj.view["metadata"]["name"], None)
        else:
            self._put(event.obj.obj)
        self._rebuild()

    def _rebuild(self) -> None:
        # Upstream sorts configurations by name; webhooks keep their order within one.
        self.hooks = tuple(h for name in sorted(self._configs) for h in self._configs[name])
