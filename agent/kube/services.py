"""Every Service in the cluster, as the kubelet watches them (one informer; the Node authorizer lets a
node list and watch Services): the source of the pods' service environment variables."""

from __future__ import annotations

from typing import Any

from kubeclient.client import KubeClient
from kubeclient.informer import Informer


def service_informer(client: KubeClient) -> Informer:
    return Informer(client, "/api/v1/services")


def services_of(informer: Informer) -> list[dict[str, Any]] | None:
    """The Services held, or None until the first list has completed."""
    return informer.list() if informer.synced.is_set() else None
