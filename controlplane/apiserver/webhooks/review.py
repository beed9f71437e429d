"""The AdmissionReview v1 exchange: the request a webhook is sent (upstream's CreateV1AdmissionReview)
and the checks on its answer (VerifyAdmissionResponse), with upstream's error texts. Pure functions:
no I/O, no logging (the objects may be Secrets)."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from controlplane.apiserver.authn import UserInfo

Obj = dict[str, Any]

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
GVK = f"{API_VERSION}, Kind={KIND}"


class InvalidResponse(Exception):
    """The webhook's answer breaks the protocol; str() is upstream's reason."""


@dataclass(frozen=True)
class Target:
    """What the review names: the request's kind and resource (as the client asked for them)."""

    group: str
    version: str
    kind: str
    resource: str
    subresource: str
    # What the client asked for, when the webhook sees an equivalent version (matchPolicy Equivalent).
    request_group: str = ""
    request_version: str = ""
    request_kind: str = ""
    request_resource: str = ""


@dataclass
class Response:
    allowed: bool
    status: Obj | None = None
    patch: list[Any] | None = None
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)


def user_info(user: UserInfo | None) -> Obj:
    if user is None:
        return {}
    out: Obj = {"username": user.name}
    if user.uid:
        out["uid"] = user.uid
    if user.groups:
        out["groups"] = list(user.groups)
    if user.extra:
        out["extra"] = user.extra_dict()
    return out


def _options(operation: str, dry_run: bool) -> Obj | None:
    kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}.get(operation)
    if kind is None:
        return None
    out: Obj = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
    if dry_run:
        out["dryRun"] = ["All"]
    return out


def build(
    target: Target,
    operation: str,
    namespace: str,
    name: str,
    obj: Obj | None,
    old: Obj | None,
    user: UserInfo | None,
    dry_run: bool,
) -> tuple[str, bytes]:
    """(uid, body) of a new review."""
    uid = str(uuid.uuid4())
    gvk = {"group": target.group, "version": target.version, "kind": target.kind}
    gvr = {"group": target.group, "version": target.version, "resource": target.resource}
    request_gvk = {
        "group": target.request_group,
        "version": target.request_version,
        "kind": target.request_kind,
    }
    request_gvr = {
        "group": target.request_group,
        "version": target.request_version,
        "resource": target.request_resource,
    }
    request: Obj = {
        "uid": uid,
        "kind": gvk,
        "resource": gvr,
        "requestKind": request_gvk if target.request_kind else gvk,
        "requestResource": request_gvr if target.request_resource else gvr,
        "name": name,
        "operation": operation,
        "userInfo": user_info(user),
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": _options(operation, dry_run),
    }
    if target.subresource:
        request["subResource"] = target.subresource
        request["requestSubResource"] = target.subresource
    if namespace:
        request["namespace"] = namespace
    review = {"kind": KIND, "apiVersion": API_VERSION, "request": request}
    return uid, json.dumps(review, separators=(",", ":")).encode()


def decode(body: bytes) -> Obj:
    """The body as a review; a body that is no JSON object is the rest client's decoding error."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise DecodeError(f"couldn't get version/kind; json parse error: {err}") from None
    if not isinstance(doc, dict):
        raise DecodeError(
            "couldn't get version/kind; json parse error: json: cannot unmarshal "
            f'{_json_type(doc)} into Go value of type struct {{ APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }}'
        )
    if not doc.get("kind"):
        raise DecodeError(f"Object 'Kind' is missing in '{body.decode(errors='replace')[:256]}'")
    return doc


class DecodeError(Exception):
    """The answer is not an object the client can decode (a call failure upstream)."""


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "null"


def verify(uid: str, mutating: bool, review: Obj) -> Response:
    """VerifyAdmissionResponse for v1."""
    response = review.get("response")
    if not isinstance(response, dict):
        raise InvalidResponse("webhook response was absent")
    got = response.get("uid", "")
    if got != uid:
        raise InvalidResponse(f'expected response.uid="{uid}", got "{got}"')
    have = f"{review.get('apiVersion', '')}, Kind={review.get('kind', '')}"
    if have != GVK:
        raise InvalidResponse(f"expected webhook response of {GVK}, got {have}")
    patch_text = response.get("patch") or ""
    patch_type = response.get("patchType") or ""
    if patch_text and not patch_type:
        raise InvalidResponse("webhook returned response.patch but not response.patchType")
    if patch_type and not patch_text:
        raise InvalidResponse("webhook returned response.patchType but not response.patch")
    if not mutating and patch_text:
        raise InvalidResponse("validating webhook may not return response.patch")
    if not mutating and patch_type:
        raise InvalidResponse("validating webhook may not return response.patchType")
    if patch_type and patch_type != "JSONPatch":
        raise InvalidResponse(f'webhook returned invalid response.patchType of "{patch_type}"')
    status = response.get("status")
    out = Response(
        allowed=response.get("allowed") is True,
        status=status if isinstance(status, dict) else None,
        warnings=[w for w in response.get("warnings") or [] if isinstance(w, str)],
        audit_annotations={
            k: v for k, v in (response.get("auditAnnotations") or {}).items() if isinstance(v, str)
        },
    )
    if patch_text:
        out.patch = decode_patch(patch_text)
    return out


class UndecodablePatch(Exception):
    pass


def decode_patch(text: Any) -> list[Any]:
    """response.patch: base64 of a JSON array of operations (jsonpatch.DecodePatch)."""
    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
    except (binascii.Error, ValueError) as err:
        raise InvalidResponse(f"illegal base64 data: {err}") from None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise UndecodablePatch(f"invalid character in patch: {err}") from None
    if not isinstance(doc, list):
        raise UndecodablePatch(
            f"json: cannot unmarshal {_json_type(doc)} into Go value of type jsonpatch.Patch"
        )
    return doc


def denial_status(webhook: str, status: Obj | None) -> Obj:
    """webhookerrors.ToStatusErr: the webhook's Status, code >= 400, message prefixed."""
    status = dict(status or {})
    denied = f'admission webhook "{webhook}" denied the request'
    code = status.get("code")
    if not isinstance(code, int) or code < 400:
        code = 400
    message = status.get("message") or ""
    reason = status.get("reason") or ""
    if message:
        text = f"{denied}: {message}"
    elif reason:
        text = f"{denied}: {reason}"
    else:
        text = f"{denied} without explanation"
    out: Obj = {"code": code, "message": text, "reason": reason}
    if isinstance(status.get("details"), dict):
        out["details"] = status["details"]
    return out
