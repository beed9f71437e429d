"""Derive the k8s.io/api message table from upstream's serialization fixtures (a development tool).

Upstream's fixtures (`shared/k8s-api-testdata/<version>/`) hold every kind twice, as JSON and as
protobuf, with every field set (strings "<field>Value", integers the field's position, bools true).
Pairing the two walks gives each message's field numbers, wire types and JSON names. Fields the pairing
cannot tell apart (alike values: a message's bools, all true; two probes or two selectors of one shape)
are paired in JSON order, which is the field-number order except where upstream added a field above
older ones: `SETTLED` gives upstream's numbers there (PodSpec, PodStatus; read from generated.proto). The result is written as .proto text under protos/k8s/ and as
the Python table `tables.py` (`python -m controlplane.apiserver.protobuf.derive FIXTURES_DIR`, then
`ruff format` the table; the output is the same on every run);
the apimachinery messages it names (Time, Quantity, IntOrString, RawExtension, the envelope) are written
by hand in protos/k8s/apimachinery.proto and handled by the codec itself.

Why derived: the fixtures are upstream's own data with every field set, the pairing is mechanical, and
the round-trip test of the same fixtures then proves the table byte for byte. Message names are the
JSON paths' (upstream's type names where `UPSTREAM_NAMES` gives them); a name is only a label.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.apiserver.protobuf import wire

APIMACHINERY = {
    "Time": "k8s.io.apimachinery.pkg.apis.meta.v1.Time",
    "MicroTime": "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime",
    "Duration": "k8s.io.apimachinery.pkg.apis.meta.v1.Duration",
    "FieldsV1": "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "Quantity": "k8s.io.apimachinery.pkg.api.resource.Quantity",
    "IntOrString": "k8s.io.apimachinery.pkg.util.intstr.IntOrString",
    "RawExtension": "k8s.io.apimachinery.pkg.runtime.RawExtension",
}
# Bool fields of one message are all `true` in the fixtures: their numbers come from upstream's
# generated.proto. {message JSON path suffix or message name: {json name: number}}.
SETTLED: list[dict[str, int]] = [
    {  # core/v1 PodSpec
        "containers": 2,
        "hostNetwork": 11,
        "hostPID": 12,
        "hostIPC": 13,
        "imagePullSecrets": 15,
        "initContainers": 20,
        "automountServiceAccountToken": 21,
        "shareProcessNamespace": 27,
        "enableServiceLinks": 30,
        "setHostnameAsFQDN": 35,
        "os": 36,
        "hostUsers": 37,
        "schedulingGates": 38,
    },
    {  # core/v1 PodStatus
        "containerStatuses": 8,
        "initContainerStatuses": 10,
        "podIPs": 12,
        "ephemeralContainerStatuses": 13,
        "hostIPs": 16,
    },
]


class Unmatched(Exception):
    pass


@dataclass
class Field:
    number: int
    name: str
    type: str  # scalar, special name, or a message key
    label: str = "optional"  # optional | repeated | map
    map_value: str = ""
    packed: bool = False
    json_list: bool = False  # a named slice type: a wrapper message on the wire, a list in JSON
    inline: bool = False  # an embedded struct: a message on the wire, its fields inline in JSON


@dataclass
class Message:
    name: str
    fields: dict[int, Field] = field(default_factory=dict)
    ambiguous: list[str] = field(default_factory=list)
    list_wrapper: bool = False

    def signature(self) -> tuple[Any, ...]:
        return tuple(sorted((f.number, f.name, f.type, f.label, f.map_value) for f in self.fields.values()))


MESSAGES: dict[str, Message] = {}
FAILURES: list[str] = []


def _time_seconds(text: str) -> tuple[int, int] | None:
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(when.timestamp()), when.microsecond * 1000


def _sub(value: bytes) -> dict[int, list[Any]] | None:
    try:
        parsed = wire.fields(value)
    except wire.WireError:
        return None
    out: dict[int, list[Any]] = {}
    for number, w, v in parsed:
        out.setdefault(number, []).append((w, v))
    return out


def _special(name: str, v: Any, value: bytes) -> str | None:
    sub = _sub(value)
    if sub is None:
        return None
    if isinstance(v, str):
        t = _time_seconds(v) if "T" in v else None
        if t and 1 in sub and sub[1][0][1] == t[0]:
            return "MicroTime" if "." in v else "Time"
        if list(sub) == [1] and sub[1][0][1] == v.encode() and v[:1] in "+-.0123456789" and v:
            return "Quantity"
        if sub.get(1, [(0, None)])[0][1] == 1 and sub.get(3, [(0, None)])[0][1] == v.encode():
            return "IntOrString"
        if list(sub) == [1] and sub[1][0][0] == wire.VARINT and v.endswith("s"):
            return "Duration"
    if isinstance(v, int) and not isinstance(v, bool):
        if sub.get(1, [(0, None)])[0][1] == 0 and sub.get(2, [(0, None)])[0][1] == v:
            return "IntOrString"
    if list(sub) == [1] and sub[1][0][0] == wire.BYTES:
        try:
            if json.loads(sub[1][0][1]) == v:
                return "FieldsV1" if name == "fieldsV1" else "RawExtension"
        except ValueError:
            pass
    return None


def _classify(path: str, name: str, v: Any, w: int, value: Any) -> Field | None:
    """The field a pb value is, if the JSON value v can be its JSON form."""
    if w == wire.VARINT:
        if isinstance(v, bool):
            return Field(0, name, "bool") if value == int(v) else None
        if isinstance(v, int):
            return Field(0, name, "int64") if wire.signed(value) == v else None
        if isinstance(v, list) and len(v) == 1 and isinstance(v[0], int):
            return Field(0, name, "int64", "repeated") if wire.signed(value) == v[0] else None
        return None
    if w != wire.BYTES:
        return None
    if isinstance(v, str):
        if value == v.encode():
            return Field(0, name, "string")
        special = _special(name, v, value)
        if special:
            return Field(0, name, special)
        if base64.b64encode(value).decode() == v:
            return Field(0, name, "bytes")
        return None
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        special = _special(name, v, value)
        return Field(0, name, special) if special else None
    if isinstance(v, list):
        if len(v) == 1:
            inner = _classify(path + "[]", name, v[0], w, value)
            if inner is not None and inner.label == "optional":
                inner.label = "repeated"
                return inner
            if len(v) == 1 and isinstance(v[0], int):  # packed
                sub = value
                try:
                    got, _ = wire.read_varint(sub, 0)
                except wire.WireError:
                    return None
                if wire.signed(got) == v[0]:
                    return Field(0, name, "int64", "repeated", packed=True)
        wrapper = _wrapper(path, name, v, value)
        return wrapper
    if isinstance(v, dict):
        special = _special(name, v, value)
        if special in ("RawExtension", "FieldsV1") and (
            name in ("fieldsV1",) or not _is_message(path, v, value)
        ):
            return Field(0, name, special)
        mapped = _map(path, name, v, value)
        if mapped is not None:
            return mapped
        try:
            key = infer(path, value, v)
        except Unmatched as err:
            FAILURES.append(str(err))
            return None
        return Field(0, name, key)
    return None


def _is_message(path: str, v: dict[str, Any], value: bytes) -> bool:
    try:
        infer(path, value, v, record=False)
    except Unmatched:
        return False
    return True


def _wrapper(path: str, name: str, v: list[Any], value: bytes) -> Field | None:
    sub = _sub(value)
    if sub is None or list(sub) != [1] or not v:
        return None
    inner = _classify(path + "[]", "items", v[0], *sub[1][0])
    if inner is None:
        return None
    inner.number, inner.label = 1, "repeated"
    key = path + "#list"
    msg = Message(key, {1: inner}, list_wrapper=True)
    MESSAGES.setdefault(key, msg)
    return Field(0, name, key, json_list=True)


def _map(path: str, name: str, v: dict[str, Any], value: bytes) -> Field | None:
    if len(v) != 1:
        return None
    ((k, item),) = v.items()
    sub = _sub(value)
    if sub is None or sub.get(1, [(0, None)])[0][1] != k.encode():
        return None
    if 2 not in sub:
        return None
    if item is None:  # a zero metav1.Time prints as null (PodDisruptionBudget's disruptedPods)
        zero = _sub(sub[2][0][1]) if sub[2][0][0] == wire.BYTES else None
        ok = zero is not None and all(v == 0 for values in zero.values() for _, v in values)
        return Field(0, name, "string", "map", map_value="Time") if ok else None
    inner = _classify(path + "{}", name, item, *sub[2][0])
    if inner is None or inner.label != "optional":
        return None
    return Field(0, name, "string", "map", map_value=inner.type)


def infer(path: str, data: bytes, obj: dict[str, Any], record: bool = True) -> str:
    """The message key for the pb `data` whose JSON form is `obj`."""
    sub = _sub(data)
    if sub is None:
        raise Unmatched(path)
    keys = [k for k in obj if not ("." not in path and k in ("kind", "apiVersion"))]
    if len(keys) < len(sub):
        raise Unmatched(f"{path}: {len(keys)} JSON keys, {len(sub)} pb fields")
    cands: dict[int, list[Field]] = {}
    for number, values in sub.items():
        w, value = values[0]
        for k in keys:
            f = _classify(f"{path}.{k}", k, obj[k], w, value)
            if f is not None:
                f.number = number
                cands.setdefault(number, []).append(f)
    chosen: dict[int, Field] = {}
    taken: set[str] = set()
    ambiguous: list[str] = []
    # unique candidates first, then groups in order (field number order = JSON order)
    for _ in range(len(cands) + 1):
        progress = False
        for number, fs in cands.items():
            if number in chosen:
                continue
            free = [f for f in fs if f.name not in taken]
            if len(free) == 1:
                chosen[number] = free[0]
                taken.add(free[0].name)
                progress = True
        if not progress:
            break
    for settled in SETTLED:
        if set(settled) <= set(keys):
            for name, number in settled.items():
                match = [f for f in cands.get(number, []) if f.name == name]
                if match and number not in chosen:
                    chosen[number] = match[0]
                    taken.add(name)
    rest = sorted(n for n in cands if n not in chosen)
    if rest:
        names = [k for k in keys if k not in taken]
        for number in rest:
            free = [f for f in cands[number] if f.name not in taken]
            free.sort(key=lambda f: names.index(f.name))
            if not free:
                raise Unmatched(f"{path}: field {number}")
            chosen[number] = free[0]
            taken.add(free[0].name)
            ambiguous.append(free[0].name)
    left = [n for n in sub if n not in chosen]
    rest_keys = {k: obj[k] for k in keys if k not in taken}
    if len(left) == 1 and rest_keys and sub[left[0]][0][0] == wire.BYTES:
        # an embedded struct whose fields JSON writes inline (Probe's handler, Volume's source)
        try:
            inner = infer(f"{path}.<inline>", sub[left[0]][0][1], rest_keys)
        except Unmatched as err:
            FAILURES.append(str(err))
        else:
            chosen[left[0]] = Field(left[0], "", inner, inline=True)
            taken.update(rest_keys)
    if set(sub) - set(chosen) or set(keys) - taken:
        raise Unmatched(f"{path}: pb {sorted(set(sub) - set(chosen))} json {sorted(set(keys) - taken)}")
    # Keyed by path and bytes: a trial pairing (a wrong field's bytes) must not stand for the path.
    key = f"{path}@{hashlib.sha1(data).hexdigest()[:16]}"
    msg = Message(key, chosen, ambiguous)
    if record:
        MESSAGES.setdefault(key, msg)
    return key


# --- naming, de-duplication and output ---------------------------------------------------------------

SCALARS = {"string", "bytes", "bool", "int64"}


def _camel(text: str) -> str:
    text = text.rsplit("_", 1)[-1]
    text = text.replace("[]", "").replace("{}", "").replace("#list", "List").replace("<inline>", "Inline")
    return text[:1].upper() + text[1:]


class Namer:
    """Gives each distinct message (by its fields and its children's names) one proto name."""

    def __init__(self) -> None:
        self.by_signature: dict[tuple[Any, ...], str] = {}
        self.names: dict[str, tuple[Any, ...]] = {}
        self.memo: dict[str, str] = {}
        self.out: dict[str, Message] = {}
        self.force: dict[str, str] = {}

    def name(self, key: str) -> str:
        if key in self.memo:
            return self.memo[key]
        msg = MESSAGES[key]
        fields = {}
        for number, f in msg.fields.items():
            t = self.name(f.type) if f.type in MESSAGES else f.type
            mv = self.name(f.map_value) if f.map_value in MESSAGES else f.map_value
            fields[number] = Field(number, f.name, t, f.label, mv, f.packed, f.json_list, f.inline)
        canon = Message(key, fields, list_wrapper=msg.list_wrapper)
        sig = canon.signature() + (msg.list_wrapper,)
        if sig in self.by_signature:
            self.memo[key] = self.by_signature[sig]
            return self.memo[key]
        parts = [p for p in key.split("@")[0].split(".") if p]
        candidate = self.force.get(key) or _camel(parts[-1])
        depth = 2
        reserved = set(self.force.values())
        while (
            candidate in self.names
            or candidate in APIMACHINERY
            or candidate in SCALARS
            or (candidate in reserved and self.force.get(key) != candidate)
        ):
            if len(parts) == 1:  # a root: the same kind in another version
                root = key.split("@")[0].replace("k8s_io", "").split("_")
                candidate = "".join(p[:1].upper() + p[1:] for p in root if p)
                if candidate in self.names:
                    candidate += "X"
                continue
            if depth > len(parts):
                candidate += "X"
                continue
            candidate = "".join(_camel(p) for p in parts[-depth:])
            depth += 1
        self.names[candidate] = sig
        self.by_signature[sig] = candidate
        canon.name = candidate
        self.out[candidate] = canon
        self.memo[key] = candidate
        return candidate


def rename_forced(namer: Namer) -> None:
    """Give a message its upstream name when a same-shaped message elsewhere took another name first."""
    for key, wanted in namer.force.items():
        got = namer.memo.get(key)
        if got is None or got == wanted or wanted in namer.out:
            continue
        namer.out[wanted] = namer.out.pop(got)
        namer.out[wanted].name = wanted
        for msg in namer.out.values():
            for f in msg.fields.values():
                if f.type == got:
                    f.type = wanted
                if f.map_value == got:
                    f.map_value = wanted
        for k, v in namer.memo.items():
            if v == got:
                namer.memo[k] = wanted


def _proto_type(t: str) -> str:
    if t == "int64":
        return "int64"
    return APIMACHINERY.get(t, t)


def proto_text(namer: Namer, roots: dict[str, str]) -> str:
    lines = [
        "// Messages of k8s.io/api as served, derived from upstream's serialization fixtures",
        "// (controlplane/apiserver/protobuf/derive.py). Field names are the JSON names.",
        "// A field marked [inline] is an embedded struct whose fields JSON writes inline; a message marked",
        "// [json list] is a named slice type (a list in JSON).",
        'syntax = "proto2";',
        "package k8s.io.api.derived;",
        "",
    ]
    for name in sorted(namer.out):
        msg = namer.out[name]
        kinds = sorted(r for r, n in roots.items() if n == name)
        for kind in kinds:
            lines.append(f"// root: {kind}")
        lines.append(f"message {name} {{" + (" // [json list]" if msg.list_wrapper else ""))
        for number in sorted(msg.fields):
            f = msg.fields[number]
            fname = f.name or f"inline{number}"
            note = " // [inline]" if f.inline else ""
            if f.label == "map":
                lines.append(f"  map<string, {_proto_type(f.map_value)}> {fname} = {number};{note}")
            else:
                packed = " [packed = true]" if f.packed else ""
                lines.append(f"  {f.label} {_proto_type(f.type)} {fname} = {number}{packed};{note}")
        lines.append("}")
        lines.append("")
    return "\n".join(lines)


# Upstream's names for the messages the codec names itself (and a few for readability).
UPSTREAM_NAMES = {
    ("core.v1.Pod", "metadata"): "ObjectMeta",
    ("core.v1.Pod", "spec"): "PodSpec",
    ("core.v1.Pod", "status"): "PodStatus",
    ("core.v1.Pod", "spec.containers[]"): "Container",
    ("core.v1.Pod", "metadata.ownerReferences[]"): "OwnerReference",
    ("core.v1.Pod", "metadata.managedFields[]"): "ManagedFieldsEntry",
    ("core.v1.Pod", "status.containerStatuses[]"): "ContainerStatus",
    ("core.v1.Status", "metadata"): "ListMeta",
    ("core.v1.Status", "details"): "StatusDetails",
    ("core.v1.Status", "details.causes[]"): "StatusCause",
    ("apps.v1.Deployment", "spec.selector"): "LabelSelector",
}

_KIND = {"int64": "int"}


def _table_type(t: str) -> str:
    if t in APIMACHINERY:
        return t.lower()
    return _KIND.get(t, t)


def tables_text(namer: Namer, roots: dict[str, str]) -> str:
    """The Python form of the table: {message: ((number, json name, type, label), ...)}."""
    out = [
        '"""Generated by controlplane.apiserver.protobuf.derive from upstream\'s fixtures; do not edit.',
        "",
        "MESSAGES: {message: ((number, JSON name, type, label), ...)}; a type is a scalar (string, bytes,",
        "bool, int), an apimachinery type (time, microtime, duration, quantity, intorstring, rawextension,",
        "fieldsv1) or a message name; label is '' (optional), 'repeated', 'map' (type = the value's),",
        "'inline' (an embedded struct) or 'list' (a named slice: a wrapper message, a list in JSON).",
        "ROOTS: {(apiVersion, kind): message} of the fixtures' kinds.",
        '"""',
        "",
        "MESSAGES = {",
    ]
    for name in sorted(namer.out):
        msg = namer.out[name]
        out.append(f"    {name!r}: (")
        for number in sorted(msg.fields):
            f = msg.fields[number]
            if f.label == "map":
                label, t = "map", f.map_value
            elif f.inline:
                label, t = "inline", f.type
            elif f.json_list:
                label, t = "list", f.type
            else:
                label, t = ("repeated" if f.label == "repeated" else ""), f.type
            out.append(f"        ({number}, {f.name!r}, {_table_type(t)!r}, {label!r}),")
        out.append("    ),")
    out.append("}")
    out.append("ROOTS = {")
    for stem in sorted(roots):
        group, version, kind = _gvk(stem)
        api_version = f"{group}/{version}" if group else version
        out.append(f"    ({api_version!r}, {kind!r}): {roots[stem]!r},")
    out.append("}")
    return "\n".join(out) + "\n"


def _gvk(stem: str) -> tuple[str, str, str]:
    head, kind = stem.rsplit(".", 1)
    group, version = head.rsplit(".", 1)
    return ("" if group == "core" else group), version, kind


def _name_forced(namer: Namer, key: str, seen: set[str]) -> None:
    """Name the messages that have upstream names before any other message can take those names."""
    if key in seen:
        return
    seen.add(key)
    for f in MESSAGES[key].fields.values():
        for ref in (f.type, f.map_value):
            if ref in MESSAGES:
                _name_forced(namer, ref, seen)
    if key in namer.force and namer.force[key] not in namer.names:
        namer.name(key)


def _stability(stem: str) -> tuple[int, str]:
    version = _gvk(stem)[1]
    return (0 if "alpha" not in version and "beta" not in version else 1 if "beta" in version else 2), stem


def _root(stem: str) -> str:
    """A fixture's root path: its group, version and kind without dots (paths are dotted)."""
    return stem.replace(".", "_")


def main(fixtures: Path) -> None:
    roots: dict[str, str] = {}
    for pb in sorted(fixtures.glob("*.pb")):
        stem = pb.name[:-3]
        if "after_roundtrip" in stem:
            continue
        envelope = {n: v for n, _, v in wire.fields(pb.read_bytes()[4:])}
        obj = json.loads((fixtures / f"{stem}.json").read_text())
        roots[stem] = infer(_root(stem), envelope[2], obj)  # type: ignore[arg-type]
    namer = Namer()
    for stem, key in roots.items():
        namer.force.setdefault(key, stem.rsplit(".", 1)[1])
    wanted = {f"{_root(stem)}.{path}": name for (stem, path), name in UPSTREAM_NAMES.items()}
    for key in MESSAGES:
        if key.split("@")[0] in wanted:
            namer.force[key] = wanted[key.split("@")[0]]
    for stem in sorted(roots, key=_stability):  # upstream's names first, then the rest
        _name_forced(namer, roots[stem], set())
    for stem in sorted(roots, key=_stability):
        namer.name(roots[stem])
    rename_forced(namer)
    named = {stem: namer.memo[roots[stem]] for stem in roots}
    repo = Path(__file__).resolve().parents[3]
    (repo / "protos" / "k8s").mkdir(parents=True, exist_ok=True)
    (repo / "protos" / "k8s" / "api.proto").write_text(proto_text(namer, named))
    (Path(__file__).with_name("tables.py")).write_text(tables_text(namer, named))
    print(f"{len(namer.out)} messages from {len(roots)} fixtures")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
