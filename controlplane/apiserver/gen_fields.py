"""Regenerate fields.json: the known JSON fields of every served type (for fieldValidation) and the
fields upstream always serializes (so responses carry their zero values as Go would).

Run `python -m controlplane.apiserver.gen_fields` after upgrading the `kubernetes` client. The facts come
from that client's generated models (themselves generated from upstream's OpenAPI), loaded only here so
the server never pays their import time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOTS = {
    "Pod": "V1Pod", "Node": "V1Node", "Namespace": "V1Namespace", "Event": "CoreV1Event",
    "events.k8s.io/Event": "EventsV1Event", "ConfigMap": "V1ConfigMap", "Secret": "V1Secret",
    "ServiceAccount": "V1ServiceAccount", "Service": "V1Service", "Endpoints": "V1Endpoints",
    "Lease": "V1Lease", "Deployment": "V1Deployment", "ReplicaSet": "V1ReplicaSet", "Binding": "V1Binding",
    "Scale": "V1Scale",
}
_INNER = re.compile(r"^(?:List|list)\[(.+)\]$|^(?:Dict|dict)\[str, ?(.+)\]$|^dict\(str, ?(.+)\)$")


def main() -> None:
    from kubernetes.client import models

    types: dict[str, dict[str, str]] = {}
    # Fields upstream always serializes (no omitempty); Go fills them with zero values.
    required: dict[str, list[str]] = {}
    # Descriptions for the OpenAPI documents (kubectl explain), kept apart from the hot-path file.
    docs: dict[str, dict[str, str]] = {}

    def visit(name: str) -> None:
        if name in types or not hasattr(models, name):
            return
        cls = getattr(models, name)
        fields = {cls.attribute_map[k]: v for k, v in cls.openapi_types.items()}
        types[name] = fields
        type_doc = (cls.__doc__ or "").strip().split("\n\n")[0].strip()
        field_docs = {
            cls.attribute_map[k]: f.description
            for k, f in getattr(cls, "model_fields", {}).items()
            if k in cls.attribute_map and f.description
        }
        docs[name] = {"": " ".join(type_doc.split()), **field_docs}
        model_fields = getattr(cls, "model_fields", {})
        needed = sorted(cls.attribute_map[k] for k, f in model_fields.items() if f.is_required() and k in cls.attribute_map)
        if needed:
            required[name] = needed
        for ref in fields.values():
            while True:
                m = _INNER.match(ref)
                if not m:
                    break
                ref = next(g for g in m.groups() if g)
            visit(ref)

    for root in ROOTS.values():
        visit(root)
    out = {"roots": ROOTS, "types": types, "required": required}
    path = Path(__file__).with_name("fields.json")
    path.write_text(json.dumps(out, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({len(types)} types)")
    docs_path = Path(__file__).with_name("fielddocs.json")
    docs_path.write_text(json.dumps(docs, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {docs_path}")


if __name__ == "__main__":
    main()
