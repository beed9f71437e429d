"""Creates sent at once, each on its own connection (tests/controlplane/test_apiserver_quota.py and
tests/rig/test_ha_drills.py race them against a ResourceQuota), written once."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

CONFLICT_TRIES = 5


def create_at_once(
    clients: list[ApiClient], create: Callable[[ApiClient, int], Any], refusal: str
) -> list[int]:
    """create(clients[i], i) for every client at the same time: 201 for each that got in, 403 for each
        refused with a message containing `refusal` (any other answer fails); a 409 on the quota is tried again,
    as a client does. The clients are closed after."""

    def one(i: int) -> int:
        for _ in range(CONFLICT_TRIES):
            try:
                create(clients[i], i)
                return 201
            except ApiException as err:
                if err.status == 409 and "resourcequotas" in err.body:
                    # Upstream's answer when the quota's own retries all lost a race (kube-apiserver's
                    # quota evaluator, three retries): nothing was stored, and a client tries again.
                    continue
                assert err.status == 403 and refusal in err.body, err.body
                return 403
        raise AssertionError(f"create {i}: the quota conflicted {CONFLICT_TRIES} times in a row")

    try:
        with ThreadPoolExecutor(len(clients)) as pool:
            return list(pool.map(one, range(len(clients))))
    finally:
        for api_client in clients:
            api_client.close()
