"""deep_copy gives a copy of an API object that shares nothing mutable with it, as copy.deepcopy does."""

from __future__ import annotations

import copy
from typing import Any

from kubeclient.objcopy import deep_copy


def containers(value: Any) -> list[Any]:
    """Every dict and list inside `value`, itself included."""
    out = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            out.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            out.append(item)
            stack.extend(item)
    return out


POD = {
    "metadata": {
        "name": "p",
        "labels": {"app": "web"},
        "ownerReferences": [{"uid": "u", "controller": True}],
    },
    "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}], "priority": 0},
    "status": {"conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None}], "ratio": 0.5},
}


def test_the_copy_is_equal_and_shares_no_dict_or_list() -> None:
    copied = deep_copy(POD)
    assert copied == POD
    originals = {id(c) for c in containers(POD)}
    assert not originals & {id(c) for c in containers(copied)}
    copied["spec"]["containers"][0]["ports"].append({"containerPort": 81})
    assert POD["spec"]["containers"][0]["ports"] == [{"containerPort": 80}]


def test_a_dict_subclass_is_copied_too() -> None:
    class Cached(dict):  # type: ignore[type-arg]
        pass

    cached = Cached(POD)
    copied = deep_copy(cached)
    assert copied == POD
    assert copied is not cached
    copied["metadata"]["labels"]["app"] = "other"
    assert POD["metadata"]["labels"]["app"] == "web"


def test_values_json_has_not_are_copied_as_copy_deepcopy_copies_them() -> None:
    inner = {"a": [1]}
    value = {"tuple": (inner,), "set": {1, 2}}
    copied = deep_copy(value)
    assert copied == copy.deepcopy(value)
    assert copied["tuple"][0] is not inner
    assert copied["set"] is not value["set"]
