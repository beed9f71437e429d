"""The clusterrole-aggregation controller against the real server, on its own service account: the
bootstrap admin/edit/view roles fill from the system:aggregate-to-* roles, a newly labelled role joins
them, a removed one leaves; rules come in name order, each once; the aggregated roles' rules are written
by server-side apply under the controller's field manager."""

from __future__ import annotations

import uuid

from kubernetes import client

from pykubelet.rig.apiserver import ApiServer
from tests.controllers.conftest import eventually, running


def resources(rbac: client.RbacAuthorizationV1Api, name: str) -> list[str]:
    return [r for rule in rbac.read_cluster_role(name).rules or [] for r in rule.resources or []]


async def test_admin_edit_view_are_aggregated_and_follow_changes(
    apiserver: ApiServer, api: client.ApiClient
) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    label = f"aggregate-{uuid.uuid4().hex[:6]}"
    async with running(apiserver, "clusterrole-aggregation"):
        await eventually(
            lambda: "pods/log" in resources(rbac, "view"), what="view to gather system:aggregate-to-view"
        )
        await eventually(
            lambda: "secrets" in resources(rbac, "edit") and "pods/log" in resources(rbac, "edit"),
            what="edit to gather aggregate-to-edit and view",
        )
        await eventually(
            lambda: "rolebindings" in resources(rbac, "admin") and "secrets" in resources(rbac, "admin"),
            what="admin to gather edit and aggregate-to-admin",
        )
        managers = [m.manager for m in rbac.read_cluster_role("view").metadata.managed_fields or []]
        assert "clusterrole-aggregation-controller" in managers

        # A custom aggregated role and two roles it selects: their rules in name order, duplicates once.
        rule_a = client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get"])
        rule_b = client.V1PolicyRule(api_groups=[""], resources=["secrets"], verbs=["list"])
        rbac.create_cluster_role(
            client.V1ClusterRole(
                metadata=client.V1ObjectMeta(name=f"{label}-target"),
                aggregation_rule=client.V1AggregationRule(
                    cluster_role_selectors=[
                        client.V1LabelSelector(match_labels={"example.com/aggregate": label})
                    ]
                ),
            )
        )
        for name, rules in ((f"{label}-b", [rule_b, rule_a]), (f"{label}-a", [rule_a])):
            rbac.create_cluster_role(
                client.V1ClusterRole(
                    metadata=client.V1ObjectMeta(name=name, labels={"example.com/aggregate": label}),
                    rules=rules,
                )
            )
        await eventually(
            lambda: resources(rbac, f"{label}-target") == ["configmaps", "secrets"],
            what="the target to hold a's rule, then b's new one",
        )
        rbac.delete_cluster_role(f"{label}-a")
        rbac.patch_cluster_role(f"{label}-b", {"metadata": {"labels": {"example.com/aggregate": None}}})
        await eventually(lambda: resources(rbac, f"{label}-target") == [], what="the target to lose both")
        for name in (f"{label}-target", f"{label}-b"):
            rbac.delete_cluster_role(name)
