"""Regenerate fields.json (the type table the decoder walks: every field of every served type, and the
fields Go always serializes) and fielddocs.json (field descriptions, for OpenAPI and `kubectl explain`).

Run `python -m controlplane.apiserver.gen_fields` after adding a kind or upgrading the `kubernetes`
client. The roots are the served kinds' schema types (`Kind.schema`, their subresources' bodies) and the
request bodies every kind shares (DeleteOptions). The facts come from the client's generated models
(themselves generated from upstream's OpenAPI), loaded only here so the server never pays their import
time, plus what those models leave out, written into the table here:
- the kinds' `type_marks`: which strings are resource.Quantity, which objects are int-or-string,
  which times are MicroTime;
- int widths: the models say `int` for int32 and int64 alike; upstream's int64 fields are the few
  named in INT64_FIELDS (every other integer of the core API is an int32).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

# The shared request bodies, beside the kinds' own.
EXTRA_ROOTS = ("V1DeleteOptions",)
# Integer fields that are int64 upstream (metadata.generation, grace periods, user and group ids,
# tolerationSeconds, observedGeneration, ControllerRevision.revision, image sizes, sleep seconds,
# CronJob.startingDeadlineSeconds).
INT64_FIELDS = {
    "generation",
    "deletionGracePeriodSeconds",
    "terminationGracePeriodSeconds",
    "activeDeadlineSeconds",
    "runAsUser",
    "runAsGroup",
    "fsGroup",
    "supplementalGroups",
    "tolerationSeconds",
    "expirationSeconds",
    "observedGeneration",
    "revision",
    "sizeBytes",
    "seconds",
    "uid",
    "gid",
    "startingDeadlineSeconds",
}
_SCALARS = {
    "str": "string",
    "bool": "bool",
    "float": "float64",
    "datetime": "time",
    "date": "string",
    "object": "any",
    "bytes": "bytes",
    "bytearray": "bytes",
}
# Required in the OpenAPI but a pointer in Go: a missing value stays missing (nil) for validation to name
# (`pathType: Required value`), never becomes the zero value.
POINTER_REQUIRED = {("V1HTTPIngressPath", "pathType")}
_LIST = re.compile(r"^(?:List|list)\[(.+)\]$")
_MAP = re.compile(r"^(?:Dict|dict)\[str, ?(.+)\]$|^dict\(str, ?(.+)\)$")


def _ref(python_type: str, field: str) -> str:
    """The client's type name as our table writes it: []X, map[X], a scalar or a model name."""
    m = _LIST.match(python_type)
    if m:
        return "[]" + _ref(m.group(1), field)
    m = _MAP.match(python_type)
    if m:
        return "map[" + _ref(m.group(1) or m.group(2), field) + "]"
    if python_type == "int":
        return "int64" if field in INT64_FIELDS else "int32"
    return _SCALARS.get(python_type, python_type)


def _model_names(ref: str) -> list[str]:
    return re.findall(r"[A-Z][A-Za-z0-9]+", ref)


def generate() -> tuple[dict[str, Any], dict[str, dict[str, str]], list[str]]:
    from kubernetes.client import models

    from controlplane.apiserver.kindparts import builtin_table

    marks: dict[tuple[str, str], str] = {}
    roots: list[str] = []
    for kind in builtin_table():
        marks.update(kind.type_marks)
        roots += [kind.schema] + [s.schema for s in kind.subresources if s.schema]
    roots += EXTRA_ROOTS
    types: dict[str, dict[str, str]] = {}
    required: dict[str, list[str]] = {}
    docs: dict[str, dict[str, str]] = {}
    loose: list[str] = []

    def visit(name: str) -> None:
        if name in types or not hasattr(models, name):
            return
        cls = getattr(models, name)
        fields: dict[str, str] = {}
        for attr, python_type in cls.openapi_types.items():
            field = cls.attribute_map[attr]
            ref = marks.get((name, field)) or _ref(python_type, field)
            if ref == "any" and (name, field) not in marks:
                loose.append(f"{name}.{field}")
            fields[field] = ref
        types[name] = fields
        type_doc = (cls.__doc__ or "").strip().split("\n\n")[0].strip()
        model_fields = getattr(cls, "model_fields", {})
        field_docs = {
            cls.attribute_map[k]: f.description
            for k, f in model_fields.items()
            if k in cls.attribute_map and f.description
        }
        docs[name] = {"": " ".join(type_doc.split()), **field_docs}
        needed = sorted(
            cls.attribute_map[k]
            for k, f in model_fields.items()
            if f.is_required()
            and k in cls.attribute_map
            and (name, cls.attribute_map[k]) not in POINTER_REQUIRED
        )
        if needed:
            required[name] = needed
        for ref in fields.values():
            for inner in _model_names(ref):
                visit(inner)

    for root in dict.fromkeys(roots):
        visit(root)
    return {"roots": sorted(set(roots)), "types": types, "required": required}, docs, loose


def main() -> None:
    table, docs, loose = generate()
    path = Path(__file__).with_name("fields.json")
    path.write_text(json.dumps(table, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({len(table['types'])} types)")
    docs_path = Path(__file__).with_name("fielddocs.json")
    docs_path.write_text(json.dumps(docs, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {docs_path}")
    if loose:
        # Free-form upstream (RawExtension, FieldsV1), or a quantity / int-or-string a kind has not marked.
        print("fields of no declared type (any JSON is accepted):", ", ".join(sorted(loose)))


if __name__ == "__main__":
    main()
