"""Label and field selectors, parsed once per request into predicates over stored objects."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controlplane.apiserver.errors import bad_request

Obj = dict[str, Any]


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # = != in notin exists !exists gt lt
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        match self.op:
            case "exists":
                return present
            case "!exists":
                return not present
            case "=" | "in":
                return present and value in self.values
            case "!=" | "notin":
                return not present or value not in self.values
            case "gt" | "lt":
                try:
                    number = int(value or "")
                except ValueError:
                    return False
                bound = int(self.values[0])
                return number > bound if self.op == "gt" else number < bound
        return False


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(text: str) -> list[Requirement]:
    reqs: list[Requirement] = []
    for part in _split_top(text):
        words = part.split()
        if len(words) >= 2 and words[1] in ("in", "notin"):
            rest = part.split(None, 2)[2].strip() if len(words) > 2 else ""
            if not (rest.startswith("(") and rest.endswith(")")):
                raise bad_request(f"unable to parse requirement: found '{rest}', expected: '('")
            values = tuple(v.strip() for v in rest[1:-1].split(",") if v.strip())
            reqs.append(Requirement(words[0], words[1], values))
        elif part.startswith("!"):
            reqs.append(Requirement(part[1:].strip(), "!exists"))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            reqs.append(Requirement(key.strip(), "!=", (value.strip(),)))
        elif "==" in part:
            key, value = part.split("==", 1)
            reqs.append(Requirement(key.strip(), "=", (value.strip(),)))
        elif "=" in part:
            key, value = part.split("=", 1)
            reqs.append(Requirement(key.strip(), "=", (value.strip(),)))
        elif ">" in part or "<" in part:
            op = ">" if ">" in part else "<"
            key, value = part.split(op, 1)
            try:
                int(value.strip())
            except ValueError:
                raise bad_request(f"unable to parse requirement: {part}: values must be integers") from None
            reqs.append(Requirement(key.strip(), "gt" if op == ">" else "lt", (value.strip(),)))
        else:
            if not part.replace("-", "").replace(".", "").replace("/", "").replace("_", "").isalnum():
                raise bad_request(f"unable to parse requirement: invalid label key \"{part}\"")
            reqs.append(Requirement(part, "exists"))
    for req in reqs:
        if not req.key:
            raise bad_request(f"unable to parse requirement: empty key in \"{text}\"")
    return reqs


# Fields a field selector may name, per resource bucket, beyond metadata.name/metadata.namespace.
_FIELDS: dict[str, tuple[str, ...]] = {
    "pods": (
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
    ),
    "nodes": ("spec.unschedulable",),
    "namespaces": ("status.phase",),
    "secrets": ("type",),
    "replicasets.apps": ("status.replicas",),
    "events": (
        "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
        "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
        "reason", "reportingComponent", "source", "type",
    ),
}

# events.k8s.io/v1 names for the same stored fields.
EVENTS_V1_FIELDS = {
    "regarding.kind": "involvedObject.kind", "regarding.namespace": "involvedObject.namespace",
    "regarding.name": "involvedObject.name", "regarding.uid": "involvedObject.uid",
    "regarding.apiVersion": "involvedObject.apiVersion",
    "regarding.resourceVersion": "involvedObject.resourceVersion",
    "regarding.fieldPath": "involvedObject.fieldPath", "reportingController": "reportingComponent",
    "deprecatedSource": "source",
}


def field_value(obj: Obj, path: str) -> str:
    if path == "source":
        return str((obj.get("source") or {}).get("component", ""))
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, dict):
            return ""
        current = current.get(part)
    if current is None:
        return "false" if path in ("spec.hostNetwork", "spec.unschedulable") else ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def parse_field_selector(text: str, bucket: str, aliases: dict[str, str] | None = None) -> list[tuple[str, bool, str]]:
    """[(field, equal?, value)]; unknown fields are a 400 as upstream."""
    allowed = ("metadata.name", "metadata.namespace", *_FIELDS.get(bucket, ()))
    out: list[tuple[str, bool, str]] = []
    for part in _split_top(text):
        if "!=" in part:
            name, value = part.split("!=", 1)
            equal = False
        elif "==" in part:
            name, value = part.split("==", 1)
            equal = True
        elif "=" in part:
            name, value = part.split("=", 1)
            equal = True
        else:
            raise bad_request(f'invalid selector: \'{text}\'; can\'t understand \'{part}\'')
        name = name.strip()
        name = (aliases or {}).get(name, name)
        if name not in allowed:
            raise bad_request(f'field label not supported: {name}')
        out.append((name, equal, value.strip()))
    return out


def make_predicate(
    labels: list[Requirement], fields: list[tuple[str, bool, str]]
) -> Callable[[Obj], bool] | None:
    if not labels and not fields:
        return None

    def predicate(obj: Obj) -> bool:
        if labels:
            obj_labels = (obj.get("metadata") or {}).get("labels") or {}
            if not all(r.matches(obj_labels) for r in labels):
                return False
        for name, equal, value in fields:
            if (field_value(obj, name) == value) != equal:
                return False
        return True

    return predicate


def single_name(fields: list[tuple[str, bool, str]]) -> str | None:
    """The name a `metadata.name=X` selector pins, so a watch can look at one key only."""
    for name, equal, value in fields:
        if name == "metadata.name" and equal:
            return value
    return None


# Paths a selector or the registry reads from cached objects; the watch cache keeps only these decoded.
_VIEW_PATHS = sorted(
    {p for paths in _FIELDS.values() for p in paths}
    | {"metadata.name", "metadata.namespace", "metadata.labels", "metadata.deletionTimestamp", "source.component"}
)


def slim_view(obj: Obj) -> Obj:
    """The part of an object selectors need, so the cache need not keep every object decoded."""
    view: Obj = {}
    for path in _VIEW_PATHS:
        current: Any = obj
        parts = path.split(".")
        for part in parts:
            if not isinstance(current, dict) or part not in current:
                current = None
                break
            current = current[part]
        if current is None:
            continue
        node = view
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = current
    return view
