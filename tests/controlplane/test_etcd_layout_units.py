"""Each served resource's etcd path is kube-apiserver's, as the kinds declare it (Kind.etcd_prefix) and the
store's KeyLayout applies it both ways; the older pykubelet layout the start-time move reads from."""

from __future__ import annotations

import pytest

from controlplane.apiserver.kindparts import builtin_table
from controlplane.storage.etcdkeys import KeyLayout
from controlplane.storage.etcdrelayout import legacy_name

# Upstream's facts, per (group, resource) stored by kube-apiserver 1.32, below --etcd-prefix:
# - kubernetes/kubernetes pkg/kubeapiserver/default_storage_factory_builder.go, SpecialDefaultResourcePrefixes
#   (controllers, services/endpoints, minions, services/specs) and the cohabitating events.k8s.io events;
# - staging/src/k8s.io/apiserver/pkg/server/storage/storage_factory.go, DefaultStorageFactory.ResourcePrefix:
#   every other resource of kube-apiserver's storage factory under its lower-case resource name, no group;
# - kube-aggregator and apiextensions-apiserver store through the generic options' RESTOptionsGetter
#   (staging/src/k8s.io/apiserver/pkg/server/options/etcd.go: ResourcePrefix group + "/" + resource), and
#   custom resources through CRDRESTOptionsGetter (staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/
#   customresource_handler.go: resource.Group + "/" + resource.Resource).
UPSTREAM = {
    ("", "namespaces"): "namespaces",
    ("", "nodes"): "minions",
    ("", "pods"): "pods",
    ("", "podtemplates"): "podtemplates",
    ("", "replicationcontrollers"): "controllers",
    ("", "events"): "events",
    ("", "configmaps"): "configmaps",
    ("", "secrets"): "secrets",
    ("", "serviceaccounts"): "serviceaccounts",
    ("", "services"): "services/specs",
    ("", "endpoints"): "services/endpoints",
    ("", "persistentvolumes"): "persistentvolumes",
    ("", "persistentvolumeclaims"): "persistentvolumeclaims",
    ("", "limitranges"): "limitranges",
    ("", "resourcequotas"): "resourcequotas",
    ("apiregistration.k8s.io", "apiservices"): "apiregistration.k8s.io/apiservices",
    ("apps", "deployments"): "deployments",
    ("apps", "replicasets"): "replicasets",
    ("apps", "controllerrevisions"): "controllerrevisions",
    ("apps", "daemonsets"): "daemonsets",
    ("apps", "statefulsets"): "statefulsets",
    ("events.k8s.io", "events"): "events",
    ("autoscaling", "horizontalpodautoscalers"): "horizontalpodautoscalers",
    ("batch", "jobs"): "jobs",
    ("batch", "cronjobs"): "cronjobs",
    ("policy", "poddisruptionbudgets"): "poddisruptionbudgets",
    ("rbac.authorization.k8s.io", "clusterrolebindings"): "clusterrolebindings",
    ("rbac.authorization.k8s.io", "clusterroles"): "clusterroles",
    ("rbac.authorization.k8s.io", "rolebindings"): "rolebindings",
    ("rbac.authorization.k8s.io", "roles"): "roles",
    ("scheduling.k8s.io", "priorityclasses"): "priorityclasses",
    ("coordination.k8s.io", "leases"): "leases",
    ("node.k8s.io", "runtimeclasses"): "runtimeclasses",
    ("discovery.k8s.io", "endpointslices"): "endpointslices",
    ("certificates.k8s.io", "certificatesigningrequests"): "certificatesigningrequests",
    ("storage.k8s.io", "storageclasses"): "storageclasses",
    ("networking.k8s.io", "ingresses"): "ingress",
    ("networking.k8s.io", "ingressclasses"): "ingressclasses",
    ("networking.k8s.io", "networkpolicies"): "networkpolicies",
    ("storage.k8s.io", "csidrivers"): "csidrivers",
    ("storage.k8s.io", "csinodes"): "csinodes",
    ("storage.k8s.io", "csistoragecapacities"): "csistoragecapacities",
    ("storage.k8s.io", "volumeattachments"): "volumeattachments",
    ("flowcontrol.apiserver.k8s.io", "flowschemas"): "flowschemas",
    ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"): "prioritylevelconfigurations",
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): "mutatingwebhookconfigurations",
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"): "validatingadmissionpolicies",
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
    ): "validatingadmissionpolicybindings",
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): "validatingwebhookconfigurations",
    ("apiextensions.k8s.io", "customresourcedefinitions"): "apiextensions.k8s.io/customresourcedefinitions",
}


def test_every_stored_kind_is_where_kube_apiserver_keeps_it() -> None:
    table = builtin_table()
    layout = table.etcd_layout()
    stored = {(k.group, k.plural): k for k in table if k.stored}
    assert set(stored) == set(UPSTREAM), "a stored kind without upstream's fact here, or one no longer served"
    for gr, path in UPSTREAM.items():
        kind = stored[gr]
        # Kinds kept as another kind (events.k8s.io Events, autoscaling/v1 HPAs) are where that kind is.
        assert layout.name(kind.bucket) == path, gr
        ns = "ns" if kind.namespaced else ""
        key = kind.key(ns, "x")
        etcd_key = f"/registry/{path}/{ns + '/' if ns else ''}x"
        assert layout.to_etcd(key) == etcd_key, gr
        assert layout.from_etcd(etcd_key) == key, gr


def test_custom_resources_are_under_their_group_and_plural() -> None:
    layout = builtin_table().etcd_layout()
    assert layout.to_etcd("/widgets.example.com/ns/w") == "/registry/example.com/widgets/ns/w"
    assert layout.from_etcd("/registry/example.com/widgets/ns/w") == "/widgets.example.com/ns/w"
    assert layout.to_etcd("/widgets.example.com/", "/p/") == "/p/example.com/widgets/"
    # a cluster-scoped one, and a group that holds another's name
    assert layout.from_etcd("/registry/apps.example.com/deployments/d") == "/deployments.apps.example.com/d"


def test_the_stores_own_records_keep_their_names() -> None:
    layout = KeyLayout()
    for key in ("/ranges/serviceips", "/masterleases/10.0.0.1"):
        assert layout.from_etcd(layout.to_etcd(key)) == key
        assert layout.to_etcd(key) == "/registry" + key


def test_two_buckets_never_share_a_path() -> None:
    with pytest.raises(ValueError, match="both be stored under events"):
        KeyLayout({"events": "events", "events.events.k8s.io": "events"})


def test_the_resources_the_older_layout_kept_elsewhere() -> None:
    """Eleven that older stores hold, and the kinds served since (CSI, Ingress, NetworkPolicy: no older store has them;
    an older layout would have named them so too)."""
    table = builtin_table()
    layout = table.etcd_layout()
    moved = sorted(b for b in table.stored_buckets() if legacy_name(b) != layout.name(b))
    assert moved == [
        "apiservices.apiregistration.k8s.io",
        "certificatesigningrequests.certificates.k8s.io",
        "csidrivers.storage.k8s.io",
        "csinodes.storage.k8s.io",
        "csistoragecapacities.storage.k8s.io",
        "customresourcedefinitions.apiextensions.k8s.io",
        "flowschemas.flowcontrol.apiserver.k8s.io",
        "horizontalpodautoscalers.autoscaling",
        "ingressclasses.networking.k8s.io",
        "ingresses.networking.k8s.io",
        "mutatingwebhookconfigurations.admissionregistration.k8s.io",
        "networkpolicies.networking.k8s.io",
        "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io",
        "storageclasses.storage.k8s.io",
        "validatingadmissionpolicies.admissionregistration.k8s.io",
        "validatingadmissionpolicybindings.admissionregistration.k8s.io",
        "validatingwebhookconfigurations.admissionregistration.k8s.io",
        "volumeattachments.storage.k8s.io",
    ]
    assert legacy_name("widgets.example.com") != layout.name("widgets.example.com")
