"""Defaulting and validation of webhook configurations, as upstream's admissionregistration/v1 defaults
and validation (pkg/apis/admissionregistration/validation): webhook names unique and fully qualified,
sideEffects None or NoneOnDryRun, admissionReviewVersions naming v1 or v1beta1, clientConfig exactly one
of url (https, no query, fragment or user) or service, timeoutSeconds 1..30, the rules' operations,
groups, versions, resources and scope, the selectors, and match conditions that compile. The rule
checks are shared with ValidatingAdmissionPolicy's matchConstraints."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any
from urllib.parse import urlsplit

from controlplane.apiserver import cel
from controlplane.apiserver.errors import FieldError, duplicate, invalid, not_supported, required
from controlplane.apiserver.rbac.validation import label_selector
from controlplane.apiserver.validation import dns_subdomain, qualified_name
from kubeclient import names

Obj = dict[str, Any]

OPERATIONS = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"]
SCOPES = ["*", "Cluster", "Namespaced"]
FAILURE_POLICIES = ["Fail", "Ignore"]
MATCH_POLICIES = ["Equivalent", "Exact"]
REINVOCATION_POLICIES = ["IfNeeded", "Never"]
SIDE_EFFECTS = ["None", "NoneOnDryRun"]
REVIEW_VERSIONS = ["v1", "v1beta1"]
DEFAULT_TIMEOUT = 10


def default_webhook(hook: Obj, mutating: bool) -> None:
    hook.setdefault("failurePolicy", "Fail")
    hook.setdefault("matchPolicy", "Equivalent")
    hook.setdefault("namespaceSelector", {})
    hook.setdefault("objectSelector", {})
    hook.setdefault("timeoutSeconds", DEFAULT_TIMEOUT)
    if mutating:
        hook.setdefault("reinvocationPolicy", "Never")
    for rule in hook.get("rules") or []:
        if isinstance(rule, dict):
            rule.setdefault("scope", "*")
    service = (hook.get("clientConfig") or {}).get("service")
    if isinstance(service, dict):
        service.setdefault("port", 443)


def _star_alone(path: str, values: list[Any], what: str) -> list[FieldError]:
    if "*" in values and len(values) > 1:
        return [invalid(path, values, f"if '*' is present, must not specify other {what}")]
    return []


def rule(path: str, rule_: Any, with_operations: bool = True) -> list[FieldError]:
    rule_ = rule_ if isinstance(rule_, dict) else {}
    out: list[FieldError] = []
    if with_operations:
        ops = rule_.get("operations") or []
        if not ops:
            out.append(required(f"{path}.operations"))
        out += _star_alone(f"{path}.operations", ops, "operations")
        out += [
            not_supported(f"{path}.operations[{i}]", o, OPERATIONS)
            for i, o in enumerate(ops)
            if o not in OPERATIONS
        ]
    groups = rule_.get("apiGroups") or []
    if not groups:
        out.append(required(f"{path}.apiGroups"))
    out += _star_alone(f"{path}.apiGroups", groups, "API groups")
    versions = rule_.get("apiVersions") or []
    if not versions:
        out.append(required(f"{path}.apiVersions"))
    out += _star_alone(f"{path}.apiVersions", versions, "API versions")
    out += [required(f"{path}.apiVersions[{i}]") for i, v in enumerate(versions) if not v]
    out += _resources(f"{path}.resources", rule_.get("resources") or [])
    scope = rule_.get("scope")
    if scope is not None and scope not in SCOPES:
        out.append(not_supported(f"{path}.scope", scope, SCOPES))
    return out


def _resources(path: str, resources: list[str]) -> list[FieldError]:
    if not resources:
        return [required(path)]
    out: list[FieldError] = []
    with_sub: set[str] = set()
    without_sub: set[str] = set()
    for i, item in enumerate(resources):
        if not item:
            out.append(required(f"{path}[{i}]"))
            continue
        res, slash, sub = item.partition("/")
        if slash and not sub or "/" in sub:
            out.append(
                invalid(
                    f"{path}[{i}]",
                    item,
                    "must be of the form 'resource', 'resource/subresource', '*', '*/*', or '*/subresource'",
                )
            )
            continue
        (with_sub if slash else without_sub).add(res if not slash else item)
    if "*" in without_sub and len(without_sub) > 1:
        out.append(
            invalid(
                path, resources, "if '*' is present, must not specify other resources without subresources"
            )
        )
    if "*/*" in with_sub and len(with_sub) > 1:
        out.append(invalid(path, resources, "if '*/*' is present, must not specify other resources"))
    return out


_FORM = "; desired format: https://host[/path]"


def _url(path: str, url: str) -> list[FieldError]:
    """webhook.ValidateWebhookURL with https forced: each failure names the offending part."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a bad port is a parse error, as Go's url.Parse says
    except ValueError as err:
        return [required(path, f"url must be a valid URL: {err}{_FORM}")]
    out: list[FieldError] = []
    if parts.scheme != "https":
        out.append(invalid(path, parts.scheme, "'https' is the only allowed URL scheme" + _FORM))
    if not parts.netloc:
        out.append(invalid(path, "", "host must be provided" + _FORM))
    if "@" in parts.netloc:
        out.append(
            invalid(path, parts.netloc.rsplit("@", 1)[0], "user information is not permitted in the URL")
        )
    if parts.fragment:
        out.append(invalid(path, parts.fragment, "fragments are not permitted in the URL"))
    if parts.query:
        out.append(invalid(path, parts.query, "query parameters are not permitted in the URL"))
    return out


def _service(path: str, svc: Obj) -> list[FieldError]:
    """webhook.ValidateWebhookService."""
    out: list[FieldError] = []
    if not svc.get("name"):
        out.append(required(f"{path}.name", "service name is required"))
    if not svc.get("namespace"):
        out.append(required(f"{path}.namespace", "service namespace is required"))
    port = svc.get("port", 443)
    if not isinstance(port, int) or not 1 <= port <= 65535:
        out.append(invalid(f"{path}.port", port, "port is not valid: must be between 1 and 65535, inclusive"))
    sub = svc.get("path")
    if not sub or sub == "/":
        return out
    if sub == "//":
        return [*out, invalid(f"{path}.path", sub, "segment[0] may not be empty")]
    if not sub.startswith("/"):
        out.append(invalid(f"{path}.path", sub, "must start with a '/'"))
    rest = sub[1:]
    if rest.endswith("/"):
        rest = rest[:-1]
    for i, step in enumerate(rest.split("/")):
        if not step:
            out.append(invalid(f"{path}.path", sub, f"segment[{i}] may not be empty"))
            continue
        out += [invalid(f"{path}.path", sub, f"segment[{i}]: {m}") for m in names.dns1123_subdomain(step)]
    return out


def client_config(path: str, config: Any) -> list[FieldError]:
    config = config if isinstance(config, dict) else {}
    url, svc = config.get("url"), config.get("service")
    out: list[FieldError] = []
    if (url is None) == (svc is None):
        out.append(required(path, "exactly one of url or service is required"))
    elif url is not None:
        out += _url(f"{path}.url", url)
    else:
        out += _service(f"{path}.service", svc if isinstance(svc, dict) else {})
    bundle = config.get("caBundle")
    if bundle:
        try:
            base64.b64decode(bundle, validate=True)
        except (binascii.Error, ValueError):
            out.append(invalid(f"{path}.caBundle", "<bytes>", "must be base64-encoded"))
    return out


def review_versions(path: str, versions: Any, empty: FieldError | None = None) -> list[FieldError]:
    """admissionReviewVersions (and a CRD's conversionReviewVersions, whose `empty` error is its own):
    no duplicates, DNS labels, at least one version we speak."""
    versions = versions if isinstance(versions, list) else []
    if not versions:
        return [empty or required(path, "must specify one of " + ", ".join(REVIEW_VERSIONS))]
    out: list[FieldError] = []
    seen: set[str] = set()
    for i, v in enumerate(versions):
        if v in seen:
            out.append(invalid(f"{path}[{i}]", v, "duplicate version"))
            continue
        seen.add(v)
        out += [invalid(f"{path}[{i}]", v, m) for m in names.dns1035_label(str(v))]
    if not seen & set(REVIEW_VERSIONS):
        listed = ", ".join(json.dumps(str(v)) for v in versions)
        out.append(
            FieldError(
                "FieldValueInvalid",
                path,
                f"Invalid value: []string{{{listed}}}: must include at least one of "
                + ", ".join(REVIEW_VERSIONS),
            )
        )
    return out


def match_conditions(path: str, conditions: Any) -> list[FieldError]:
    out: list[FieldError] = []
    seen: set[str] = set()
    for i, cond in enumerate(conditions or []):
        cond = cond if isinstance(cond, dict) else {}
        where = f"{path}[{i}]"
        name = cond.get("name") or ""
        if not name:
            out.append(required(f"{where}.name"))
        else:
            out += qualified_name(f"{where}.name", name)
            if name in seen:
                out.append(duplicate(f"{where}.name", name))
            seen.add(name)
        out += expression(f"{where}.expression", cond.get("expression"))
    return out


def expression(path: str, text: Any) -> list[FieldError]:
    if not text:
        return [required(path)]
    try:
        cel.compile_expression(text)
    except cel.CelError as err:
        return [
            invalid(
                path,
                text,
                f"compilation failed: {err}".replace(
                    "compilation failed: compilation failed: ", "compilation failed: "
                ),
            )
        ]
    return []


def fully_qualified(path: str, name: str) -> list[FieldError]:
    if not name:
        return [required(path)]
    out = dns_subdomain(path, name)
    if not out and len(name.split(".")) < 3:
        out.append(invalid(path, name, "should be a domain with at least three segments separated by dots"))
    return out


def webhook(path: str, hook: Any, mutating: bool) -> list[FieldError]:
    """validate(Mutating|Validating)Webhook, in upstream's order."""
    hook = hook if isinstance(hook, dict) else {}
    out = fully_qualified(f"{path}.name", hook.get("name") or "")
    for i, r in enumerate(hook.get("rules") or []):
        out += rule(f"{path}.rules[{i}]", r)
    for field, supported in (("failurePolicy", FAILURE_POLICIES), ("matchPolicy", MATCH_POLICIES)):
        if hook.get(field) is not None and hook[field] not in supported:
            out.append(not_supported(f"{path}.{field}", hook[field], supported))
    side = hook.get("sideEffects")
    if not side:
        out.append(required(f"{path}.sideEffects", "must specify one of " + ", ".join(SIDE_EFFECTS)))
    elif side not in SIDE_EFFECTS:
        out.append(not_supported(f"{path}.sideEffects", side, SIDE_EFFECTS))
    timeout = hook.get("timeoutSeconds")
    if timeout is not None and not (isinstance(timeout, int) and 1 <= timeout <= 30):
        out.append(
            invalid(f"{path}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 seconds")
        )
    for field in ("namespaceSelector", "objectSelector"):
        if hook.get(field) is not None:
            out += label_selector(hook[field], f"{path}.{field}")
    if mutating and hook.get("reinvocationPolicy") not in (None, *REINVOCATION_POLICIES):
        out.append(
            not_supported(f"{path}.reinvocationPolicy", hook["reinvocationPolicy"], REINVOCATION_POLICIES)
        )
    out += client_config(f"{path}.clientConfig", hook.get("clientConfig"))
    out += match_conditions(f"{path}.matchConditions", hook.get("matchConditions"))
    return out


def configuration(obj: Obj, mutating: bool) -> list[FieldError]:
    out: list[FieldError] = []
    seen: set[str] = set()
    for i, hook in enumerate(obj.get("webhooks") or []):
        out += webhook(f"webhooks[{i}]", hook, mutating)
        out += review_versions(
            f"webhooks[{i}].admissionReviewVersions",
            (hook or {}).get("admissionReviewVersions") if isinstance(hook, dict) else None,
        )
        name = (hook or {}).get("name") if isinstance(hook, dict) else None
        if name:
            if name in seen:
                out.append(duplicate(f"webhooks[{i}].name", name))
            seen.add(name)
    return out
