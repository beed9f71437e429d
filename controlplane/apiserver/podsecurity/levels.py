"""The Pod Security Standards' levels and versions, and a namespace's policy read from its labels.

A namespace names a level and a version for each of the three modes with the
`pod-security.kubernetes.io/{enforce,audit,warn}` labels and their `-version` companions; a label left
out takes the configured default (privileged:latest unless the AdmissionConfiguration says otherwise).
A label that does not parse is an error; the policy still comes back usable, as upstream's: an unknown
enforce level enforces restricted, an unknown audit or warn level turns that mode off.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from controlplane.apiserver import errors

PRIVILEGED = "privileged"
BASELINE = "baseline"
RESTRICTED = "restricted"
LEVELS = (PRIVILEGED, BASELINE, RESTRICTED)

LABEL_PREFIX = "pod-security.kubernetes.io/"
MODES = ("enforce", "audit", "warn")

_VERSION = re.compile(r"^v1\.([0-9]|[1-9][0-9]*)$")
LEVEL_ERROR = "must be one of " + ", ".join(LEVELS)
VERSION_ERROR = 'must be "latest" or "v1.x"'


@dataclass(frozen=True, slots=True)
class Version:
    """v1.minor, or latest (minor None): newer than any numbered version."""

    minor: int | None = None

    @property
    def latest(self) -> bool:
        return self.minor is None

    def __str__(self) -> str:
        return "latest" if self.minor is None else f"v1.{self.minor}"


LATEST = Version()


@dataclass(frozen=True, slots=True)
class LevelVersion:
    level: str
    version: Version

    def __str__(self) -> str:
        return f"{self.level}:{self.version}"


@dataclass(frozen=True, slots=True)
class Policy:
    enforce: LevelVersion
    audit: LevelVersion
    warn: LevelVersion

    def fully_privileged(self) -> bool:
        return PRIVILEGED == self.enforce.level == self.audit.level == self.warn.level


PRIVILEGED_LATEST = LevelVersion(PRIVILEGED, LATEST)
DEFAULT_POLICY = Policy(PRIVILEGED_LATEST, PRIVILEGED_LATEST, PRIVILEGED_LATEST)


def parse_level(value: str) -> str | None:
    return value if value in LEVELS else None


def parse_version(value: str) -> Version | None:
    if value == "latest":
        return LATEST
    match = _VERSION.match(value)
    return Version(int(match.group(1))) if match else None


def compare_levels(a: str, b: str) -> int:
    """-1, 0 or 1 as a is less strict than, as strict as, or stricter than b."""
    return (LEVELS.index(a) > LEVELS.index(b)) - (LEVELS.index(a) < LEVELS.index(b))


def _mode(
    labels: Mapping[str, str], mode: str, default: LevelVersion, errs: list[errors.FieldError]
) -> LevelVersion:
    level, version = default.level, default.version
    key = LABEL_PREFIX + mode
    if key in labels:
        parsed = parse_level(labels[key])
        if parsed is None:
            errs.append(errors.invalid(f"metadata.labels[{key}]", labels[key], LEVEL_ERROR))
            # An enforce level that cannot be read enforces the strictest; audit and warn fail open.
            parsed = RESTRICTED if mode == "enforce" else PRIVILEGED
        level = parsed
    vkey = key + "-version"
    if vkey in labels:
        parsed_version = parse_version(labels[vkey])
        if parsed_version is None:
            errs.append(errors.invalid(f"metadata.labels[{vkey}]", labels[vkey], VERSION_ERROR))
            parsed_version = LATEST
        version = parsed_version
    return LevelVersion(level, version)


def policy_from_labels(
    labels: Mapping[str, str] | None, defaults: Policy = DEFAULT_POLICY
) -> tuple[Policy, list[errors.FieldError]]:
    """The namespace's policy and the errors of its labels (in enforce, audit, warn order)."""
    if not labels:
        return defaults, []
    errs: list[errors.FieldError] = []
    policy = Policy(
        _mode(labels, "enforce", defaults.enforce, errs),
        _mode(labels, "audit", defaults.audit, errs),
        _mode(labels, "warn", defaults.warn, errs),
    )
    return policy, errs
