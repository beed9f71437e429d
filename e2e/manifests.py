"""Workload manifests the scenarios share, as plain dicts (what `kubectl apply -f` would send)."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def deployment(
    name: str, containers: list[Obj], replicas: int = 1, grace: int | None = 1, **spec: Any
) -> Obj:
    """A Deployment of `containers` whose pods carry, and are selected by, the label app=<name>; `grace`
    is their terminationGracePeriodSeconds (None: upstream's 30 s default), `spec` adds to the
    Deployment's spec (strategy, minReadySeconds, ...)."""
    labels = {"app": name}
    pod: Obj = {"containers": containers}
    if grace is not None:
        pod["terminationGracePeriodSeconds"] = grace
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
            **spec,
        },
    }


def open_crd(group: str, kind: str, plural: str, scope: str = "Namespaced", **extra: Any) -> Obj:
    """A CustomResourceDefinition of one served and stored version v1 whose schema keeps every field
    (x-kubernetes-preserve-unknown-fields), as many a published operator manifest has; `extra` adds
    top-level keys (a `status` stub, say)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
        **extra,
    }
