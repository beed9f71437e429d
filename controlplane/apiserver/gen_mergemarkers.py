"""Regenerate mergemarkers.json: upstream's merge markers of every built-in type, the facts server-side
apply and strategic merge patch key lists and maps by (`smp_schema.py` reads the table).

Dev-time only; run after a Kubernetes upgrade:
    pip download --no-deps kubernetes-validate==1.37.0 -d /tmp/kv && unzip -o -d /tmp/kv /tmp/kv/*.whl
    python -m controlplane.apiserver.gen_mergemarkers \\
        /tmp/kv/kubernetes_validate/kubernetes-json-schema/v1.32.0-local/_definitions.json
The input is upstream's OpenAPI definitions of Kubernetes 1.32 (api/openapi-spec, as the PyPI package
kubernetes-validate ships them converted to JSON schema); it is 22 MB installed, so it is never a
dependency of the project. Per type the table keeps, for each field that carries one:
- `list`: x-kubernetes-list-type (atomic, set, map), `keys`: x-kubernetes-list-map-keys;
- `strategy` and `mergeKey`: x-kubernetes-patch-strategy and x-kubernetes-patch-merge-key (strategic
  merge patch's struct tags);
- `map`: x-kubernetes-map-type of the field (atomic or granular; it overrides the type's own);
- `ref`, `items`, `values`: the field's type, its list items' type, its map values' type, when that type
  has markers of its own (so a schema can be walked from a kind's root type);
- `defaults`: the defaults of list-map keys (upstream's `+default` markers: the converted definitions
  drop `default`, so they are named here, in KEY_DEFAULTS).
A type marked x-kubernetes-map-type atomic is `{"atomic": true}`. `kinds` maps each group/version/kind
to its root type.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# List-map keys with a default in upstream's types.go (`// +default="TCP"`): structured-merge-diff keys
# an item that leaves the field out by the default.
KEY_DEFAULTS: dict[tuple[str, str], Any] = {
    ("io.k8s.api.core.v1.ContainerPort", "protocol"): "TCP",
    ("io.k8s.api.core.v1.ServicePort", "protocol"): "TCP",
}
_MARKERS = {
    "x-kubernetes-list-type": "list",
    "x-kubernetes-list-map-keys": "keys",
    "x-kubernetes-map-type": "map",
    "x-kubernetes-patch-strategy": "strategy",
    "x-kubernetes-patch-merge-key": "mergeKey",
}
OUTPUT = Path(__file__).with_name("mergemarkers.json")


def _ref_name(node: Any) -> str | None:
    ref = node.get("$ref") if isinstance(node, dict) else None
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _field(prop: dict[str, Any]) -> dict[str, Any]:
    """A property's own markers and the types it leads to (pruned later)."""
    entry: dict[str, Any] = {short: prop[name] for name, short in _MARKERS.items() if name in prop}
    for slot, node in (
        ("ref", prop),
        ("items", prop.get("items")),
        ("values", prop.get("additionalProperties")),
    ):
        name = _ref_name(node)
        if name:
            entry[slot] = name
    return entry


def generate(definitions: dict[str, Any]) -> dict[str, Any]:
    raw: dict[str, dict[str, Any]] = {}
    for name, definition in definitions.items():
        if definition.get("x-kubernetes-map-type") == "atomic":
            raw[name] = {"atomic": True}
            continue
        fields = {
            f: _field(p) for f, p in (definition.get("properties") or {}).items() if isinstance(p, dict)
        }
        for entry in fields.values():
            item = definitions.get(entry.get("items", ""), {})
            defaults = {
                key: KEY_DEFAULTS[(entry["items"], key)]
                for key in entry.get("keys", ())
                if (entry.get("items"), key) in KEY_DEFAULTS and key in (item.get("properties") or {})
            }
            if defaults:
                entry["defaults"] = defaults
        raw[name] = {"fields": fields}
    # Keep a type when it is atomic or one of its fields has a marker or leads to a kept type.
    kept = {name for name, t in raw.items() if t.get("atomic")} | {
        name
        for name, t in raw.items()
        if any(set(e) - {"ref", "items", "values"} for e in t.get("fields", {}).values())
    }
    while True:
        more = {
            name
            for name, t in raw.items()
            if name not in kept
            and any(
                e.get(s) in kept for e in t.get("fields", {}).values() for s in ("ref", "items", "values")
            )
        }
        if not more:
            break
        kept |= more
    types: dict[str, Any] = {}
    for name in sorted(kept):
        t = raw[name]
        if t.get("atomic"):
            types[name] = t
            continue
        fields = {}
        for field, entry in t["fields"].items():
            entry = {k: v for k, v in entry.items() if k not in ("ref", "items", "values") or v in kept}
            if entry:
                fields[field] = entry
        types[name] = {"fields": fields}
    kinds = {
        f"{gvk['group']}/{gvk['version']}/{gvk['kind']}": name
        for name, definition in sorted(definitions.items())
        for gvk in definition.get("x-kubernetes-group-version-kind") or ()
        if name in kept
    }
    return {"kinds": kinds, "types": types}


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit(__doc__)
    document = json.loads(Path(argv[0]).read_text())
    definitions = document.get("$defs") or document.get("definitions") or {}
    table = generate(definitions)
    OUTPUT.write_text(json.dumps(table, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {OUTPUT} ({len(table['types'])} types, {len(table['kinds'])} kinds)")


if __name__ == "__main__":
    main(sys.argv[1:])
