"""Conversion webhooks for custom resources (upstream's apiextensions-apiserver
pkg/apiserver/conversion/webhook_converter.go): with `spec.conversion.strategy: Webhook` every object that
crosses between versions (a body into storage, a stored object out to the version asked for, each item of
a list in one review, each watch event) is sent in an `apiextensions.k8s.io/v1` (or v1beta1)
ConversionReview to the CRD's webhook, and the answer is checked as upstream checks it: the uid, a
Success result, as many objects as were sent, each at the desired apiVersion with its kind, name,
namespace and uid unchanged; of the metadata only labels and annotations may change, everything else is
taken from the original (restoreObjectMeta). Objects already at the desired version are not sent; when
none needs it, nothing is called.

The HTTPS call, the Service resolution and the caBundle verification are the admission webhooks' client
(webhooks/client.py), so a conversion webhook is reached and trusted exactly as an admission webhook is.
Failures are upstream's texts (`conversion webhook for <group>/<version>, Kind=<Kind> failed: ...`),
raised as ConversionError; the callers answer 500."""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass
from typing import Any

from controlplane.apiserver.validation import annotations as validate_annotations
from controlplane.apiserver.validation import labels as validate_labels
from controlplane.apiserver.webhooks import review
from controlplane.apiserver.webhooks.client import CallError, WebhookClient
from controlplane.apiserver.webhooks.plugins import _status_text
from controlplane.apiserver.webhooks.source import Service, client_config
from controlplane.storage.cache import WatchCache

Obj = dict[str, Any]

REVIEW_VERSIONS = ("v1", "v1beta1")  # upstream's acceptedConversionReviewVersions
REVIEW_KIND = "ConversionReview"
DEFAULT_TIMEOUT = 30.0  # upstream's rest client default for conversion webhooks (?timeout=30s)
CLIENT = WebhookClient()


class ConversionError(Exception):
    """A conversion that failed; str() is upstream's message."""


@dataclass(frozen=True)
class Endpoint:
    """Where the webhook is (what WebhookClient.post reads): a URL or a Service, its CA, the timeout."""

    url: str
    service: Service | None
    ca_bundle: bytes
    timeout: float


@dataclass(frozen=True)
class WebhookConverter:
    crd: str
    kind: str
    list_kind: str
    endpoint: Endpoint
    review_versions: tuple[str, ...]

    @classmethod
    def of(cls, crd: Obj, timeout: float | None = None) -> WebhookConverter | None:
        """The converter of a CRD whose conversion strategy is Webhook, else None. `timeout` (seconds)
        defaults to the module's DEFAULT_TIMEOUT, read now, so a test may set either."""
        spec = crd.get("spec") or {}
        conversion = spec.get("conversion") or {}
        if conversion.get("strategy") != "Webhook":
            return None
        webhook = conversion.get("webhook") or {}
        url, service, bundle = client_config(webhook.get("clientConfig") or {})
        names = (crd.get("status") or {}).get("acceptedNames") or spec.get("names") or {}
        kind = names.get("kind", "")
        return cls(
            crd["metadata"]["name"],
            kind,
            names.get("listKind") or kind + "List",
            Endpoint(url, service, bundle, DEFAULT_TIMEOUT if timeout is None else timeout),
            tuple(webhook.get("conversionReviewVersions") or ()),
        )

    async def convert(
        self, objs: list[Obj], desired: str, cache: WatchCache, listing: bool = False
    ) -> list[Obj]:
        """`objs` at apiVersion `desired`; the ones already there are returned as they are. One review
        for all of them (`listing`: the items of a list, as upstream converts an UnstructuredList; the
        REST paths convert each stored object on its own, as upstream's storage decodes them)."""
        todo = [i for i, o in enumerate(objs) if o.get("apiVersion") != desired]
        if not todo:
            return objs
        first = objs[todo[0]].get("apiVersion", "")
        gvk = f"{first}, Kind={self.list_kind if listing else self.kind}"
        sent = [objs[i] for i in todo]
        converted = await self._call(gvk, sent, desired, cache)
        if len(converted) != len(sent):
            raise ConversionError(
                f"conversion webhook for {gvk} returned {len(converted)} objects, expected {len(sent)}"
            )
        out = list(objs)
        for n, (i, original, got) in enumerate(zip(todo, sent, converted, strict=True)):
            try:
                out[i] = _checked(original, got, desired, n, listing)
            except ValueError as err:
                raise ConversionError(f"conversion webhook for {gvk} returned {err}") from None
        return out

    def _request(self, objs: list[Obj], desired: str) -> tuple[str, bytes]:
        version = next((v for v in self.review_versions if v in REVIEW_VERSIONS), None)
        if version is None:
            raise ConversionError("no supported conversion review versions")
        uid = str(uuid.uuid4())
        body = {
            "apiVersion": f"apiextensions.k8s.io/{version}",
            "kind": REVIEW_KIND,
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objs},
        }
        return uid, json.dumps(body, separators=(",", ":")).encode()

    async def _call(self, gvk: str, objs: list[Obj], desired: str, cache: WatchCache) -> list[Any]:
        uid, body = self._request(objs, desired)
        failed = f"conversion webhook for {gvk} failed"
        try:
            reply = await CLIENT.post(self.endpoint, cache, body)
        except CallError as err:
            raise ConversionError(f"{failed}: {err}") from None
        if not 200 <= reply.status < 300:
            raise ConversionError(f"{failed}: {_status_text(reply)}")
        try:
            doc = review.decode(reply.body)
        except review.DecodeError as err:
            raise ConversionError(f"{failed}: {err}") from None
        try:
            return _converted_objects(uid, doc)
        except ValueError as err:
            raise ConversionError(f"{failed}: {err}") from None


def _checked(original: Obj, got: Any, desired: str, n: int, listing: bool) -> Obj:
    """One converted object checked against the one sent (the texts after upstream's `returned `; a
    list's index is counted as upstream counts it, one on once the object decoded)."""
    if not isinstance(got, dict):
        shown = review._json_type(got)
        raise ValueError(
            f"invalid converted object at index {n}: json: cannot unmarshal {shown} into Go value of type "
            "map[string]interface {}"
        )
    at = f"converted object at index {n + 1}" if listing else "object at index 0"
    if got.get("apiVersion") != desired:
        raise ValueError(
            f"invalid {at}: invalid groupVersion (expected {desired}, received {got.get('apiVersion', '')})"
        )
    if got.get("kind") != original.get("kind"):
        raise ValueError(
            f"invalid {at}: invalid kind (expected {original.get('kind', '')}, received {got.get('kind', '')})"
        )
    problem = _changed_identity(original, got)
    if problem:
        raise ValueError(f"invalid {at if listing else 'object'}: {problem}")
    try:
        return restore_object_meta(original, got)
    except ValueError as err:
        where = f"invalid metadata in object at index {n + 1}" if listing else "invalid metadata"
        raise ValueError(f"{where}: {err}") from None


def _converted_objects(uid: str, doc: Obj) -> list[Any]:
    """getConvertedObjectsFromResponse: v1 checks the kind and the uid; v1beta1 did neither."""
    v1 = doc.get("apiVersion") != "apiextensions.k8s.io/v1beta1"
    if v1:
        got = f"{doc.get('apiVersion', '')}, Kind={doc.get('kind', '')}"
        if (doc.get("apiVersion"), doc.get("kind")) != ("apiextensions.k8s.io/v1", REVIEW_KIND):
            raise ValueError(
                f"expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {got}"
            )
    response = doc.get("response")
    if not isinstance(response, dict):
        raise ValueError("no response provided")
    if v1 and response.get("uid", "") != uid:
        raise ValueError(f'expected response.uid="{uid}", got "{response.get("uid", "")}"')
    result = response.get("result") or {}
    if result.get("status") != "Success":
        if result.get("message"):
            raise ValueError(str(result["message"]))
        raise ValueError(f"response.result.status was '{result.get('status', '')}', not 'Success'")
    return list(response.get("convertedObjects") or [])


def _changed_identity(original: Obj, converted: Obj) -> str:
    """validateConvertedObject: name, namespace and uid must stay."""
    a, b = original.get("metadata") or {}, converted.get("metadata") or {}
    if not isinstance(b, dict):
        b = {}
    for field, shown in (("name", "name"), ("namespace", "namespace"), ("uid", "UID")):
        if a.get(field, "") != b.get(field, ""):
            return f"must have the same {shown}: {a.get(field, '')} != {b.get(field, '')}"
    return ""


def restore_object_meta(original: Obj, converted: Obj) -> Obj:
    """upstream's restoreObjectMeta: the original's metadata with the converted labels and annotations
    (checked as labels and annotations are on any write). ValueError names what is wrong."""
    if "metadata" not in converted:
        raise ValueError("missing metadata in converted object")
    answered = converted["metadata"]
    if not isinstance(answered, dict):
        raise ValueError(f"invalid metadata of type {review._json_type(answered)} in converted object")
    out = dict(converted)
    meta = copy.deepcopy(original.get("metadata") or {})
    for field in ("labels", "annotations"):
        value = answered.get(field)
        if value is None:
            meta.pop(field, None)
            continue
        if not isinstance(value, dict):
            raise ValueError(
                f"invalid metadata.{field} of type {review._json_type(value)} in converted object"
            )
        for k, v in value.items():
            if not isinstance(v, str):
                raise ValueError(
                    f"metadata.{field}[{k}] must be a string, but is {review._json_type(v)} in converted object"
                )
        if value != (meta.get(field) or {}):
            problems = (
                validate_labels("metadata.labels", value)
                if field == "labels"
                else validate_annotations("metadata.annotation", value)
            )
            if problems:
                texts = [f"{p.field}: {p.detail}" for p in problems]
                raise ValueError(texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]")
        meta[field] = value
    out["metadata"] = meta
    return out


__all__ = ["DEFAULT_TIMEOUT", "REVIEW_VERSIONS", "ConversionError", "WebhookConverter", "restore_object_meta"]
