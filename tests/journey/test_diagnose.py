"""Each boundary judged on recorded objects: the first stalled one is named, with its message."""

from __future__ import annotations

import datetime as dt

from journey import graph
from journey.dataplane import targets
from journey.diagnose import Facts, Probe, diagnose, render
from tests.journey import fixtures as fx

NOW = dt.datetime(2026, 12, 1, 10, 0, 30, tzinfo=dt.UTC)


def facts_for(root=None, **pools) -> Facts:
    journey = graph.build(root or fx.deployment(), fx.pools(**pools))
    return Facts(
        server="https://api",
        user={"username": "alice", "groups": ["system:authenticated"]},
        journey=journey,
        nodes={"node-1": fx.node()},
        leases={"node-1": fx.lease()},
        now=NOW,
    )


def waiting(reason: str, message: str) -> dict:
    p = fx.pod(ready=False)
    p["status"]["phase"] = "Pending"
    p["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": reason, "message": message}}
    return p


def test_healthy():
    verdict = diagnose(facts_for())
    assert verdict.status == "healthy" and verdict.exit_code == 0
    assert verdict.summary == "healthy: Deployment web, 1/1 pods ready"
    assert [f.state for f in verdict.findings][-1] == "skipped"  # the dataplane: nothing was tried


def test_api_unreachable():
    verdict = diagnose(Facts(server="https://api", api_error="Cannot connect to host api:443"))
    assert verdict.exit_code == 1 and verdict.stalled.boundary == "api"


def test_authentication():
    verdict = diagnose(Facts(server="https://api", auth_error="Unauthorized"))
    assert verdict.stalled.boundary == "authentication"


def test_authorization_names_the_denied_verb():
    facts = Facts(server="https://api", user={"username": "bob"}, denied=["list pods -n demo"])
    verdict = diagnose(facts)
    assert verdict.summary == "stalled at: authorization - bob may not list pods -n demo"
    assert "kubectl auth can-i list pods -n demo" in render(verdict, False)


def test_missing_object_cannot_tell():
    verdict = diagnose(
        Facts(server="https://api", user={"username": "a"}, missing="deployments.apps x not found")
    )
    assert verdict.status == "cannot tell" and verdict.exit_code == 2


def test_controller_behind_generation():
    d = fx.deployment(observedGeneration=1)
    d["metadata"]["generation"] = 2
    verdict = diagnose(facts_for(d))
    assert verdict.stalled.boundary == "controller"
    assert "has not observed generation 2 (observedGeneration 1)" in verdict.summary


def test_controller_progress_deadline():
    d = fx.deployment()
    d["status"]["conditions"][1] = {
        "type": "Progressing",
        "status": "False",
        "reason": "ProgressDeadlineExceeded",
        "message": 'ReplicaSet "web-7d9c" has timed out progressing.',
    }
    verdict = diagnose(facts_for(d))
    assert verdict.summary.startswith("stalled at: controller - Deployment web: ProgressDeadlineExceeded")


def failed_create(message: str) -> list[dict]:
    return [
        *fx.events(),
        fx.event(
            "r1",
            "ReplicaSet",
            "web-7d9c",
            "FailedCreate",
            "replicaset-controller",
            fx.T1,
            message,
            etype="Warning",
        ),
    ]


def test_controller_replica_failure_and_failed_create():
    d = fx.deployment()
    d["status"]["conditions"].append(
        {
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreate",
            "message": 'pods "web-7d9c-x" failed to fit in any node',
        }
    )
    verdict = diagnose(facts_for(d))
    assert verdict.stalled.boundary == "controller" and "failed to fit" in verdict.summary
    verdict = diagnose(facts_for(Event=failed_create("Error creating: Timeout: request did not complete")))
    assert verdict.stalled.boundary == "controller" and "FailedCreate - Error creating" in verdict.summary


def test_admission_refusals_in_events_conditions_and_the_audit_log():
    d = fx.deployment()
    d["status"]["conditions"].append(
        {
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreate",
            "message": 'pods "web-7d9c-x" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2',
        }
    )
    verdict = diagnose(facts_for(d))
    assert verdict.stalled.boundary == "admission" and "exceeded quota: q" in verdict.summary
    assert "ResourceQuota" in verdict.stalled.next_step
    webhook = 'Error creating: admission webhook "deny.example.com" denied the request: no'
    verdict = diagnose(facts_for(Event=failed_create(webhook)))
    assert verdict.stalled.boundary == "admission" and "deny.example.com" in verdict.summary
    assert "webhook" in verdict.stalled.next_step
    # RBAC forbidding the controller is authorization's, not admission's
    rbac = 'Error creating: pods "x" is forbidden: User "system:serviceaccount:kube-system:replicaset-controller" cannot create resource "pods"'
    verdict = diagnose(facts_for(Event=failed_create(rbac)))
    assert verdict.stalled.boundary == "authorization" and "cannot create resource" in verdict.summary
    # A root that does not exist because admission refused its creation (from the audit log).
    facts = Facts(
        server="https://api",
        user={"username": "a"},
        missing="deployments.apps web not found",
        rejections=[
            'create deployments/web by alice refused (400): admission webhook "x" denied the request: no'
        ],
    )
    verdict = diagnose(facts)
    assert verdict.status == "stalled" and verdict.stalled.boundary == "admission"


def test_controller_identity_denied_stalls_at_authorization():
    facts = facts_for()
    facts.controller_denied = [
        "system:serviceaccount:kube-system:replicaset-controller may not create pods -n demo"
    ]
    verdict = diagnose(facts)
    assert verdict.summary == (
        "stalled at: authorization - system:serviceaccount:kube-system:replicaset-controller may not create pods -n demo"
    )
    assert "system:controller:replicaset-controller" in verdict.stalled.next_step
    assert "--as=system:serviceaccount:kube-system:replicaset-controller" in verdict.stalled.next_step


def test_controller_needs_of_a_deployment_behind_a_service():
    from journey.diagnose import controller_needs

    journey = graph.build(fx.deployment(), fx.pools())
    needs = {n[0] for n in controller_needs(journey)}
    assert needs == {"deployment-controller", "replicaset-controller", "endpointslice-controller"}


def test_scheduling():
    p = fx.pod(ready=False)
    p["spec"].pop("nodeName")
    p["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.",
            }
        ],
    }
    verdict = diagnose(facts_for(Pod=[p]))
    assert verdict.summary == (
        "stalled at: scheduling - 0/1 nodes are available: 1 node(s) didn't match "
        "Pod's node affinity/selector."
    )
    assert verdict.exit_code == 1


def test_node_not_ready_and_stale_lease():
    facts = facts_for()
    facts.nodes["node-1"] = fx.node(ready="Unknown")
    verdict = diagnose(facts)
    assert verdict.stalled.boundary == "node" and "Ready=Unknown" in verdict.summary
    facts = facts_for()
    facts.leases["node-1"] = fx.lease(renew="2026-12-01T09:58:00.000000Z")
    verdict = diagnose(facts)
    assert "has not renewed its Lease for 150 s" in verdict.summary
    facts = facts_for()
    facts.nodes["node-1"] = fx.node(DiskPressure="True")
    assert "DiskPressure" in diagnose(facts).summary


def test_runtime_image_pull():
    p = waiting("ImagePullBackOff", 'Back-off pulling image "nope:1"')
    verdict = diagnose(facts_for(Pod=[p]))
    assert verdict.summary == (
        "stalled at: runtime - Pod web-7d9c-a container main: ImagePullBackOff - "
        'Back-off pulling image "nope:1"'
    )
    assert "image name" in verdict.stalled.next_step


def test_runtime_config_error():
    p = waiting("CreateContainerConfigError", 'secret "db" not found')
    verdict = diagnose(facts_for(Pod=[p]))
    assert verdict.stalled.boundary == "runtime" and 'secret "db" not found' in verdict.summary


def test_runtime_sandbox_error():
    p = waiting("ContainerCreating", "")
    evs = [
        *fx.events(),
        fx.event(
            "p1",
            "Pod",
            "web-7d9c-a",
            "FailedCreatePodSandBox",
            "kubelet",
            fx.T1,
            "Failed to create pod sandbox: cni failed",
            etype="Warning",
        ),
    ]
    verdict = diagnose(facts_for(Pod=[p], Event=evs))
    assert verdict.stalled.boundary == "runtime" and "cni failed" in verdict.summary


def test_probes():
    evs = [
        *fx.events(),
        fx.event(
            "p1",
            "Pod",
            "web-7d9c-a",
            "Unhealthy",
            "kubelet",
            fx.T1,
            "Readiness probe failed: cat: can't open '/tmp/ready'",
            count=7,
            etype="Warning",
        ),
    ]
    verdict = diagnose(
        facts_for(Pod=[fx.pod(ready=False)], Event=evs, EndpointSlice=[fx.endpointslice(ready=False)])
    )
    assert (
        verdict.summary
        == "stalled at: probes - web-7d9c-a: Readiness probe failed: cat: can't open '/tmp/ready'"
    )


def test_not_ready_without_failure_is_progress():
    verdict = diagnose(facts_for(Pod=[fx.pod(ready=False)], EndpointSlice=[fx.endpointslice(ready=False)]))
    assert verdict.stalled is not None and verdict.stalled.boundary == "endpoints"  # the Service shows it
    verdict = diagnose(facts_for(Pod=[fx.pod(ready=False)], Service=[]))
    assert verdict.status == "progressing" and verdict.exit_code == 0


def test_endpoints_selector_matches_nothing():
    svc = fx.service(selector={"app": "nothing"})
    verdict = diagnose(facts_for(svc, Service=[svc], EndpointSlice=[]))
    assert verdict.summary == "stalled at: endpoints - Service web: selector app=nothing matches no pods"


def test_endpoints_named_target_port_missing():
    svc = fx.service(target_port="metrics")
    verdict = diagnose(facts_for(svc, Service=[svc]))
    assert "targetPort metrics is not a named port" in verdict.summary


def test_endpoints_none_ready_though_pods_are():
    facts = facts_for(EndpointSlice=[])
    facts.now = NOW.replace(second=5)  # the pod became Ready 4 s ago: not yet a stall
    assert diagnose(facts).status == "healthy"
    verdict = diagnose(facts_for(EndpointSlice=[]))
    assert (
        verdict.summary == "stalled at: endpoints - Service web: no ready endpoints though 1 pods are Ready"
    )


def test_verbose_lists_every_boundary():
    text = render(diagnose(facts_for()), verbose=True)
    for boundary in (
        "api",
        "authentication",
        "authorization",
        "controller",
        "scheduling",
        "node",
        "runtime",
        "probes",
        "endpoints",
        "dataplane",
    ):
        assert f"] {boundary}:" in text


def probe(service: bool | None, endpoint: bool | None, note: str = "") -> Probe:
    return Probe(
        "Service web", "10.96.4.2:80", "10.0.0.5:8080", "web-7d9c-a", "node-1", service, endpoint, note
    )


def test_dataplane_traffic_that_arrives_is_ok():
    facts = facts_for()
    facts.probes = [probe(True, None)]
    verdict = diagnose(facts)
    assert verdict.status == "healthy"
    assert (
        verdict.findings[-1].state == "ok"
        and "Service web (10.96.4.2:80) answered" in verdict.findings[-1].message
    )


def test_dataplane_a_proxy_that_does_not_forward_stalls():
    facts = facts_for()
    facts.probes = [probe(False, True)]
    verdict = diagnose(facts)
    assert verdict.exit_code == 1 and verdict.stalled.boundary == "dataplane"
    assert verdict.summary == (
        "stalled at: dataplane - Service web: traffic to 10.96.4.2:80 does not arrive from pod web-7d9c-a, "
        "though its endpoint 10.0.0.5:8080 answers"
    )
    assert "service proxy on node node-1" in verdict.stalled.next_step


def test_dataplane_pods_that_do_not_listen_stall():
    facts = facts_for()
    facts.probes = [probe(False, False)]
    verdict = diagnose(facts)
    assert (
        verdict.stalled.boundary == "dataplane" and "neither 10.96.4.2:80 nor its endpoint" in verdict.summary
    )
    assert "targetPort" in verdict.stalled.next_step


def test_dataplane_untried_says_why():
    facts = facts_for()
    facts.probes = [probe(None, None, "could not run nc in pod web-7d9c-a: exit code 127")]
    assert (
        diagnose(facts).findings[-1].message
        == "Service web: could not run nc in pod web-7d9c-a: exit code 127"
    )
    facts = facts_for()
    facts.probes_note = "could not exec in pod web-7d9c-a: forbidden"
    assert diagnose(facts).findings[-1].message == facts.probes_note


def test_dataplane_targets_are_services_with_a_ready_endpoint_behind_a_tcp_port():
    svc = fx.service()
    svc["spec"]["clusterIP"] = "10.96.4.2"
    journey = graph.build(fx.deployment(), fx.pools(Service=[svc]))
    # The recorded slice has no ports: no endpoint port to try.
    assert targets(journey) == []
    eps = fx.endpointslice()
    eps["ports"] = [{"port": 8080, "protocol": "TCP"}]
    journey = graph.build(fx.deployment(), fx.pools(Service=[svc], EndpointSlice=[eps]))
    assert targets(journey) == [("Service web", "10.96.4.2", 80, "10.0.0.5", 8080)]
    svc["spec"]["clusterIP"] = "None"  # headless: no cluster address to try
    assert targets(graph.build(fx.deployment(), fx.pools(Service=[svc], EndpointSlice=[eps]))) == []
