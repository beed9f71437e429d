"""The aggregator's OpenAPI merging as pure code: upstream's rules (a local path wins, an identical
definition is shared, a different one of the same name is renamed `_v2`/`_v3` with every reference to
it), the order by APIService priority, unavailable servers left out, and the v3 root and documents."""

from __future__ import annotations

import copy

from controlplane.apiserver.aggregator.apis import APIServiceInfo
from controlplane.apiserver.aggregator.openapimerge import OpenAPIAggregation, merge_v2


def _info(name: str, available: bool = True, priority: int = 100) -> APIServiceInfo:
    version, group = name.split(".", 1)
    return APIServiceInfo(name, group, version, "ns", "svc", 443, b"", True, priority, 10, available)


LOCAL = {
    "swagger": "2.0",
    "paths": {"/api/v1/pods": {"get": {"operationId": "local"}}},
    "definitions": {"Shared": {"type": "string"}, "Meta": {"type": "object", "properties": {"a": {}}}},
}


def _remote(tag: str) -> dict:
    return {
        "swagger": "2.0",
        "paths": {
            "/api/v1/pods": {"get": {"operationId": f"theirs-{tag}"}},
            f"/apis/{tag}/v1/things": {
                "get": {"responses": {"200": {"schema": {"$ref": "#/definitions/Meta"}}}}
            },
        },
        "definitions": {
            "Shared": {"type": "string"},
            "Meta": {"type": "object", "properties": {tag: {}}},
            f"{tag}.Thing": {
                "properties": {
                    "metadata": {"$ref": "#/definitions/Meta"},
                    "items": [{"$ref": "#/definitions/Shared"}],
                }
            },
        },
    }


def test_merge_keeps_local_paths_shares_equal_definitions_and_renames_the_rest() -> None:
    dest = copy.deepcopy(LOCAL)
    merge_v2(dest, _remote("a.io"))
    merge_v2(dest, _remote("b.io"))
    assert dest["paths"]["/api/v1/pods"] == {"get": {"operationId": "local"}}
    assert dest["definitions"]["Meta"] == LOCAL["definitions"]["Meta"]
    assert dest["definitions"]["Meta_v2"]["properties"] == {"a.io": {}}
    assert dest["definitions"]["Meta_v3"]["properties"] == {"b.io": {}}
    assert set(dest["definitions"]) == {"Shared", "Meta", "Meta_v2", "Meta_v3", "a.io.Thing", "b.io.Thing"}
    thing = dest["definitions"]["b.io.Thing"]["properties"]
    assert thing["metadata"] == {"$ref": "#/definitions/Meta_v3"} and thing["items"] == [
        {"$ref": "#/definitions/Shared"}
    ]
    ok = dest["paths"]["/apis/a.io/v1/things"]["get"]["responses"]["200"]["schema"]
    assert ok == {"$ref": "#/definitions/Meta_v2"}


async def test_aggregation_follows_availability_priority_and_proxies_v3() -> None:
    docs = {
        ("v1.a.io", "/openapi/v2"): _remote("a.io"),
        ("v1.b.io", "/openapi/v2"): _remote("b.io"),
        ("v1.a.io", "/openapi/v3"): {
            "paths": {"apis/a.io/v1": {"serverRelativeURL": "/openapi/v3/apis/a.io/v1?hash=AB"}}
        },
        ("v1.a.io", "/openapi/v3/apis/a.io/v1"): {"openapi": "3.0.0", "paths": {}},
    }
    calls: list[tuple[str, str]] = []

    async def fetch(info: APIServiceInfo, path: str) -> dict:
        calls.append((info.name, path))
        if (info.name, path) not in docs:
            raise RuntimeError("bad status 404")
        return docs[(info.name, path)]

    agg = OpenAPIAggregation(fetch)
    infos = {"v1.a.io": _info("v1.a.io", priority=50), "v1.b.io": _info("v1.b.io", priority=200)}
    for info in infos.values():
        await agg.refresh(info)
    merged = agg.v2(LOCAL, infos.get)
    # b.io has the higher priority, so it is merged first and gets Meta_v2
    assert merged["definitions"]["Meta_v2"]["properties"] == {"b.io": {}}
    assert merged is agg.v2(LOCAL, infos.get)  # kept until something changes
    assert LOCAL["definitions"].keys() == {"Shared", "Meta"}  # the local document is never modified
    root = agg.v3_root({"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=L"}}}, infos.get)
    assert root["paths"]["apis/a.io/v1"] == {"serverRelativeURL": "/openapi/v3/apis/a.io/v1?hash=AB"}
    assert await agg.v3_document("apis/a.io/v1", infos.get) == b'{"openapi": "3.0.0", "paths": {}}'
    assert await agg.v3_document("apis/none/v1", infos.get) is None
    infos["v1.b.io"] = _info("v1.b.io", available=False)
    merged = agg.v2(LOCAL, infos.get)
    assert "b.io.Thing" not in merged["definitions"] and "a.io.Thing" in merged["definitions"]
    infos.pop("v1.a.io")
    assert "apis/a.io/v1" not in agg.v3_root({"paths": {}}, infos.get)["paths"]
