"""Local APIServices for the built-in group/versions, as kube-aggregator's autoregister keeps them: after
start `kubectl get apiservices` lists `v1.`, `v1.apps`, `v2.autoscaling`, ... as Local and Available
(upstream's priorities, the automanaged label, `service` null); a restart deletes an automanaged one for
a version no longer served and puts back a changed priority, and never touches an APIService a user made."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import pytest
from kubernetes import client

from controlplane.apiserver import kinds
from controlplane.apiserver.aggregator.autoregister import AUTOMANAGED, PRIORITIES
from e2e import waiting
from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration  # real servers, etcd or processes

eventually = functools.partial(waiting.wait_for, interval=0.2)


def _table(apiserver: ApiServer) -> dict[str, list[str]]:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(apiserver.kubeconfig), "get", "apiservices", "--no-headers"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done
    return {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}


def test_every_built_in_version_is_a_local_available_apiservice(apiserver: ApiServer) -> None:
    served = [("", "v1"), *kinds.groups()]
    expected = {f"{v}.{g}" for g, v in served if (g, v) in PRIORITIES}
    assert {"v1.", "v1.apps", "v1.batch", "v2.autoscaling", "v1.autoscaling"} <= expected

    def listed() -> dict[str, list[str]] | None:
        table = _table(apiserver)
        rows = {n: table.get(n) for n in expected}
        return table if all(r is not None and r[:2] == ["Local", "True"] for r in rows.values()) else None

    table = eventually(listed, timeout=30)
    assert isinstance(table, dict)
    assert "v1.apiregistration.k8s.io" not in table  # not in upstream's table, so never registered
    with apiserver.api_client() as api:
        core = client.ApiregistrationV1Api(api).read_api_service("v1.")
        assert (core.spec.group, core.spec.version, core.spec.service) == ("", "v1", None)
        assert (core.spec.group_priority_minimum, core.spec.version_priority) == (18000, 1)
        assert core.metadata.labels == {AUTOMANAGED: "onstart"}
        (cond,) = core.status.conditions
        assert (cond.type, cond.status, cond.reason) == ("Available", "True", "Local")
        # upstream's discovery order follows the priorities: the core group first, then apps
        raw = subprocess.run(
            ["kubectl", "--kubeconfig", str(apiserver.kubeconfig), "get", "--raw", "/apis"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        groups = [g["name"] for g in json.loads(raw.stdout)["groups"]]
        assert groups.index("apps") < groups.index("batch")


def test_a_restart_keeps_the_set_in_step_and_leaves_users_alone(tmp_path: Path) -> None:
    server = ApiServer(tmp_path / "apiserver")
    server.start()
    try:
        with server.api_client() as api:
            reg = client.ApiregistrationV1Api(api)
            eventually(lambda: _table(server).get("v1.batch"), timeout=30)
            for name, label in (("v1beta1.batch", "onstart"), ("v1beta1.policy", None)):
                reg.create_api_service(
                    client.V1APIService(
                        metadata=client.V1ObjectMeta(
                            name=name, labels={AUTOMANAGED: label} if label else None
                        ),
                        spec=client.V1APIServiceSpec(
                            group=name.split(".", 1)[1],
                            version="v1beta1",
                            group_priority_minimum=100,
                            version_priority=1,
                        ),
                    )
                )
            reg.patch_api_service("v1.apps", {"spec": {"groupPriorityMinimum": 5}})
        server.stop()
        server.start()
        with server.api_client() as api:
            reg = client.ApiregistrationV1Api(api)
            names = {s.metadata.name for s in reg.list_api_service().items}
            assert "v1beta1.batch" not in names and "v1beta1.policy" in names
            assert reg.read_api_service("v1.apps").spec.group_priority_minimum == 17800
    finally:
        server.stop()
