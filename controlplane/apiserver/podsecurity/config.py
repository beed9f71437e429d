"""PodSecurity's configuration: the PodSecurityConfiguration (pod-security.admission.config.k8s.io
v1, v1beta1 or v1alpha1) of the `PodSecurity` plugin in the AdmissionConfiguration file that
--admission-control-config-file names (inline under `configuration`, or in the file `path` names,
relative to the AdmissionConfiguration's directory). It gives the defaults for namespaces without labels
and the exemptions (usernames, runtime class names, namespaces); a bad value stops the start with the
field named, as upstream's validation words it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controlplane.apiserver import errors
from controlplane.apiserver.podsecurity.levels import (
    LATEST,
    LEVEL_ERROR,
    PRIVILEGED,
    VERSION_ERROR,
    LevelVersion,
    Policy,
    parse_level,
    parse_version,
)
from controlplane.apiserver.validation import dns_label, dns_subdomain

PLUGIN = "PodSecurity"
ADMISSION_GROUPS = (
    "apiserver.config.k8s.io/v1",
    "apiserver.config.k8s.io/v1alpha1",
    "apiserver.k8s.io/v1alpha1",
)
CONFIG_VERSIONS = (
    "pod-security.admission.config.k8s.io/v1",
    "pod-security.admission.config.k8s.io/v1beta1",
    "pod-security.admission.config.k8s.io/v1alpha1",
)


class ConfigError(ValueError):
    """The admission configuration cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class PodSecurityConfig:
    defaults: Policy = Policy(
        LevelVersion(PRIVILEGED, LATEST), LevelVersion(PRIVILEGED, LATEST), LevelVersion(PRIVILEGED, LATEST)
    )
    usernames: frozenset[str] = field(default_factory=frozenset)
    runtime_classes: frozenset[str] = field(default_factory=frozenset)
    namespaces: frozenset[str] = field(default_factory=frozenset)


def _read(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(f"{path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: {err}") from None


def _list(errs: list[errors.FieldError], path: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        errs.append(errors.invalid(path, value, "must be a list"))
        return []
    return value


def parse_pod_security(doc: Any) -> PodSecurityConfig:
    """The PodSecurityConfiguration object as a config; ConfigError with every bad field."""
    if not isinstance(doc, dict):
        raise ConfigError("PodSecurityConfiguration: must be an object")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if kind != "PodSecurityConfiguration" or api_version not in CONFIG_VERSIONS:
        raise ConfigError(
            f'no kind "{kind}" is registered for version "{api_version}" (want PodSecurityConfiguration in '
            f"{', '.join(CONFIG_VERSIONS)})"
        )
    errs: list[errors.FieldError] = []
    defaults = doc.get("defaults") or {}
    modes = []
    for mode in ("enforce", "audit", "warn"):
        level = str(defaults.get(mode) or PRIVILEGED)
        version = str(defaults.get(f"{mode}-version") or "latest")
        parsed_level, parsed_version = parse_level(level), parse_version(version)
        if parsed_level is None:
            errs.append(errors.invalid(f"defaults.{mode}", level, LEVEL_ERROR))
        if parsed_version is None:
            errs.append(errors.invalid(f"defaults.{mode}-version", version, VERSION_ERROR))
        modes.append(LevelVersion(parsed_level or PRIVILEGED, parsed_version or LATEST))
    exemptions = doc.get("exemptions") or {}
    found: dict[str, list[str]] = {}
    for name, check in (("namespaces", dns_label), ("runtimeClasses", dns_subdomain), ("usernames", None)):
        seen: list[str] = []
        for i, value in enumerate(_list(errs, f"exemptions.{name}", exemptions.get(name))):
            path = f"exemptions.{name}[{i}]"
            value = "" if value is None else str(value)
            if check is None and not value:
                errs.append(errors.invalid(path, value, "username must not be empty"))
            elif check is not None and (bad := check(path, value)):
                errs.extend(bad)
            elif value in seen:
                errs.append(errors.duplicate(path, value))
            else:
                seen.append(value)
        found[name] = seen
    if errs:
        raise ConfigError("; ".join(f"{e.field}: {e.detail}" for e in errs))
    return PodSecurityConfig(
        Policy(modes[0], modes[1], modes[2]),
        frozenset(found["usernames"]),
        frozenset(found["runtimeClasses"]),
        frozenset(found["namespaces"]),
    )


def load(path: Path) -> PodSecurityConfig:
    """The PodSecurity configuration of the AdmissionConfiguration file (defaults when it has none)."""
    doc = _read(path)
    if not isinstance(doc, dict) or doc.get("kind") != "AdmissionConfiguration":
        raise ConfigError(f"{path}: not an AdmissionConfiguration (kind: AdmissionConfiguration)")
    if doc.get("apiVersion") not in ADMISSION_GROUPS:
        raise ConfigError(
            f'{path}: apiVersion "{doc.get("apiVersion")}" is not one of {", ".join(ADMISSION_GROUPS)}'
        )
    for i, plugin in enumerate(doc.get("plugins") or ()):
        if not isinstance(plugin, dict) or plugin.get("name") != PLUGIN:
            continue
        if plugin.get("configuration") is not None:
            body = plugin["configuration"]
        elif plugin.get("path"):
            inner = Path(plugin["path"])
            body = _read(inner if inner.is_absolute() else path.parent / inner)
        else:
            raise ConfigError(f"{path}: plugins[{i}]: PodSecurity needs a configuration or a path")
        try:
            return parse_pod_security(body)
        except ConfigError as err:
            raise ConfigError(f"{path}: plugins[{i}] (PodSecurity): {err}") from None
    return PodSecurityConfig()
