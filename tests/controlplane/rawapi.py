"""A JSON request through the official client's connection, answered as (status, body) whether it
succeeded or not: for the tests that compare the exact bytes and texts a call gets back."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

Obj = dict[str, Any]


def call(api: client.ApiClient, method: str, path: str, body: Obj | None = None) -> tuple[int, Obj]:
    try:
        answer = api.call_api(
            method,
            f"{api.configuration.host}{path}",
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=body,
        )
    except ApiException as err:
        return err.status, json.loads(err.body)
    answer.read()
    return answer.status, json.loads(answer.data)
