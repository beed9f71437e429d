"""Upstream's name rules (k8s.io/apimachinery/pkg/util/validation) with upstream's messages.

Label keys and values, DNS-1123 labels and subdomains, DNS-1035 labels: the API server validates objects with them, the
selector parser validates keys and values with them, and users match on the texts, so they live once.
Each check returns a list of messages (empty: valid), as upstream's `IsQualifiedName` and friends do.
"""

from __future__ import annotations

import re

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1035_LABEL_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _too_long(limit: int) -> str:
    return f"must be no more than {limit} characters"


def dns1123_label(value: str) -> list[str]:
    errors = []
    if len(value) > DNS1123_LABEL_MAX:
        errors.append(_too_long(DNS1123_LABEL_MAX))
    if not _DNS1123_LABEL.fullmatch(value):
        errors.append(DNS1123_LABEL_MSG)
    return errors


def dns1035_label(value: str) -> list[str]:
    """IsDNS1035Label: a DNS-1123 label that starts with a letter (Service names, CRD plurals)."""
    errors = []
    if len(value) > DNS1123_LABEL_MAX:
        errors.append(_too_long(DNS1123_LABEL_MAX))
    if not _DNS1035_LABEL.fullmatch(value):
        errors.append(DNS1035_LABEL_MSG)
    return errors


def dns1123_subdomain(value: str) -> list[str]:
    errors = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errors.append(_too_long(DNS1123_SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errors.append(DNS1123_SUBDOMAIN_MSG)
    return errors


def qualified_name(value: str) -> list[str]:
    """A label key, annotation key or finalizer: an optional DNS subdomain prefix and '/', then a name."""
    parts = value.split("/")
    if len(parts) == 1:
        prefix, name = "", parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix "
            "and '/' (e.g. 'example.com/MyName')"
        ]
    errors = ["prefix part " + e for e in dns1123_subdomain(prefix)] if prefix else []
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errors.append("name part " + _too_long(QUALIFIED_NAME_MAX))
    if name and not _QUALIFIED_NAME.fullmatch(name):
        errors.append(QUALIFIED_NAME_MSG)
    return errors


def label_value(value: str) -> list[str]:
    errors = []
    if len(value) > LABEL_VALUE_MAX:
        errors.append(_too_long(LABEL_VALUE_MAX))
    if not _LABEL_VALUE.fullmatch(value):
        errors.append(LABEL_VALUE_MSG)
    return errors


_CONFIG_MAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
CONFIG_MAP_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
    "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)


def config_map_key(value: str) -> list[str]:
    """A key of a ConfigMap's or Secret's data (IsConfigMapKey): it becomes a file name in volumes."""
    errors = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errors.append(_too_long(DNS1123_SUBDOMAIN_MAX))
    if not _CONFIG_MAP_KEY.fullmatch(value):
        errors.append(CONFIG_MAP_KEY_MSG)
    if value == ".":
        errors.append("must not be '.'")
    elif value == "..":
        errors.append("must not be '..'")
    elif value.startswith(".."):
        errors.append("must not start with '..'")
    return errors


_WILDCARD_SUBDOMAIN = re.compile(r"\*\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
WILDCARD_SUBDOMAIN_MSG = (
    "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must "
    "consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. "
    "'*.example.com', regex used for validation is "
    "'\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def wildcard_dns1123_subdomain(value: str) -> list[str]:
    """IsWildcardDNS1123Subdomain: `*.` then a DNS subdomain (Ingress hosts)."""
    errors = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errors.append(_too_long(DNS1123_SUBDOMAIN_MAX))
    if not _WILDCARD_SUBDOMAIN.fullmatch(value):
        errors.append(WILDCARD_SUBDOMAIN_MSG)
    return errors


_PORT_NAME_CHARS = re.compile(r"[-a-z0-9]+")
_HTTP_PATH = re.compile(r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+")
HTTP_PATH_MSG = "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')"
DOMAIN_PREFIXED_PATH_MSG = 'must be a domain-prefixed path (such as "acme.io/foo")'


def port_name(value: str) -> list[str]:
    """IsValidPortName: an IANA service name (at most 15 characters, a letter, no double hyphen)."""
    errors = []
    if len(value) > 15:
        errors.append(_too_long(15))
    if not _PORT_NAME_CHARS.fullmatch(value):
        errors.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not re.search(r"[a-z]", value):
        errors.append("must contain at least one letter (a-z)")
    if "--" in value:
        errors.append("must not contain consecutive hyphens")
    if value.startswith("-") or value.endswith("-"):
        errors.append("must not begin or end with a hyphen")
    return errors


def domain_prefixed_path(value: str) -> list[tuple[str, str]]:
    """IsDomainPrefixedPath (an IngressClass's controller, `example.com/name`): (the part at fault,
    message) pairs, since upstream names the host or the path, not the whole value."""
    host, sep, path = value.partition("/")
    if not sep or not host or not path:
        return [(value, DOMAIN_PREFIXED_PATH_MSG)]
    errors = [(host, msg) for msg in dns1123_subdomain(host)]
    if not _HTTP_PATH.fullmatch(path):
        errors.append((path, HTTP_PATH_MSG))
    return errors
