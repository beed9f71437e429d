"""The conversion webhook client (apiextensions/conversion.py) on its own, against the real HTTPS test
webhook: a hanging webhook is cut at the (injected) timeout with Go's `context deadline exceeded`; a list
sends only the items not at the desired version, in one review, and keeps the order; nothing at all is
sent when every item is there already. restoreObjectMeta: labels and annotations from the answer, the
rest of metadata from the original, bad label values refused with upstream's texts."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.apiserver.apiextensions.conversion import (
    DEFAULT_TIMEOUT,
    ConversionError,
    WebhookConverter,
    restore_object_meta,
)
from tests.controlplane.conversionserver import ConversionServer, serving

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConversionServer]:
    with serving(tmp_path_factory.mktemp("conversion-units")) as server:
        yield server


def _crd(url: str, ca: str) -> Obj:
    return {
        "metadata": {"name": "crontabs.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "CronTab", "plural": "crontabs"},
            "conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": url, "caBundle": ca},
                    "conversionReviewVersions": ["v9", "v1"],
                },
            },
        },
    }


def _cron(name: str, version: str) -> Obj:
    field = "cronSpec" if version == "v1" else "schedule"
    return {
        "apiVersion": f"example.com/{version}",
        "kind": "CronTab",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 3},
        "spec": {field: "* * * * *"},
    }


def test_no_webhook_for_strategy_none() -> None:
    assert (
        WebhookConverter.of({"metadata": {"name": "x"}, "spec": {"conversion": {"strategy": "None"}}}) is None
    )
    converter = WebhookConverter.of(_crd("https://h/convert", ""))
    assert converter is not None and converter.endpoint.timeout == DEFAULT_TIMEOUT == 30.0


def test_a_hanging_webhook_is_cut_at_the_timeout(hook: ConversionServer) -> None:
    converter = WebhookConverter.of(_crd(hook.url("/hang"), hook.ca_bundle), timeout=0.3)
    assert converter is not None
    started = time.monotonic()
    with pytest.raises(ConversionError) as err:
        asyncio.run(converter.convert([_cron("a", "v1")], "example.com/v2", None))  # type: ignore[arg-type]
    assert time.monotonic() - started < 5
    assert str(err.value) == (
        f'conversion webhook for example.com/v1, Kind=CronTab failed: Post "{hook.url("/hang")}?timeout=0.3s": '
        "context deadline exceeded"
    )


def test_a_list_sends_only_what_needs_converting(hook: ConversionServer) -> None:
    converter = WebhookConverter.of(_crd(hook.url("/convert"), hook.ca_bundle))
    assert converter is not None
    items = [_cron("a", "v1"), _cron("b", "v2"), _cron("c", "v1")]
    before = len(hook.got("/convert"))
    out = asyncio.run(converter.convert(items, "example.com/v2", None, listing=True))  # type: ignore[arg-type]
    assert [o["metadata"]["name"] for o in out] == ["a", "b", "c"]
    assert all(o["apiVersion"] == "example.com/v2" and o["spec"] == {"schedule": "* * * * *"} for o in out)
    assert out[1] is items[1]
    (review,) = hook.got("/convert")[before:]
    assert [o["metadata"]["name"] for o in review["objects"]] == ["a", "c"]
    assert hook.reviews[-1]["query"] == {"timeout": "30s"}
    # metadata other than labels and annotations is the original's (the webhook set generation 99)
    assert out[0]["metadata"]["generation"] == 3 and "finalizers" not in out[0]["metadata"]

    same = [_cron("d", "v2")]
    assert asyncio.run(converter.convert(same, "example.com/v2", None)) is same  # type: ignore[arg-type]
    assert len(hook.got("/convert")) == before + 1


def test_restore_object_meta() -> None:
    original = {
        "metadata": {"name": "a", "uid": "u", "generation": 2, "labels": {"x": "1"}, "finalizers": ["f"]}
    }
    converted = {
        "apiVersion": "g/v2",
        "metadata": {
            "name": "a",
            "uid": "u",
            "generation": 9,
            "annotations": {"note": "hi"},
            "finalizers": [],
        },
        "spec": {"a": 1},
    }
    out = restore_object_meta(original, converted)
    assert out["metadata"] == {
        "name": "a",
        "uid": "u",
        "generation": 2,
        "annotations": {"note": "hi"},
        "finalizers": ["f"],
    }
    assert out["spec"] == {"a": 1} and out["apiVersion"] == "g/v2"
    with pytest.raises(ValueError, match=r"^missing metadata in converted object$"):
        restore_object_meta(original, {"spec": {}})
    with pytest.raises(
        ValueError, match=r"^metadata\.labels\[x\] must be a string, but is number in converted object$"
    ):
        restore_object_meta(original, {"metadata": {"labels": {"x": 1}}})
    with pytest.raises(ValueError, match=r"^metadata\.labels: Invalid value: \"a b\""):
        restore_object_meta(original, {"metadata": {"labels": {"x": "a b"}}})


def test_no_supported_review_version() -> None:
    crd = _crd("https://127.0.0.1:1/convert", base64.b64encode(b"").decode())
    crd["spec"]["conversion"]["webhook"]["conversionReviewVersions"] = ["v9"]
    converter = WebhookConverter.of(crd)
    assert converter is not None
    with pytest.raises(ConversionError, match="^no supported conversion review versions$"):
        asyncio.run(converter.convert([_cron("a", "v1")], "example.com/v2", None))  # type: ignore[arg-type]


def test_a_list_item_at_the_wrong_version_is_named_as_upstream_counts_it(hook: ConversionServer) -> None:
    converter = WebhookConverter.of(_crd(hook.url("/sameversion"), hook.ca_bundle))
    assert converter is not None
    with pytest.raises(ConversionError) as err:
        asyncio.run(
            converter.convert([_cron("a", "v1"), _cron("b", "v1")], "example.com/v2", None, listing=True)
        )  # type: ignore[arg-type]
    assert str(err.value) == (
        "conversion webhook for example.com/v1, Kind=CronTabList returned invalid converted object at index 1: "
        "invalid groupVersion (expected example.com/v2, received example.com/v1)"
    )
