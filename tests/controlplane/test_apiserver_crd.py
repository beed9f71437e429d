"""CustomResourceDefinitions against a real API server, through the official client and kubectl: a CRD
becomes Established and its resource is served (discovery, every verb, watch), its schema validates,
defaults and prunes, CEL rules reject with their message, printer columns, explain, several versions,
status and scale subresources, deleting the CRD removes its objects; bad CRDs get upstream's 422."""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from e2e import waiting

Obj = dict[str, Any]

SCHEMA: Obj = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["cronSpec"],
            "x-kubernetes-validations": [
                {
                    "rule": "self.replicas <= self.maxReplicas",
                    "message": "replicas must not exceed maxReplicas",
                }
            ],
            "properties": {
                "cronSpec": {"type": "string", "pattern": r"^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$"},
                "image": {"type": "string", "default": "busybox"},
                "replicas": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1},
                "maxReplicas": {"type": "integer", "default": 5},
                "mode": {"type": "string", "enum": ["Fast", "Slow"]},
                "tags": {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 5}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "port": {"x-kubernetes-int-or-string": True},
                "selector": {"type": "string"},
            },
        },
        "status": {
            "type": "object",
            "properties": {"replicas": {"type": "integer"}, "selector": {"type": "string"}},
        },
    },
}


# e2e's poll: a condition within its bound, read every 50 ms.
wait_for = functools.partial(waiting.wait_for, timeout=10.0, interval=0.05)


def crd_body(
    group: str, *, scope: str = "Namespaced", versions: list[Obj] | None = None, **names: Any
) -> Obj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"crontabs.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {
                "plural": "crontabs",
                "singular": "crontab",
                "kind": "CronTab",
                "shortNames": ["ct"],
                "categories": ["all"],
                **names,
            },
            "versions": versions
            or [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": SCHEMA},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"},
                        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def ext(api: client.ApiClient) -> client.ApiextensionsV1Api:
    return client.ApiextensionsV1Api(api)


@pytest.fixture(scope="module")
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def established(ext: client.ApiextensionsV1Api, name: str) -> bool:
    crd = ext.read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))


def raw(
    api: client.ApiClient, method: str, path: str, body: Any = None, content_type: str = "application/json"
) -> tuple[int, Obj]:
    """A request the typed client cannot make (query parameters, patch types): (status, JSON body)."""
    headers = {"Accept": "application/json", "Content-Type": content_type}
    answer = api.call_api(method, api.configuration.host + path, header_params=headers, body=body)
    answer.read()
    return answer.status, json.loads(answer.data or b"{}")


def served(api: client.ApiClient, group: str, version: str) -> bool:
    return raw(api, "GET", f"/apis/{group}/{version}")[0] == 200


def delete_crd(ext: client.ApiextensionsV1Api, name: str) -> None:
    """Delete a CRD and wait until it is gone (its objects first), so no test leaves one behind in
    anyone's discovery (kubectl's cache of categories, say)."""
    try:
        ext.delete_custom_resource_definition(name)
    except ApiException as err:
        assert err.status == 404

    def gone() -> bool:
        try:
            ext.read_custom_resource_definition(name)
        except ApiException as err:
            return err.status == 404
        return False

    wait_for(gone, timeout=30)


@pytest.fixture
def group(ext: client.ApiextensionsV1Api, api: client.ApiClient) -> Iterator[str]:
    """A CRD of its own group (crontabs.<group>), established and served."""
    name = f"t{uuid.uuid4().hex[:8]}.example.com"
    ext.create_custom_resource_definition(crd_body(name))
    wait_for(lambda: established(ext, f"crontabs.{name}") and served(api, name, "v1"))
    yield name
    delete_crd(ext, f"crontabs.{name}")


@pytest.fixture
def fresh_kubectl(kubectl: Any, tmp_path: Any) -> Callable[..., Any]:
    """kubectl with a discovery cache of its own: CRDs come and go between tests, and kubectl (against
    any cluster) trusts its cached discovery for category expansion."""

    class Fresh:
        def __call__(self, *args: str, **kwargs: Any) -> str:
            return kubectl("--cache-dir", str(tmp_path / "cache"), *args, **kwargs)

        def run(self, *args: str, **kwargs: Any) -> Any:
            return kubectl.run("--cache-dir", str(tmp_path / "cache"), *args, **kwargs)

    return Fresh()


def cron(name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "",
        "kind": "CronTab",
        "metadata": {"name": name},
        "spec": {"cronSpec": "* * * * */5", **spec},
    }


def create(custom: client.CustomObjectsApi, group: str, ns: str, name: str, **spec: Any) -> Obj:
    body = cron(name, **spec)
    body["apiVersion"] = f"{group}/v1"
    return custom.create_namespaced_custom_object(group, "v1", ns, "crontabs", body)


def error_of(err: ApiException) -> Obj:
    return json.loads(err.body)


def test_crd_is_established_with_its_names_and_status(ext: client.ApiextensionsV1Api, group: str) -> None:
    crd = ext.read_custom_resource_definition(f"crontabs.{group}")
    conditions = {c.type: c for c in crd.status.conditions}
    assert conditions["NamesAccepted"].status == "True"
    assert conditions["NamesAccepted"].reason == "NoConflicts"
    assert conditions["Established"].status == "True"
    assert crd.status.accepted_names.plural == "crontabs"
    assert crd.status.accepted_names.short_names == ["ct"]
    assert crd.status.stored_versions == ["v1"]
    assert crd.spec.names.list_kind == "CronTabList"
    assert crd.spec.conversion.strategy == "None"


def test_discovery_lists_the_resource(api: client.ApiClient, group: str) -> None:
    resources = client.CustomObjectsApi(api).get_api_resources(group, "v1")
    by_name = {r.name: r for r in resources.resources}
    main = by_name["crontabs"]
    assert main.kind == "CronTab" and main.namespaced and main.singular_name == "crontab"
    assert main.short_names == ["ct"] and main.categories == ["all"]
    assert set(main.verbs) == {
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    }
    assert set(by_name) == {"crontabs", "crontabs/status", "crontabs/scale"}
    assert by_name["crontabs/scale"].group == "autoscaling" and by_name["crontabs/scale"].kind == "Scale"
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert groups[group].preferred_version.version == "v1"


def test_defaults_are_applied_and_unknown_fields_pruned(
    custom: client.CustomObjectsApi, group: str, namespace: str
) -> None:
    obj = create(custom, group, namespace, "a", unknown="x", free={"anything": {"goes": 1}}, port="http")
    assert obj["spec"]["image"] == "busybox" and obj["spec"]["replicas"] == 1
    assert "unknown" not in obj["spec"]
    assert obj["spec"]["free"] == {"anything": {"goes": 1}}
    assert obj["spec"]["port"] == "http"
    assert obj["metadata"]["generation"] == 1
    read = custom.get_namespaced_custom_object(group, "v1", namespace, "crontabs", "a")
    assert read["spec"] == obj["spec"]
    strict = cron("b", unknown="x")
    strict["apiVersion"] = f"{group}/v1"
    code, answer = raw(
        custom.api_client,
        "POST",
        f"/apis/{group}/v1/namespaces/{namespace}/crontabs?fieldValidation=Strict",
        strict,
    )
    assert code == 400
    assert 'strict decoding error: unknown field "spec.unknown"' in answer["message"]


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            {"replicas": "two"},
            "spec.replicas",
            'spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"',
        ),
        (
            {"replicas": 11},
            "spec.replicas",
            "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10",
        ),
        (
            {"mode": "Medium"},
            "spec.mode",
            'spec.mode: Unsupported value: "Medium": supported values: "Fast", "Slow"',
        ),
        ({"cronSpec": "nope"}, "spec.cronSpec", "spec.cronSpec in body should match"),
        ({"tags": ["a", "b", "c"]}, "spec.tags", "spec.tags: Too many: 3: must have at most 2 items"),
        ({"tags": ["toolong"]}, "spec.tags[0]", "spec.tags[0]: Too long: may not be more than 5 bytes"),
    ],
)
def test_invalid_objects_are_422_naming_the_field(
    custom: client.CustomObjectsApi, group: str, namespace: str, spec: Obj, field: str, message: str
) -> None:
    with pytest.raises(ApiException) as err:
        create(custom, group, namespace, "bad", **spec)
    assert err.value.status == 422
    status = error_of(err.value)
    assert status["reason"] == "Invalid"
    assert status["message"].startswith(f'CronTab.{group} "bad" is invalid: ')
    assert message in status["message"]
    assert field in [c["field"] for c in status["details"]["causes"]]


def test_required_field(custom: client.CustomObjectsApi, group: str, namespace: str) -> None:
    body = {"apiVersion": f"{group}/v1", "kind": "CronTab", "metadata": {"name": "r"}, "spec": {}}
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(group, "v1", namespace, "crontabs", body)
    assert err.value.status == 422
    assert "spec.cronSpec: Required value" in error_of(err.value)["message"]


def test_cel_rule_rejects_with_its_message(
    custom: client.CustomObjectsApi, group: str, namespace: str
) -> None:
    with pytest.raises(ApiException) as err:
        create(custom, group, namespace, "cel", replicas=8, maxReplicas=4)
    assert err.value.status == 422
    assert (
        'spec: Invalid value: "object": replicas must not exceed maxReplicas'
        in error_of(err.value)["message"]
    )
    create(custom, group, namespace, "cel", replicas=3, maxReplicas=4)


def test_every_verb_and_generation(custom: client.CustomObjectsApi, group: str, namespace: str) -> None:
    create(custom, group, namespace, "v")
    args = (group, "v1", namespace, "crontabs", "v")
    patched = custom.patch_namespaced_custom_object(*args, {"spec": {"image": "nginx"}})
    assert patched["spec"]["image"] == "nginx" and patched["metadata"]["generation"] == 2
    current = custom.get_namespaced_custom_object(*args)
    current["metadata"]["labels"] = {"a": "b"}
    updated = custom.replace_namespaced_custom_object(*args, current)
    assert updated["metadata"]["labels"] == {"a": "b"} and updated["metadata"]["generation"] == 2
    listed = custom.list_namespaced_custom_object(group, "v1", namespace, "crontabs", label_selector="a=b")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["v"]
    assert listed["kind"] == "CronTabList"
    # status goes through its subresource only, and does not move the generation
    status = custom.patch_namespaced_custom_object_status(*args, {"status": {"replicas": 3}})
    assert status["status"] == {"replicas": 3} and status["metadata"]["generation"] == 2
    ignored = custom.patch_namespaced_custom_object(*args, {"status": {"replicas": 9}})
    assert ignored["status"] == {"replicas": 3}
    custom.delete_namespaced_custom_object(*args)
    with pytest.raises(ApiException) as err:
        custom.get_namespaced_custom_object(*args)
    assert err.value.status == 404
    assert error_of(err.value)["message"] == f'crontabs.{group} "v" not found'


def test_strategic_merge_patch_is_unsupported(
    api: client.ApiClient, custom: client.CustomObjectsApi, group: str, namespace: str
) -> None:
    create(custom, group, namespace, "s")
    code, answer = raw(
        api,
        "PATCH",
        f"/apis/{group}/v1/namespaces/{namespace}/crontabs/s",
        {"spec": {"image": "x"}},
        "application/strategic-merge-patch+json",
    )
    assert code == 415
    assert answer["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


def test_watch_sees_changes(custom: client.CustomObjectsApi, group: str, namespace: str) -> None:
    listed = custom.list_namespaced_custom_object(group, "v1", namespace, "crontabs")
    rv = listed["metadata"]["resourceVersion"]
    create(custom, group, namespace, "w")
    custom.delete_namespaced_custom_object(group, "v1", namespace, "crontabs", "w")
    seen = []
    for event in watch.Watch().stream(
        custom.list_namespaced_custom_object,
        group,
        "v1",
        namespace,
        "crontabs",
        resource_version=rv,
        timeout_seconds=5,
    ):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if event["type"] == "DELETED":
            break
    assert seen == [("ADDED", "w"), ("DELETED", "w")]


def test_kubectl_get_shows_printer_columns_and_scale(
    fresh_kubectl: Any, custom: client.CustomObjectsApi, group: str, namespace: str
) -> None:
    create(custom, group, namespace, "k", replicas=2)
    out = fresh_kubectl("get", f"crontabs.{group}", "-n", namespace)
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "SPEC", "REPLICAS", "AGE"]
    assert lines[1].split()[:6] == ["k", "*", "*", "*", "*", "*/5"] and lines[1].split()[6] == "2"
    assert lines[1].split()[7].endswith("s")  # the date column as an age (seconds old)
    assert fresh_kubectl("get", "ct", "-n", namespace, "-o", "name").strip() == f"crontab.{group}/k"
    custom.patch_namespaced_custom_object_status(
        group, "v1", namespace, "crontabs", "k", {"status": {"replicas": 2, "selector": "app=k"}}
    )
    fresh_kubectl("scale", f"crontabs.{group}/k", "-n", namespace, "--replicas=4")
    obj = custom.get_namespaced_custom_object(group, "v1", namespace, "crontabs", "k")
    assert obj["spec"]["replicas"] == 4
    scale = custom.get_namespaced_custom_object_scale(group, "v1", namespace, "crontabs", "k")
    assert scale["spec"] == {"replicas": 4} and scale["status"] == {"replicas": 2, "selector": "app=k"}


def test_kubectl_explain_and_client_side_validation(fresh_kubectl: Any, group: str, namespace: str) -> None:
    out = fresh_kubectl("explain", f"crontabs.{group}.spec")
    assert "KIND:       CronTab" in out and "cronSpec" in out and "replicas" in out
    field = fresh_kubectl("explain", f"crontabs.{group}.spec.replicas")
    assert "FIELD: replicas <integer>" in field
    manifest = yaml.safe_dump(
        {
            "apiVersion": f"{group}/v1",
            "kind": "CronTab",
            "metadata": {"name": "yy", "namespace": namespace},
            "spec": {"cronSpec": "* * * * *", "bogus": 1},
        }
    )
    proc = fresh_kubectl.run("apply", "--validate=strict", "-f", "-", input=manifest, check=False)
    assert proc.returncode != 0 and 'unknown field "spec.bogus"' in proc.stderr
    fresh_kubectl("apply", "-f", "-", input=manifest.replace("bogus: 1", "image: nginx"))
    assert "nginx" in fresh_kubectl(
        "get", f"crontab.{group}", "yy", "-n", namespace, "-o", "jsonpath={.spec.image}"
    )


def test_categories_reach_kubectl_get_all(
    fresh_kubectl: Any, custom: client.CustomObjectsApi, group: str, namespace: str
) -> None:
    create(custom, group, namespace, "cat")
    out = fresh_kubectl("get", "all", "-n", namespace, "-o", "name")
    assert f"crontab.{group}/cat" in out.split()


def test_deleting_the_crd_removes_its_objects(
    api: client.ApiClient,
    ext: client.ApiextensionsV1Api,
    custom: client.CustomObjectsApi,
    group: str,
    namespace: str,
) -> None:
    create(custom, group, namespace, "gone1")
    create(custom, group, namespace, "gone2")
    ext.delete_custom_resource_definition(f"crontabs.{group}")

    def gone() -> bool:
        try:
            ext.read_custom_resource_definition(f"crontabs.{group}")
        except ApiException as err:
            return err.status == 404
        return False

    wait_for(gone)
    assert not served(api, group, "v1")
    # A CRD of the same name again starts empty.
    ext.create_custom_resource_definition(crd_body(group))
    wait_for(lambda: established(ext, f"crontabs.{group}") and served(api, group, "v1"))
    assert custom.list_namespaced_custom_object(group, "v1", namespace, "crontabs")["items"] == []


def test_several_versions_with_none_conversion(
    ext: client.ApiextensionsV1Api, api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str
) -> None:
    grp = f"m{uuid.uuid4().hex[:8]}.example.com"
    simple: Obj = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
    }
    versions = [
        {"name": "v1beta1", "served": True, "storage": False, "schema": {"openAPIV3Schema": simple}},
        {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": simple}},
    ]
    ext.create_custom_resource_definition(crd_body(grp, versions=versions))
    wait_for(lambda: established(ext, f"crontabs.{grp}") and served(api, grp, "v1beta1"))
    body = {
        "apiVersion": f"{grp}/v1beta1",
        "kind": "CronTab",
        "metadata": {"name": "mv"},
        "spec": {"size": 3},
    }
    made = custom.create_namespaced_custom_object(grp, "v1beta1", namespace, "crontabs", body)
    assert made["apiVersion"] == f"{grp}/v1beta1"
    as_v1 = custom.get_namespaced_custom_object(grp, "v1", namespace, "crontabs", "mv")
    assert as_v1["apiVersion"] == f"{grp}/v1" and as_v1["spec"] == {"size": 3}
    listed = custom.list_namespaced_custom_object(grp, "v1beta1", namespace, "crontabs")
    assert [i["apiVersion"] for i in listed["items"]] == [f"{grp}/v1beta1"]
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert groups[grp].preferred_version.version == "v1"
    assert [v.version for v in groups[grp].versions] == ["v1", "v1beta1"]
    delete_crd(ext, f"crontabs.{grp}")


def test_cluster_scoped_crd(
    ext: client.ApiextensionsV1Api, api: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    grp = f"c{uuid.uuid4().hex[:8]}.example.com"
    ext.create_custom_resource_definition(crd_body(grp, scope="Cluster"))
    wait_for(lambda: established(ext, f"crontabs.{grp}") and served(api, grp, "v1"))
    body = cron("cl")
    body["apiVersion"] = f"{grp}/v1"
    made = custom.create_cluster_custom_object(grp, "v1", "crontabs", body)
    assert "namespace" not in made["metadata"]
    assert [
        i["metadata"]["name"] for i in custom.list_cluster_custom_object(grp, "v1", "crontabs")["items"]
    ] == ["cl"]
    delete_crd(ext, f"crontabs.{grp}")


def test_name_conflict_is_not_accepted(ext: client.ApiextensionsV1Api, group: str) -> None:
    other = crd_body(group, plural="crontabs2", singular="crontab2")
    other["metadata"]["name"] = f"crontabs2.{group}"
    other["spec"]["names"]["plural"] = "crontabs2"
    ext.create_custom_resource_definition(other)

    def condition() -> Any:
        crd = ext.read_custom_resource_definition(f"crontabs2.{group}")
        return next((c for c in crd.status.conditions or [] if c.type == "NamesAccepted"), None)

    accepted = wait_for(condition)
    assert accepted.status == "False" and accepted.reason == "KindConflict"
    assert accepted.message == '"CronTab" is already in use'
    crd = ext.read_custom_resource_definition(f"crontabs2.{group}")
    assert not any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
    delete_crd(ext, f"crontabs2.{group}")


def test_non_structural_schema_lists_every_violation(ext: client.ApiextensionsV1Api) -> None:
    grp = f"n{uuid.uuid4().hex[:8]}.example.com"
    bad: Obj = {
        "type": "object",
        "properties": {
            "spec": {"properties": {"a": {"type": "string"}}},
            "list": {"type": "array"},
            "status": {"type": "object", "anyOf": [{"type": "object", "description": "x"}]},
        },
    }
    body = crd_body(
        grp, versions=[{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": bad}}]
    )
    with pytest.raises(ApiException) as err:
        ext.create_custom_resource_definition(body)
    assert err.value.status == 422
    status = error_of(err.value)
    at = "spec.versions[0].schema.openAPIV3Schema"
    messages = [f"{c['field']}: {c['message']}" for c in status["details"]["causes"]]
    assert messages == [
        f"{at}.properties[list].items: Required value: must be specified",
        f"{at}.properties[spec].type: Required value: must not be empty for specified object fields",
        f"{at}.properties[status].anyOf[0].description: Forbidden: must be empty to be structural",
        f"{at}.properties[status].anyOf[0].type: Forbidden: must be empty to be structural",
    ]
    assert status["message"].startswith(
        f'CustomResourceDefinition.apiextensions.k8s.io "crontabs.{grp}" is invalid: ['
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda b: b["metadata"].update(name="wrong.example.com"),
            'metadata.name: Invalid value: "wrong.example.com": must be spec.names.plural+"."+spec.group',
        ),
        (
            lambda b: b["spec"]["versions"][0].update(storage=False),
            "must have exactly one version marked as storage version",
        ),
        (
            lambda b: b["spec"]["versions"][0].pop("schema"),
            "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required",
        ),
        (
            lambda b: b["spec"].update(scope="Global"),
            'spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced"',
        ),
        (
            lambda b: b["spec"]["names"].update(shortNames=["Bad_Name"]),
            'spec.names.shortNames[0]: Invalid value: "Bad_Name"',
        ),
        (
            lambda b: b["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
                "x-kubernetes-validations"
            ].append({"rule": "self.replicas >"}),
            "x-kubernetes-validations[1].rule: Invalid value",
        ),
    ],
)
def test_invalid_crds_are_422(
    ext: client.ApiextensionsV1Api, change: Callable[[Obj], Any], message: str
) -> None:
    grp = f"i{uuid.uuid4().hex[:8]}.example.com"
    body = json.loads(json.dumps(crd_body(grp)))
    change(body)
    with pytest.raises(ApiException) as err:
        ext.create_custom_resource_definition(body)
    assert err.value.status == 422
    assert message in error_of(err.value)["message"]


RULED: Obj = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {
                    "rule": "self.size == oldSelf.size || self.size > oldSelf.size",
                    "message": "size may only grow",
                },
                {
                    "rule": "self.name.startsWith('x-')",
                    "messageExpression": "'name ' + self.name + ' must start with x-'",
                    "fieldPath": ".name",
                    "reason": "FieldValueForbidden",
                },
            ],
            "properties": {
                "size": {"type": "integer"},
                "name": {"type": "string"},
                "immutable": {
                    "type": "string",
                    "x-kubernetes-validations": [
                        {"rule": "self == oldSelf", "message": "Value is immutable"}
                    ],
                },
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}},
                },
                "items": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}, "v": {"type": "string"}},
                    },
                },
            },
        }
    },
}


@pytest.fixture
def ruled(ext: client.ApiextensionsV1Api, api: client.ApiClient) -> Iterator[str]:
    grp = f"x{uuid.uuid4().hex[:8]}.example.com"
    versions = [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": RULED}}]
    ext.create_custom_resource_definition(crd_body(grp, versions=versions))
    wait_for(lambda: established(ext, f"crontabs.{grp}") and served(api, grp, "v1"))
    yield grp
    delete_crd(ext, f"crontabs.{grp}")


def test_transition_rules_message_expression_field_path_and_reason(
    custom: client.CustomObjectsApi, ruled: str, namespace: str
) -> None:
    args = (ruled, "v1", namespace, "crontabs")
    body = {
        "apiVersion": f"{ruled}/v1",
        "kind": "CronTab",
        "metadata": {"name": "t"},
        "spec": {"size": 2, "name": "y", "immutable": "a"},
    }
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(*args, body)
    assert err.value.status == 422
    assert "spec.name: Forbidden: name y must start with x-" in error_of(err.value)["message"]
    body["spec"]["name"] = "x-y"
    custom.create_namespaced_custom_object(*args, body)  # transition rules are not evaluated on create
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(*args, "t", {"spec": {"size": 1}})
    assert 'spec: Invalid value: "object": size may only grow' in error_of(err.value)["message"]
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(*args, "t", {"spec": {"immutable": "b"}})
    assert 'spec.immutable: Invalid value: "string": Value is immutable' in error_of(err.value)["message"]
    grown = custom.patch_namespaced_custom_object(*args, "t", {"spec": {"size": 3}})
    assert grown["spec"]["size"] == 3 and grown["metadata"]["generation"] == 2


def test_embedded_resources_and_map_lists(
    api: client.ApiClient, custom: client.CustomObjectsApi, ruled: str, namespace: str
) -> None:
    args = (ruled, "v1", namespace, "crontabs")
    template = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "bogus": 1},
        "spec": {"x": "y", "drop": 1},
    }
    body = {
        "apiVersion": f"{ruled}/v1",
        "kind": "CronTab",
        "metadata": {"name": "e"},
        "spec": {"name": "x-e", "size": 1, "template": template},
    }
    made = custom.create_namespaced_custom_object(*args, body)
    assert made["spec"]["template"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"x": "y"},
    }
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(*args, "e", {"spec": {"items": [{"name": "a"}, {"name": "a"}]}})
    assert 'spec.items[1]: Duplicate value: {"name":"a"}' in error_of(err.value)["message"]
    # server-side apply merges map lists by their key, field managers apart
    apply = {
        "apiVersion": f"{ruled}/v1",
        "kind": "CronTab",
        "metadata": {"name": "e"},
        "spec": {"items": [{"name": "a", "v": "1"}]},
    }
    path = f"/apis/{ruled}/v1/namespaces/{namespace}/crontabs/e"
    code, answer = raw(
        api, "PATCH", path + "?fieldManager=one", json.dumps(apply), "application/apply-patch+yaml"
    )
    assert code == 200, answer
    apply["spec"]["items"] = [{"name": "b", "v": "2"}]
    code, merged = raw(
        api, "PATCH", path + "?fieldManager=two", json.dumps(apply), "application/apply-patch+yaml"
    )
    assert code == 200, merged
    assert merged["spec"]["items"] == [{"name": "a", "v": "1"}, {"name": "b", "v": "2"}]
    code, patched = raw(
        api,
        "PATCH",
        path,
        [{"op": "replace", "path": "/spec/name", "value": "x-j"}],
        "application/json-patch+json",
    )
    assert code == 200 and patched["spec"]["name"] == "x-j"


def test_deletecollection_and_terminating_crd_refuses_creates(
    ext: client.ApiextensionsV1Api, custom: client.CustomObjectsApi, group: str, namespace: str
) -> None:
    for name in ("d1", "d2"):
        create(custom, group, namespace, name)
    custom.delete_collection_namespaced_custom_object(group, "v1", namespace, "crontabs")
    wait_for(lambda: not custom.list_namespaced_custom_object(group, "v1", namespace, "crontabs")["items"])
    create(custom, group, namespace, "held")
    custom.patch_namespaced_custom_object(
        group, "v1", namespace, "crontabs", "held", {"metadata": {"finalizers": ["example.com/hold"]}}
    )
    ext.delete_custom_resource_definition(f"crontabs.{group}")

    def terminating() -> Any:
        crd = ext.read_custom_resource_definition(f"crontabs.{group}")
        return next(
            (c for c in crd.status.conditions if c.type == "Terminating" and c.status == "True"), None
        )

    cond = wait_for(terminating)
    assert cond.reason in ("InstanceDeletionPending", "InstanceDeletionInProgress")
    with pytest.raises(ApiException) as err:
        create(custom, group, namespace, "late")
    assert err.value.status == 405
    assert (
        error_of(err.value)["message"] == "create not allowed while custom resource definition is terminating"
    )
    custom.patch_namespaced_custom_object(
        group, "v1", namespace, "crontabs", "held", {"metadata": {"finalizers": None}}
    )

    def gone() -> bool:
        try:
            ext.read_custom_resource_definition(f"crontabs.{group}")
        except ApiException as e:
            return e.status == 404
        return False

    wait_for(gone)


def test_metadata_of_the_wrong_type_is_a_400(api: client.ApiClient, group: str, namespace: str) -> None:
    body = {
        "apiVersion": f"{group}/v1",
        "kind": "CronTab",
        "metadata": {"name": "m", "labels": ["a"]},
        "spec": {"cronSpec": "* * * * *"},
    }
    code, answer = raw(api, "POST", f"/apis/{group}/v1/namespaces/{namespace}/crontabs", body)
    assert code == 400 and answer["message"].startswith(
        'CronTab in version "v1" cannot be handled as a CronTab: '
    )
