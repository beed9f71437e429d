"""A real CRD conversion webhook for tests: an aiohttp HTTPS server on the host with its own CA (from
webhookserver.make_tls), answering ConversionReview by path. /convert converts a CronTab between v1
(`spec.cronSpec`) and v2 (`spec.schedule`), stamps the annotation `converted-to: <version>` and also
tries to change metadata it may not (generation, finalizers: the API server must discard those). The
broken answers: /wronguid, /fewer (no objects), /sameversion (objects left at their version), /rename
(another name), /fail (result Failure with a message), /hang (never answers). Every review is recorded."""

from __future__ import annotations

import copy
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.controlplane.webhookserver import ReviewServer, serving_in_thread

Obj = dict[str, Any]


def convert(obj: Obj, desired: str) -> Obj:
    out = copy.deepcopy(obj)
    spec = out.setdefault("spec", {})
    if desired.endswith("/v2") and "cronSpec" in spec:
        spec["schedule"] = spec.pop("cronSpec")
    elif desired.endswith("/v1") and "schedule" in spec:
        spec["cronSpec"] = spec.pop("schedule")
    out["apiVersion"] = desired
    meta = out.setdefault("metadata", {})
    meta.setdefault("annotations", {})["converted-to"] = desired.rsplit("/", 1)[1]
    meta["generation"] = 99  # not the webhook's to change: restored from the original
    meta["finalizers"] = ["example.com/sneaky"]
    return out


class ConversionServer(ReviewServer):
    async def _handle(self, http: web.Request) -> web.StreamResponse:
        review, req, path = await self._received(http)
        desired = req["desiredAPIVersion"]
        objects = [convert(o, desired) for o in req["objects"]]
        uid = req["uid"]
        result: Obj = {"status": "Success"}
        if path == "/wronguid":
            uid = "not-the-uid"
        elif path == "/fewer":
            objects = []
        elif path == "/sameversion":
            for obj, original in zip(objects, req["objects"], strict=True):
                obj["apiVersion"] = original["apiVersion"]
        elif path == "/rename":
            for obj in objects:
                obj["metadata"]["name"] = "someone-else"
        elif path == "/fail":
            result = {"status": "Failure", "message": "this webhook refuses to convert"}
            objects = []
        elif path == "/hang":
            await self._held()
        return web.json_response(
            {
                "apiVersion": review.get("apiVersion", "apiextensions.k8s.io/v1"),
                "kind": "ConversionReview",
                "response": {"uid": uid, "result": result, "convertedObjects": objects},
            }
        )


def serving(
    directory: Path, host: str = "127.0.0.1", names: tuple[str, ...] = ()
) -> AbstractContextManager[ConversionServer]:
    """Run a ConversionServer on `host` (a free port; its certificate also for `names`) in a thread with
    its own event loop."""
    return serving_in_thread(
        lambda ca: ConversionServer(host, ca_pem=ca), directory, host, names, "conversion webhook"
    )
