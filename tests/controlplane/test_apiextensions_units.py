"""The pure parts of CRD support: the structural-schema check, pruning, defaulting, validation texts,
CEL rules, names acceptance and version priority; no server."""

from __future__ import annotations

from controlplane.apiserver.apiextensions import rules, schema, structural
from controlplane.apiserver.apiextensions.columns import cell, compile_columns
from controlplane.apiserver.apiextensions.controller import accept_names
from controlplane.apiserver.apiextensions.patterns import compile_pattern, pattern_error
from controlplane.apiserver.apiextensions.resource import json_path, version_priority


def texts(errors) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"{e.field}: {e.detail}" for e in errors]


def test_structural_accepts_int_or_string_patterns_and_lists_violations_sorted() -> None:
    ok = {
        "type": "object",
        "properties": {
            "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "free": {"x-kubernetes-preserve-unknown-fields": True},
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}}},
        },
    }
    assert structural.check(ok, "s") == []
    bad = {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "properties": {
            "b": {"type": "array"},
            "a": {},
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
        },
    }
    assert texts(structural.check(bad, "s")) == [
        "s.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
        "s.additionalProperties: Forbidden: must not be used at the root",
        "s.properties[a].type: Required value: must not be empty for specified object fields",
        "s.properties[b].items: Required value: must be specified",
        "s.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
    ]
    assert texts(structural.check({"type": "string"}, "s")) == [
        's.type: Invalid value: "string": must be object at the root'
    ]


def test_pruning_keeps_what_the_schema_names() -> None:
    s = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "a": {"type": "string"},
                    "m": {
                        "type": "object",
                        "additionalProperties": {"type": "object", "properties": {"k": {"type": "string"}}},
                    },
                    "e": {
                        "type": "object",
                        "x-kubernetes-embedded-resource": True,
                        "x-kubernetes-preserve-unknown-fields": True,
                    },
                },
            }
        },
    }
    obj = {
        "apiVersion": "g/v1",
        "kind": "K",
        "metadata": {"name": "n", "junk": 1},
        "spec": {
            "a": "x",
            "b": 1,
            "m": {"one": {"k": "v", "z": 2}},
            "e": {"kind": "Pod", "metadata": {"x": 1}, "any": 1},
        },
        "top": 1,
    }
    unknown = schema.prune(obj, s)
    assert sorted(unknown) == ["metadata.junk", "spec.b", "spec.e.metadata.x", "spec.m.one.z", "top"]
    assert obj == {
        "apiVersion": "g/v1",
        "kind": "K",
        "metadata": {"name": "n"},
        "spec": {"a": "x", "m": {"one": {"k": "v"}}, "e": {"kind": "Pod", "metadata": {}, "any": 1}},
    }


def test_defaults_apply_top_down_and_validation_texts() -> None:
    s = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "default": {},
                "properties": {
                    "n": {
                        "type": "integer",
                        "default": 3,
                        "minimum": 1,
                        "exclusiveMaximum": True,
                        "maximum": 5,
                    },
                    "s": {"type": "string", "minLength": 2, "format": "date"},
                    "z": {"type": "string", "nullable": True},
                    "l": {
                        "type": "array",
                        "minItems": 1,
                        "x-kubernetes-list-type": "set",
                        "items": {"type": "integer"},
                    },
                },
            }
        },
    }
    obj: dict = {"metadata": {"name": "x"}}
    schema.apply_defaults(obj, s)
    assert obj["spec"] == {"n": 3}
    obj["spec"] = {"n": 5, "s": "x", "z": None, "l": [1, 1]}
    assert texts(schema.validate(obj, s)) == [
        "spec.n: Invalid value: 5: spec.n in body should be less than 5",
        'spec.s: Invalid value: "x": spec.s in body should be at least 2 chars long',
        'spec.s: Invalid value: "x": spec.s in body must be of type date: "x"',
        "spec.l[1]: Duplicate value: 1",
    ]
    obj["spec"] = {"n": 1.5, "l": []}
    assert texts(schema.validate(obj, s)) == [
        'spec.n: Invalid value: "number": spec.n in body must be of type integer: "number"',
        "spec.l: Invalid value: 0: spec.l in body should have at least 1 items",
    ]


def test_rules_compile_errors_and_evaluation() -> None:
    s = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [{"rule": "self.a >"}, {"rule": "true", "reason": "Nope"}],
            }
        },
    }
    found = texts(rules.compile_errors(s, "o"))
    assert found[0].startswith("o.properties[spec].x-kubernetes-validations[0].rule: Invalid value: ")
    assert "compilation failed" in found[0]
    assert found[1].startswith(
        'o.properties[spec].x-kubernetes-validations[1].reason: Unsupported value: "Nope"'
    )
    s = {
        "type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-validations": [{"rule": "self.a < 3"}]}},
    }
    assert texts(rules.check({"spec": {"a": 5}}, None, s, transitions=False)) == [
        'spec: Invalid value: "object": failed rule: self.a < 3'
    ]
    assert rules.check({"spec": {"a": 1}}, None, s, transitions=False) == []


def test_names_acceptance_and_versions() -> None:
    crd = {
        "spec": {
            "names": {
                "plural": "foos",
                "singular": "foo",
                "kind": "Foo",
                "listKind": "FooList",
                "shortNames": ["f"],
            }
        }
    }
    other = {
        "status": {
            "acceptedNames": {
                "plural": "bars",
                "singular": "bar",
                "kind": "Bar",
                "listKind": "BarList",
                "shortNames": ["f"],
            }
        }
    }
    accepted, reason, message = accept_names(crd, [other], [])
    assert (reason, message) == ("ShortNamesConflict", '"f" is already in use')
    assert accepted["plural"] == "foos" and "shortNames" not in accepted
    assert accept_names(crd, [], [])[1] == "NoConflicts"
    assert sorted(["v1beta1", "v2", "v1", "v1alpha1", "foo"], key=version_priority) == [
        "v2",
        "v1",
        "v1beta1",
        "v1alpha1",
        "foo",
    ]
    assert json_path({"a": {"b": [1, {"c": 2}]}}, ".a.b[1].c") == (True, 2)
    assert json_path({"a": {}}, ".a.x") == (False, None)


def test_junctors_validate_values() -> None:
    s = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
                "properties": {
                    "a": {"type": "string"},
                    "b": {"type": "string"},
                    "c": {"type": "integer", "not": {"minimum": 5}},
                },
            }
        },
    }
    assert schema.validate({"spec": {"a": "x"}}, s) == []
    assert texts(schema.validate({"spec": {"a": "x", "b": "y", "c": 7}}, s)) == [
        'spec: Invalid value: {"a":"x","b":"y","c":7}: spec in body must validate one and only one schema (oneOf)',
        "spec.c: Invalid value: 7: spec.c in body must not validate the schema (not)",
    ]


def test_printer_columns_first_match_and_go_printing() -> None:
    cols = compile_columns(
        [
            {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
            {"name": "N", "type": "string", "jsonPath": ".spec.n"},
            {"name": "Big", "type": "string", "jsonPath": ".spec.big"},
            {"name": "I", "type": "integer", "jsonPath": ".spec.n"},
            {"name": "Bad", "type": "string", "jsonPath": ".spec[?("},
            {"name": "After", "type": "string", "jsonPath": ".spec.n"},
        ]
    )
    # upstream keeps the columns before the first that does not parse
    assert [c.name for c in cols] == ["Ready", "N", "Big", "I"]
    obj = {
        "spec": {"n": 2.5, "big": 1234567.0},
        "status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]},
    }
    assert [cell(c, obj) for c in cols] == ["True", "2.5", "1.234567e+06", 2]
    assert cell(cols[0], {"status": {}}) is None


def test_re2_patterns_and_go_error_texts() -> None:
    assert compile_pattern("^(?i)tcp$").search("TCP") is not None
    assert pattern_error("+") == "error parsing regexp: missing argument to repetition operator: `+`"
    assert pattern_error("(") == "error parsing regexp: missing closing ): `(`"
    assert pattern_error("a**") == "error parsing regexp: invalid nested repetition operator: `**`"
    assert pattern_error("x(?=y)") == "error parsing regexp: invalid or unsupported Perl syntax: `(?=`"
    assert pattern_error("[a-z]+") is None
