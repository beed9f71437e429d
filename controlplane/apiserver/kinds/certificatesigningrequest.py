"""certificates.k8s.io/v1 CertificateSigningRequest (upstream's pkg/registry/certificates/
certificates/strategy.go, pkg/apis/certificates/validation and the admission plugins of
plugin/pkg/admission/certificates).

A CSR is cluster-scoped. Its requester (username, uid, groups, extra) is set by the server from whoever
created it and never changes; a create cannot carry a status. Three writers own three parts, as upstream:

- the main resource: metadata only (spec and status are kept from the stored object);
- `/approval`: the Approved and Denied conditions only; the caller must be allowed to `approve` the
  CSR's signerName (`signers` in certificates.k8s.io, named `<signerName>` or `<domain>/*`);
- `/status`: the certificate and the other conditions (Failed, ...); setting the certificate needs
  `sign` on the signer.

Approved, Denied and Failed conditions can never be removed, Approved and Denied exclude each other, the
certificate is set once. The `kubernetes.io/kube-apiserver-client` signer never takes a request for
the `system:masters` group (CertificateSubjectRestriction).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from controlplane.apiserver import tables
from controlplane.apiserver.authz import Attributes
from controlplane.apiserver.errors import (
    FieldError,
    duplicate,
    forbidden,
    forbidden_request,
    invalid,
    not_supported,
    required,
)
from controlplane.apiserver.kinds.base import REFUSE_UNSUPPORTED, Kind, Subresource, fields
from controlplane.apiserver.kinds.ports import AdmissionRequest
from controlplane.apiserver.meta import age, human_duration, timestamp
from controlplane.apiserver.validation import no_name_rule, object_meta
from kubeclient.names import dns1123_label, dns1123_subdomain

Obj = dict[str, Any]

GROUP = "certificates.k8s.io"
APPROVED, DENIED, FAILED = "Approved", "Denied", "Failed"
APPROVAL_TYPES = (APPROVED, DENIED)
TRUE_ONLY = (APPROVED, DENIED, FAILED)
LEGACY_UNKNOWN = "kubernetes.io/legacy-unknown"
KUBE_APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"

VALID_USAGES = sorted(
    (
        "signing",
        "digital signature",
        "content commitment",
        "key encipherment",
        "key agreement",
        "data encipherment",
        "cert sign",
        "crl sign",
        "encipher only",
        "decipher only",
        "any",
        "server auth",
        "client auth",
        "code signing",
        "email protection",
        "s/mime",
        "ipsec end system",
        "ipsec tunnel",
        "ipsec user",
        "timestamping",
        "ocsp signing",
        "microsoft sgc",
        "netscape sgc",
    )
)
# v1's SetDefaults_CertificateSigningRequestSpec.
DEFAULT_USAGES = ["digital signature", "key encipherment"]

_TIME = {1: ("seconds", "int", None), 2: ("nanos", "int", None)}


def _go_bytes(raw: bytes) -> str:
    """How Go's %#v prints a []byte (field.Invalid's value of spec.request)."""
    return "[]byte{" + ", ".join(f"0x{b:x}" for b in raw) + "}"


def _decode_b64(value: Any) -> bytes:
    if not value:
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError, TypeError):
        return b""


def parse_csr(pem: bytes) -> x509.CertificateSigningRequest:
    """The PKCS#10 request in a PEM block (upstream's certificates.ParseCSR), signature checked."""
    start = pem.find(b"-----BEGIN CERTIFICATE REQUEST-----")
    if start < 0:
        raise ValueError("PEM block type must be CERTIFICATE REQUEST")
    try:
        csr = x509.load_pem_x509_csr(pem[start:])
    except ValueError as err:
        raise ValueError(f"x509: malformed certificate request: {err}") from None
    if not csr.is_signature_valid:
        raise ValueError("x509: signature verification failure")
    return csr


_PEM_BLOCK = re.compile(rb"-----BEGIN ([^-\r\n]*)-----\r?\n(.*?)-----END \1-----", re.S)


def validate_certificate(pem: bytes) -> str:
    """ "" for an empty or valid status.certificate, else upstream's reason (validateCertificate)."""
    if not pem:
        return ""
    blocks = 0
    for match in _PEM_BLOCK.finditer(pem):
        block_type = match.group(1).decode(errors="replace")
        if block_type != "CERTIFICATE":
            return f"only CERTIFICATE PEM blocks are allowed, found {json.dumps(block_type)}"
        body = match.group(2)
        if b":" in body.split(b"\n", 1)[0]:
            return "no PEM block headers are permitted"
        try:
            x509.load_pem_x509_certificate(match.group(0))
        except ValueError as err:
            return f"x509: malformed certificate: {err}"
        blocks += 1
    if blocks == 0:
        return "must contain at least one CERTIFICATE PEM block"
    return ""


def validate_signer_name(path: str, name: str) -> list[FieldError]:
    """Upstream's ValidateSignerName: `<domain with a dot>/<path of DNS subdomains>`."""
    if not name:
        return [required(path)]
    segments = name.split("/")
    if len(segments) != 2:
        return [
            invalid(
                path, name, "must be a fully qualified domain and path of the form 'example.com/signer-name'"
            )
        ]
    errors: list[FieldError] = []
    domain, rest = segments
    if len(domain) > 253:
        errors.append(FieldError("FieldValueTooLong", path, "Too long: may not be more than 253 bytes"))
    labels = domain.split(".")
    for label in labels:
        problems = dns1123_label(label)
        if problems:
            errors += [invalid(path, domain, f"validating label {json.dumps(label)}: {p}") for p in problems]
            break
    if len(labels) < 2:
        errors.append(
            invalid(path, domain, "should be a domain with at least two segments separated by dots")
        )
    for part in rest.split("."):
        problems = dns1123_subdomain(part)
        if problems:
            errors += [invalid(path, rest, f"validating component {json.dumps(part)}: {p}") for p in problems]
            break
    return errors


def conditions_of(obj: Obj, kind: str) -> list[Obj]:
    return [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind]


def has_condition(obj: Obj, kind: str) -> bool:
    return bool(conditions_of(obj, kind))


def status_text(obj: Obj) -> str:
    """kubectl's CONDITION column (upstream's extractCSRStatus)."""
    text = (
        "Denied" if has_condition(obj, DENIED) else "Approved" if has_condition(obj, APPROVED) else "Pending"
    )
    if has_condition(obj, FAILED):
        text += ",Failed"
    if (obj.get("status") or {}).get("certificate"):
        text += ",Issued"
    return text


def _populate_timestamps(new: Obj, old: Obj) -> None:
    """populateConditionTimestamps: lastUpdateTime now when unset; lastTransitionTime kept from an old
    condition of the same type and status, else now."""
    now = timestamp()
    for c in (new.get("status") or {}).get("conditions") or []:
        c.setdefault("lastUpdateTime", now)
        if not c.get("lastTransitionTime"):
            kept = next(
                (
                    o.get("lastTransitionTime")
                    for o in (old.get("status") or {}).get("conditions") or []
                    if o.get("type") == c.get("type")
                    and o.get("status") == c.get("status")
                    and o.get("lastTransitionTime")
                ),
                None,
            )
            c["lastTransitionTime"] = kept or now


def _merge_conditions(new: Obj, old: Obj, take_approval: bool) -> list[Obj]:
    """The conditions after an update: the approval ones from the side that owns them (the /approval
    writer, or the stored object), the others from the other side."""
    new_conds = (new.get("status") or {}).get("conditions") or []
    old_conds = (old.get("status") or {}).get("conditions") or []
    if take_approval:
        return [c for c in new_conds if c.get("type") in APPROVAL_TYPES] + [
            c for c in old_conds if c.get("type") not in APPROVAL_TYPES
        ]
    return [c for c in new_conds if c.get("type") not in APPROVAL_TYPES] + [
        c for c in old_conds if c.get("type") in APPROVAL_TYPES
    ]


class _CSRSubresource(Subresource):
    whole_object = True
    approval = False

    def merge(self, current: Obj, desired: Obj) -> Obj:
        new = dict(desired)
        new["spec"] = current.get("spec", {})
        status = dict(desired.get("status") or {})
        old_status = current.get("status") or {}
        if self.approval:
            status.pop("certificate", None)
            if old_status.get("certificate"):
                status["certificate"] = old_status["certificate"]
        status["conditions"] = _merge_conditions(new | {"status": status}, current, self.approval)
        if not status["conditions"]:
            status.pop("conditions")
        new["status"] = status
        _populate_timestamps(new, current)
        return new


class StatusSubresource(_CSRSubresource):
    name = "status"


class ApprovalSubresource(_CSRSubresource):
    name = "approval"
    approval = True


def _authorized_for_signer(request: AdmissionRequest, verb: str, signer: str) -> bool:
    """Upstream's IsAuthorizedForSignerName: `verb` on signers/<signerName>, or on signers/<domain>/*."""
    authorization = request.registry.authorization
    if authorization is None or request.user is None:
        return authorization is None
    names = [signer]
    if "/" in signer:
        names.append(signer.split("/", 1)[0] + "/*")
    for name in names:
        attrs = Attributes(request.user, verb, GROUP, "v1", "signers", name=name)
        if authorization.chain.authorize(attrs).allowed:
            return True
    return False


class CertificateSigningRequestStrategy:
    """The requester on create (the strategy's PrepareForCreate: it needs the request's user). Not an
    admission plugin upstream, so --disable-admission-plugins cannot name it."""

    name = "CertificateSigningRequestRequester"
    always = True

    def admit(self, request: AdmissionRequest) -> None:
        if request.kind is not KIND or request.operation != "CREATE":
            return
        spec = request.obj.setdefault("spec", {})
        for key in ("username", "uid", "groups", "extra"):
            spec.pop(key, None)
        user = request.user
        if user is None:
            return
        spec["username"] = user.name
        if user.uid:
            spec["uid"] = user.uid
        if user.groups:
            spec["groups"] = list(user.groups)
        if user.extra:
            spec["extra"] = user.extra_dict()


class CertificateApproval:
    name = "CertificateApproval"

    def validate(self, request: AdmissionRequest) -> None:
        if request.kind is not KIND or request.operation != "UPDATE" or request.subresource != "approval":
            return
        signer = (request.obj.get("spec") or {}).get("signerName", "")
        if not _authorized_for_signer(request, "approve", signer):
            raise forbidden_request(
                f'{KIND.resource} "{request.name}" is forbidden: user not permitted to approve requests with '
                f'signerName "{signer}"',
                KIND.plural,
                GROUP,
                request.name,
            )


class CertificateSigning:
    name = "CertificateSigning"

    def validate(self, request: AdmissionRequest) -> None:
        if request.kind is not KIND or request.operation != "UPDATE" or request.subresource != "status":
            return
        old = request.old or {}
        if (request.obj.get("status") or {}).get("certificate") == (old.get("status") or {}).get(
            "certificate"
        ):
            return
        signer = (request.obj.get("spec") or {}).get("signerName", "")
        if not _authorized_for_signer(request, "sign", signer):
            raise forbidden_request(
                f'{KIND.resource} "{request.name}" is forbidden: user not permitted to sign requests with '
                f'signerName "{signer}"',
                KIND.plural,
                GROUP,
                request.name,
            )


class CertificateSubjectRestriction:
    name = "CertificateSubjectRestriction"

    def validate(self, request: AdmissionRequest) -> None:
        if request.kind is not KIND or request.operation != "CREATE":
            return
        spec = request.obj.get("spec") or {}
        if spec.get("signerName") != KUBE_APISERVER_CLIENT:
            return
        try:
            csr = parse_csr(_decode_b64(spec.get("request")))
        except ValueError:
            return  # validation refuses it
        orgs = [a.value for a in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
        if "system:masters" in orgs:
            raise forbidden_request(
                f'{KIND.resource} "{request.name}" is forbidden: use of {KUBE_APISERVER_CLIENT} signer with '
                "system:masters group is not allowed",
                KIND.plural,
                GROUP,
                request.name,
            )


class CertificateSigningRequest(Kind):
    group = GROUP
    kind = "CertificateSigningRequest"
    plural = "certificatesigningrequests"
    namespaced = False
    short_names = ("csr",)
    schema = "V1CertificateSigningRequest"
    field_selectors = fields("spec.signerName")
    field_meta = ("metadata.name",)
    field_refusal = REFUSE_UNSUPPORTED
    subresources = (StatusSubresource(), ApprovalSubresource())
    columns = (
        tables.NAME,
        tables.AGE,
        tables.column(
            "SignerName", desc="signerName indicates the requested signer, and is a qualified name."
        ),
        tables.column(
            "Requestor",
            desc="request contains an x509 certificate signing request encoded in a "
            '"CERTIFICATE REQUEST" PEM block.',
        ),
        tables.column(
            "RequestedDuration",
            desc="expirationSeconds is the requested duration of validity of the issued certificate.",
        ),
        tables.column(
            "Condition",
            desc='conditions applied to the request. Known conditions are "Approved", '
            '"Denied", and "Failed".',
        ),
    )
    admission = (
        CertificateSigningRequestStrategy(),
        CertificateApproval(),
        CertificateSigning(),
        CertificateSubjectRestriction(),
    )

    def validate_name(self, path: str, name: str) -> list[FieldError]:
        return no_name_rule(path, name)  # upstream: "We don't care what you call your certificate requests."

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.setdefault("spec", {})
        if spec.get("usages") is None:
            spec["usages"] = list(DEFAULT_USAGES)

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {}

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        new["spec"] = old.get("spec", {})
        if "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)

    def validate(self, obj: Obj) -> list[FieldError]:
        """validateCertificateSigningRequest with create's options (updates keep spec, so the
        tolerances upstream grants to stored data matter only for the status; see validate_update)."""
        return self._validate(obj, None)

    def _validate(self, obj: Obj, old: Obj | None) -> list[FieldError]:
        errors = object_meta(obj.get("metadata"), self.validate_name)
        spec = obj.get("spec") or {}
        old_spec = (old or {}).get("spec") or {}
        raw = _decode_b64(spec.get("request"))
        try:
            parse_csr(raw)
        except ValueError as err:
            errors.append(
                FieldError("FieldValueInvalid", "spec.request", f"Invalid value: {_go_bytes(raw)}: {err}")
            )
        usages = spec.get("usages") or []
        if not usages:
            errors.append(required("spec.usages"))
        if not any(u not in VALID_USAGES for u in old_spec.get("usages") or []):
            errors += [
                not_supported(f"spec.usages[{i}]", u, VALID_USAGES)
                for i, u in enumerate(usages)
                if u not in VALID_USAGES
            ]
        old_usages = old_spec.get("usages") or []
        if len(set(old_usages)) == len(old_usages):
            seen: set[str] = set()
            for i, u in enumerate(usages):
                if u in seen:
                    errors.append(duplicate(f"spec.usages[{i}]", u))
                seen.add(u)
        signer = spec.get("signerName", "")
        if signer == LEGACY_UNKNOWN and old_spec.get("signerName") != LEGACY_UNKNOWN:
            errors.append(
                invalid(
                    "spec.signerName", signer, "the legacy signerName is not allowed via this API version"
                )
            )
        else:
            errors += validate_signer_name("spec.signerName", signer)
        expiration = spec.get("expirationSeconds")
        if expiration is not None and expiration < 600:
            errors.append(
                invalid(
                    "spec.expirationSeconds",
                    expiration,
                    "may not specify a duration less than 600 seconds (10 minutes)",
                )
            )
        errors += self._validate_conditions(obj, old)
        certificate = (obj.get("status") or {}).get("certificate")
        old_certificate = ((old or {}).get("status") or {}).get("certificate")
        arbitrary = old is not None and (
            certificate == old_certificate or bool(validate_certificate(_decode_b64(old_certificate)))
        )
        if not arbitrary:
            why = validate_certificate(_decode_b64(certificate))
            if why:
                errors.append(invalid("status.certificate", "<certificate data>", why))
        return errors

    def _validate_conditions(self, obj: Obj, old: Obj | None) -> list[FieldError]:
        errors: list[FieldError] = []
        conditions = (obj.get("status") or {}).get("conditions") or []
        old_conditions = ((old or {}).get("status") or {}).get("conditions") or []
        old_types = [c.get("type") for c in old_conditions]
        allow_both = APPROVED in old_types and DENIED in old_types
        allow_duplicates = len(set(old_types)) != len(old_types)
        allow_empty = "" in old_types or None in old_types
        seen: set[str] = set()
        approved = denied = False
        for i, c in enumerate(conditions):
            path = f"status.conditions[{i}]"
            kind = c.get("type") or ""
            if not kind and not allow_empty:
                errors.append(required(f"{path}.type"))
            allowed = ["True"] if kind in TRUE_ONLY else ["False", "True", "Unknown"]
            status = c.get("status") or ""
            if not status:
                errors.append(required(f"{path}.status"))
            elif status not in allowed:
                errors.append(not_supported(f"{path}.status", status, allowed))
            if not allow_both:
                if kind == APPROVED:
                    approved = True
                    if denied:
                        errors.append(
                            invalid(
                                f"{path}.type", kind, "Approved and Denied conditions are mutually exclusive"
                            )
                        )
                elif kind == DENIED:
                    denied = True
                    if approved:
                        errors.append(
                            invalid(
                                f"{path}.type", kind, "Approved and Denied conditions are mutually exclusive"
                            )
                        )
            if not allow_duplicates:
                if kind in seen:
                    errors.append(duplicate(f"{path}.type", kind))
                seen.add(kind)
        return errors

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        errors: list[FieldError] = []
        for kind in (APPROVED, DENIED, FAILED):
            if len(conditions_of(new, kind)) < len(conditions_of(old, kind)):
                errors.append(
                    forbidden("status.conditions", f'updates may not remove a condition of type "{kind}"')
                )
        if subresource != "approval":
            for kind in APPROVAL_TYPES:
                before, after = conditions_of(old, kind), conditions_of(new, kind)
                if len(after) > len(before):
                    errors.append(
                        forbidden("status.conditions", f'updates may not add a condition of type "{kind}"')
                    )
                elif len(after) == len(before) and after != before:
                    errors.append(
                        forbidden("status.conditions", f'updates may not modify a condition of type "{kind}"')
                    )
        new_cert = (new.get("status") or {}).get("certificate") or ""
        old_cert = (old.get("status") or {}).get("certificate") or ""
        if new_cert != old_cert:
            if subresource != "status":
                errors.append(forbidden("status.certificate", "updates may not set certificate content"))
            elif old_cert:
                errors.append(
                    forbidden("status.certificate", "updates may not modify existing certificate content")
                )
        return errors

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        seconds = spec.get("expirationSeconds")
        try:
            duration = human_duration(dt.timedelta(seconds=int(seconds))) if seconds is not None else "<none>"
        except (
            OverflowError,
            ValueError,
            TypeError,
        ):  # beyond what a duration can say (validation refuses it)
            duration = f"{seconds}s"
        return [
            obj["metadata"].get("name"),
            age(obj),
            spec.get("signerName") or "<none>",
            spec.get("username", ""),
            duration,
            status_text(obj),
        ]


KIND = CertificateSigningRequest()
