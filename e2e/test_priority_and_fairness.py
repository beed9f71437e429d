"""API priority and fairness as every cluster has it: the mandatory FlowSchemas and
PriorityLevelConfigurations exist with upstream's fixed specs, and every API response names the schema
and level that classified it (X-Kubernetes-PF-FlowSchema-UID / -PriorityLevel-UID), consistently with
the stored objects. Only upstream's behaviour is asserted, so this passes against a genuine cluster."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from kubernetes import client

pytestmark = pytest.mark.integration


def test_mandatory_objects_exist_with_upstreams_specs(api_client: client.ApiClient) -> None:
    fc = client.FlowcontrolApiserverV1Api(api_client)
    exempt = fc.read_priority_level_configuration("exempt")
    assert exempt.spec.type == "Exempt"
    catch_all = fc.read_priority_level_configuration("catch-all")
    assert catch_all.spec.type == "Limited"
    assert catch_all.spec.limited.limit_response.type == "Reject"
    schema = fc.read_flow_schema("exempt")
    assert schema.spec.matching_precedence == 1
    assert schema.spec.priority_level_configuration.name == "exempt"
    assert [s.group.name for s in schema.spec.rules[0].subjects] == ["system:masters"]
    schema = fc.read_flow_schema("catch-all")
    assert schema.spec.matching_precedence == 10000
    assert schema.spec.distinguisher_method.type == "ByUser"
    assert {s.group.name for s in schema.spec.rules[0].subjects} == {
        "system:unauthenticated",
        "system:authenticated",
    }


def test_responses_name_the_schema_and_level_that_classified_them(api_client: client.ApiClient) -> None:
    fc = client.FlowcontrolApiserverV1Api(api_client)
    method, url, headers, body, _ = api_client.param_serialize(
        "GET", "/api/v1/namespaces/default", auth_settings=["BearerToken"]
    )
    response = api_client.call_api(method, url, headers, body)
    assert response.status == 200
    schema_uid = response.getheader("X-Kubernetes-PF-FlowSchema-UID")
    level_uid = response.getheader("X-Kubernetes-PF-PriorityLevel-UID")
    assert schema_uid and level_uid
    schemas = {s.metadata.uid: s for s in fc.list_flow_schema().items}
    levels = {p.metadata.uid: p for p in fc.list_priority_level_configuration().items}
    assert schemas[schema_uid].spec.priority_level_configuration.name == levels[level_uid].metadata.name


def test_kubectl_lists_them_with_upstreams_columns(kubeconfig: Path) -> None:
    def get(what: str) -> list[str]:
        proc = subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), "get", what],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()

    schemas = get("flowschemas")
    assert schemas[0].split() == [
        "NAME",
        "PRIORITYLEVEL",
        "MATCHINGPRECEDENCE",
        "DISTINGUISHERMETHOD",
        "AGE",
        "MISSINGPL",
    ]
    assert any(line.split()[:4] == ["exempt", "exempt", "1", "<none>"] for line in schemas[1:])
    levels = get("prioritylevelconfigurations")
    assert levels[0].split() == [
        "NAME",
        "TYPE",
        "NOMINALCONCURRENCYSHARES",
        "QUEUES",
        "HANDSIZE",
        "QUEUELENGTHLIMIT",
        "AGE",
    ]
    assert any(
        line.split()[:6] == ["exempt", "Exempt", "<none>", "<none>", "<none>", "<none>"]
        for line in levels[1:]
    )
