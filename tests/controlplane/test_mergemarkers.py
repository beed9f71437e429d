"""The merge markers table (mergemarkers.json, generated from upstream's 1.32 OpenAPI by
gen_mergemarkers.py) holds upstream's facts, and the schemas strategic merge patch and server-side apply
build from it key lists as upstream does."""

from __future__ import annotations

from controlplane.apiserver import gen_mergemarkers, smp_schema, ssa
from controlplane.apiserver.patch import strategic_merge
from controlplane.apiserver.smp_schema import ATOMIC, ListSpec, markers

CORE = "io.k8s.api.core.v1."


def field(type_name: str, name: str) -> dict:
    return markers(type_name)["fields"][name]


def test_table_holds_upstreams_list_keys() -> None:
    assert field(CORE + "PodSpec", "containers") == {
        "items": CORE + "Container",
        "keys": ["name"],
        "list": "map",
        "mergeKey": "name",
        "strategy": "merge",
    }
    ports = field(CORE + "Container", "ports")
    assert (ports["keys"], ports["mergeKey"], ports["defaults"]) == (
        ["containerPort", "protocol"],
        "containerPort",
        {"protocol": "TCP"},
    )
    service_ports = field(CORE + "ServiceSpec", "ports")
    assert (service_ports["keys"], service_ports["mergeKey"]) == (["port", "protocol"], "port")
    assert field(CORE + "Container", "env")["keys"] == ["name"]
    assert field(CORE + "PodSpec", "volumes")["keys"] == ["name"]
    assert field(CORE + "PodSpec", "volumes")["strategy"] == "merge,retainKeys"
    assert field(CORE + "PodSpec", "topologySpreadConstraints")["keys"] == [
        "topologyKey",
        "whenUnsatisfiable",
    ]
    assert field(CORE + "PodSpec", "tolerations") == {"list": "atomic"}
    assert field(CORE + "Container", "args") == {"list": "atomic"}
    assert field(CORE + "PodSpec", "nodeSelector") == {"map": "atomic"}
    assert field(CORE + "ServiceSpec", "selector") == {"map": "atomic"}
    meta = "io.k8s.apimachinery.pkg.apis.meta.v1."
    assert field(meta + "ObjectMeta", "finalizers") == {"list": "set", "strategy": "merge"}
    assert markers(meta + "LabelSelector") == {"atomic": True}
    assert markers(CORE + "ObjectReference") == {"atomic": True}
    assert field(CORE + "PersistentVolumeSpec", "claimRef")["map"] == "granular"
    assert smp_schema.root_type("apps", "v1", "Deployment") == "io.k8s.api.apps.v1.Deployment"
    assert smp_schema.root_type("", "v1", "Pod") == CORE + "Pod"


def test_the_two_views_differ_where_upstream_does() -> None:
    patch = smp_schema.patch_schema("apps", "v1", "Deployment")
    apply = smp_schema.apply_schema("apps", "v1", "Deployment")
    pod_patch, pod_apply = patch["spec"]["template"]["spec"], apply["spec"]["template"]["spec"]
    assert pod_patch["containers"].item["ports"].keys == ("containerPort",)
    assert pod_apply["containers"].item["ports"].keys == ("containerPort", "protocol")
    assert "tolerations" not in pod_patch and "tolerations" not in pod_apply  # atomic: replaced whole
    assert apply["spec"]["selector"] is ATOMIC and "selector" not in patch["spec"]
    assert pod_apply["nodeSelector"] is ATOMIC
    assert patch["status"]["conditions"].keys == ("type",)
    assert smp_schema.apply_schema("", "v1", "Node")["spec"]["podCIDRs"] == ListSpec(())
    # A kind upstream lacks: metadata's lists only.
    assert smp_schema.apply_schema("example.com", "v1", "Nothing") == smp_schema.OBJECT


def deployment(*ports: dict) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "ports": list(ports)}]}}},
    }


def test_apply_keys_ports_by_port_and_protocol() -> None:
    schema = smp_schema.apply_schema("apps", "v1", "Deployment")
    udp, tcp = {"containerPort": 53, "protocol": "UDP"}, {"containerPort": 53}
    live = ssa.apply(None, deployment(udp, tcp), "a", schema=schema)
    fields = live["metadata"]["managedFields"][0]["fieldsV1"]
    container = fields["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"c"}']
    # A port that leaves its protocol out is the TCP port (the key's default).
    assert set(container["f:ports"]) == {
        'k:{"containerPort":53,"protocol":"UDP"}',
        'k:{"containerPort":53,"protocol":"TCP"}',
    }
    again = ssa.apply(live, deployment(udp, tcp), "a", schema=schema)
    assert again["spec"]["template"]["spec"]["containers"][0]["ports"] == [udp, {**tcp, "protocol": "TCP"}]
    # Dropping the UDP port from the configuration removes that one port only.
    only_tcp = ssa.apply(again, deployment(tcp), "a", schema=schema)
    assert only_tcp["spec"]["template"]["spec"]["containers"][0]["ports"] == [
        {"containerPort": 53, "protocol": "TCP"}
    ]


def test_apply_replaces_an_atomic_selector_whole() -> None:
    schema = smp_schema.apply_schema("apps", "v1", "Deployment")
    first = deployment()
    first["spec"]["selector"] = {"matchLabels": {"a": "1"}}
    live = ssa.apply(None, first, "a", schema=schema)
    assert live["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:selector"] == {}
    second = deployment()
    second["spec"]["selector"] = {"matchLabels": {"b": "2"}}
    assert ssa.apply(live, second, "a", schema=schema)["spec"]["selector"] == {"matchLabels": {"b": "2"}}


def test_strategic_merge_keeps_upstreams_single_merge_key() -> None:
    """Strategic merge patch merges a container's ports by containerPort alone, as upstream's struct tag."""
    schema = smp_schema.patch_schema("apps", "v1", "Deployment")
    live = deployment({"containerPort": 53, "protocol": "UDP"}, {"containerPort": 80, "protocol": "TCP"})
    patch = {
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 53, "name": "dns"}]}]}
            }
        }
    }
    merged = strategic_merge(live, patch, schema)
    assert merged["spec"]["template"]["spec"]["containers"][0]["ports"] == [
        {"containerPort": 53, "protocol": "UDP", "name": "dns"},
        {"containerPort": 80, "protocol": "TCP"},
    ]


def test_generator_keeps_marked_types_and_what_leads_to_them() -> None:
    ref = "#/$defs/"
    definitions = {
        "x.Kind": {
            "x-kubernetes-group-version-kind": [{"group": "x", "version": "v1", "kind": "Kind"}],
            "properties": {"spec": {"$ref": ref + "x.Spec"}, "plain": {"$ref": ref + "x.Plain"}},
        },
        "x.Spec": {
            "properties": {
                "ports": {
                    "items": {"$ref": ref + "io.k8s.api.core.v1.ContainerPort"},
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                },
                "ref": {"$ref": ref + "x.Ref"},
            }
        },
        "x.Ref": {"x-kubernetes-map-type": "atomic", "properties": {"name": {"type": "string"}}},
        "x.Plain": {"properties": {"name": {"type": "string"}}},
        "io.k8s.api.core.v1.ContainerPort": {"properties": {"containerPort": {}, "protocol": {}}},
    }
    table = gen_mergemarkers.generate(definitions)
    assert table["kinds"] == {"x/v1/Kind": "x.Kind"}
    assert set(table["types"]) == {"x.Kind", "x.Spec", "x.Ref"}
    assert table["types"]["x.Kind"] == {"fields": {"spec": {"ref": "x.Spec"}}}
    assert table["types"]["x.Spec"]["fields"]["ports"] == {
        "list": "map",
        "keys": ["containerPort", "protocol"],
        "defaults": {"protocol": "TCP"},
    }
