"""--authentication-config: upstream's structured AuthenticationConfiguration
(apiserver.config.k8s.io/v1beta1, v1alpha1 and v1): JWT authenticators, each an issuer (url, optional
discoveryURL, certificateAuthority, audiences, audienceMatchPolicy), claim validation rules (a claim's
required value, or a CEL expression over `claims`), claim mappings (username, groups, uid by claim and
prefix or by CEL expression; extra by CEL) and user validation rules (CEL over `user`). A bad file stops
the start with the field named, in upstream's words; every expression is compiled then."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from controlplane.apiserver import cel, errors

KIND = "AuthenticationConfiguration"
API_VERSIONS = (
    "apiserver.config.k8s.io/v1",
    "apiserver.config.k8s.io/v1beta1",
    "apiserver.config.k8s.io/v1alpha1",
)


class AuthenticationConfigError(ValueError):
    """The file cannot be used; the message names the field."""


@dataclass(frozen=True)
class Mapping:
    """A claim (with its prefix) or a CEL expression giving a value."""

    claim: str = ""
    prefix: str | None = None
    expression: str = ""


@dataclass(frozen=True)
class Rule:
    claim: str = ""
    required_value: str = ""
    expression: str = ""
    message: str = ""


@dataclass(frozen=True)
class JwtConfig:
    url: str
    discovery_url: str
    ca_pem: str
    audiences: tuple[str, ...]
    username: Mapping
    groups: Mapping | None = None
    uid: Mapping | None = None
    extra: tuple[tuple[str, str], ...] = ()  # (key, valueExpression)
    claim_rules: tuple[Rule, ...] = ()
    user_rules: tuple[Rule, ...] = ()


@dataclass
class AuthenticationConfig:
    jwt: list[JwtConfig] = field(default_factory=list)


def _compiles(path: str, expression: str, errs: list[errors.FieldError]) -> None:
    try:
        cel.compile_expression(expression)
    except cel.CelError as err:
        errs.append(errors.invalid(path, expression, f"compilation failed: {err}"))


def _mapping(path: str, doc: Any, errs: list[errors.FieldError], *, prefix_required: bool) -> Mapping | None:
    if not isinstance(doc, dict) or not doc:
        return None
    claim, expression = str(doc.get("claim") or ""), str(doc.get("expression") or "")
    if claim and expression:
        errs.append(errors.invalid(path, "", "claim and expression can't both be set"))
    if claim and prefix_required and doc.get("prefix") is None:
        errs.append(
            errors.required(
                f"{path}.prefix",
                "prefix is required when claim is set. It can be set to an empty string to disable prefixing",
            )
        )
    if expression:
        if doc.get("prefix"):
            errs.append(
                errors.invalid(f"{path}.prefix", doc["prefix"], "may not be specified when expression is set")
            )
        _compiles(f"{path}.expression", expression, errs)
    if not claim and not expression:
        return None
    return Mapping(claim, None if doc.get("prefix") is None else str(doc["prefix"]), expression)


def _jwt(path: str, doc: Any, errs: list[errors.FieldError], seen: set[str]) -> JwtConfig | None:
    doc = doc if isinstance(doc, dict) else {}
    issuer = doc.get("issuer") if isinstance(doc.get("issuer"), dict) else {}
    url = str(issuer.get("url") or "")
    if not url:
        errs.append(errors.required(f"{path}.issuer.url", ""))
    else:
        parsed = urlparse(url)
        if parsed.scheme != "https":
            errs.append(errors.invalid(f"{path}.issuer.url", url, "URL scheme must be https"))
        elif parsed.query or parsed.fragment or parsed.username:
            errs.append(
                errors.invalid(f"{path}.issuer.url", url, "URL must not contain a query, fragment or user")
            )
        if url in seen:
            errs.append(errors.duplicate(f"{path}.issuer.url", url))
        seen.add(url)
    discovery = str(issuer.get("discoveryURL") or "")
    if discovery and urlparse(discovery).scheme != "https":
        errs.append(errors.invalid(f"{path}.issuer.discoveryURL", discovery, "URL scheme must be https"))
    audiences = issuer.get("audiences") or []
    if not isinstance(audiences, list) or not audiences:
        errs.append(
            errors.required(f"{path}.issuer.audiences", f"at least one {path}.issuer.audiences is required")
        )
        audiences = []
    policy = issuer.get("audienceMatchPolicy") or ""
    if len(audiences) > 1 and policy != "MatchAny":
        errs.append(
            errors.invalid(
                f"{path}.issuer.audienceMatchPolicy",
                policy,
                "audienceMatchPolicy must be MatchAny for multiple audiences",
            )
        )
    mappings = doc.get("claimMappings") if isinstance(doc.get("claimMappings"), dict) else {}
    username = _mapping(
        f"{path}.claimMappings.username", mappings.get("username"), errs, prefix_required=True
    )
    if username is None:
        errs.append(errors.required(f"{path}.claimMappings.username", "claim or expression is required"))
    groups = _mapping(f"{path}.claimMappings.groups", mappings.get("groups"), errs, prefix_required=True)
    uid = _mapping(f"{path}.claimMappings.uid", mappings.get("uid"), errs, prefix_required=False)
    extra = []
    for i, item in enumerate(mappings.get("extra") or []):
        item = item if isinstance(item, dict) else {}
        key, expression = str(item.get("key") or ""), str(item.get("valueExpression") or "")
        if not key:
            errs.append(errors.required(f"{path}.claimMappings.extra[{i}].key", ""))
        if not expression:
            errs.append(errors.required(f"{path}.claimMappings.extra[{i}].valueExpression", ""))
        else:
            _compiles(f"{path}.claimMappings.extra[{i}].valueExpression", expression, errs)
        extra.append((key, expression))
    claim_rules = []
    for i, item in enumerate(doc.get("claimValidationRules") or []):
        item = item if isinstance(item, dict) else {}
        rule = Rule(
            str(item.get("claim") or ""),
            str(item.get("requiredValue") or ""),
            str(item.get("expression") or ""),
            str(item.get("message") or ""),
        )
        if rule.expression:
            _compiles(f"{path}.claimValidationRules[{i}].expression", rule.expression, errs)
        elif not rule.claim:
            errs.append(
                errors.required(f"{path}.claimValidationRules[{i}]", "claim or expression is required")
            )
        claim_rules.append(rule)
    user_rules = []
    for i, item in enumerate(doc.get("userValidationRules") or []):
        item = item if isinstance(item, dict) else {}
        rule = Rule(expression=str(item.get("expression") or ""), message=str(item.get("message") or ""))
        if not rule.expression:
            errs.append(
                errors.required(f"{path}.userValidationRules[{i}].expression", "expression is required")
            )
        else:
            _compiles(f"{path}.userValidationRules[{i}].expression", rule.expression, errs)
        user_rules.append(rule)
    if username is None or not url:
        return None
    return JwtConfig(
        url,
        discovery,
        str(issuer.get("certificateAuthority") or ""),
        tuple(str(a) for a in audiences),
        username,
        groups,
        uid,
        tuple(extra),
        tuple(claim_rules),
        tuple(user_rules),
    )


def parse(doc: Any) -> AuthenticationConfig:
    if not isinstance(doc, dict) or doc.get("kind") != KIND or doc.get("apiVersion") not in API_VERSIONS:
        got = (doc.get("apiVersion"), doc.get("kind")) if isinstance(doc, dict) else (None, None)
        raise AuthenticationConfigError(
            f'no kind "{got[1]}" is registered for version "{got[0]}" (want {KIND} in {", ".join(API_VERSIONS)})'
        )
    errs: list[errors.FieldError] = []
    seen: set[str] = set()
    out = AuthenticationConfig()
    for i, item in enumerate(doc.get("jwt") or []):
        found = _jwt(f"jwt[{i}]", item, errs, seen)
        if found is not None:
            out.jwt.append(found)
    if errs:
        raise AuthenticationConfigError("; ".join(f"{e.field}: {e.detail}" for e in errs))
    return out


def load(path: Path) -> AuthenticationConfig:
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as err:
        raise AuthenticationConfigError(f"{path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise AuthenticationConfigError(f"{path}: {err}") from None
    try:
        return parse(doc)
    except AuthenticationConfigError as err:
        raise AuthenticationConfigError(f"{path}: {err}") from None
