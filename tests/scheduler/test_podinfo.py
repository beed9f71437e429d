"""Pod requests (upstream's init-container, sidecar and overhead rule), quantities and image names."""

from __future__ import annotations

import pytest

from controlplane.scheduler.podinfo import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    normalize_image,
    pod_info,
    pod_requests,
    rebound,
)
from kubeclient.quantity import milli_value, parse_quantity, value


def c(cpu: str | None = None, memory: str | None = None, **extra):
    req = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "x", "resources": {"requests": req}, **extra}


@pytest.mark.parametrize(
    ("text", "milli", "units"),
    [
        ("100m", 100, 1),
        ("1", 1000, 1),
        ("0.5", 500, 1),
        ("1Gi", 2**30 * 1000, 2**30),
        ("128Mi", 128 * 2**20 * 1000, 128 * 2**20),
        ("1e3", 1_000_000, 1000),
        ("1k", 1_000_000, 1000),
        ("0.1m", 1, 1),
        ("2E", 2 * 10**21, 2 * 10**18),
        (3, 3000, 3),
    ],
)
def test_quantities(text, milli, units):
    assert milli_value(text) == milli
    assert value(text) == units


@pytest.mark.parametrize("bad", ["", "abc", "1Xi", "--1"])
def test_bad_quantities(bad):
    with pytest.raises(ValueError):
        parse_quantity(bad)


def test_containers_add_up():
    assert pod_requests({"containers": [c("100m", "1Gi"), c("200m", "1Gi")]}) == {
        "cpu": 300,
        "memory": 2 * 2**30,
    }


def test_init_containers_take_the_max_not_the_sum():
    spec = {"containers": [c("1")], "initContainers": [c("1500m"), c("2")]}
    assert pod_requests(spec)["cpu"] == 2000
    spec = {"containers": [c("3")], "initContainers": [c("1500m"), c("2")]}
    assert pod_requests(spec)["cpu"] == 3000


def test_sidecars_run_beside_everything_after_them():
    # sidecar 500m starts, then a 1 cpu init step runs beside it (1.5), then the app's 1 cpu beside it (1.5).
    spec = {"initContainers": [c("500m", restartPolicy="Always"), c("1")], "containers": [c("1")]}
    assert pod_requests(spec)["cpu"] == 1500
    # An init container before the sidecar does not run beside it.
    spec = {"initContainers": [c("2"), c("500m", restartPolicy="Always")], "containers": [c("100m")]}
    assert pod_requests(spec)["cpu"] == 2000


def test_overhead_and_pod_level_requests():
    spec = {"containers": [c("1", "1Gi")], "overhead": {"cpu": "250m", "memory": "120Mi"}}
    assert pod_requests(spec) == {"cpu": 1250, "memory": 2**30 + 120 * 2**20}
    spec = {"containers": [c("1")], "resources": {"requests": {"cpu": "3"}}}
    assert pod_requests(spec)["cpu"] == 3000


def test_nonzero_defaults_fill_missing_requests_only():
    spec = {"containers": [c(), c(cpu="0")]}
    nz = pod_requests(spec, nonzero=True)
    assert nz["cpu"] == DEFAULT_MILLI_CPU_REQUEST  # the explicit 0 stays 0
    assert nz["memory"] == 2 * DEFAULT_MEMORY_REQUEST
    assert pod_requests(spec) == {"cpu": 0}


def test_pod_info_collects_what_filters_need():
    info = pod_info(
        {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "uid": "u",
                "ownerReferences": [{"uid": "rs1", "controller": True}, {"uid": "x"}],
            },
            "spec": {
                "containers": [
                    {
                        "name": "a",
                        "image": "nginx",
                        "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}],
                    }
                ],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "nodeSelector": {"a": "b"},
                "priority": 7,
            },
        }
    )
    assert [(p.ip, p.protocol, p.port) for p in info.host_ports] == [("0.0.0.0", "TCP", 8080)]
    assert info.images == ("docker.io/library/nginx:latest",)
    assert info.priority == 7 and info.node_selector == {"a": "b"} and len(info.tolerations) == 1
    assert info.best_effort


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("docker.io/busybox:1", "docker.io/library/busybox:1"),
        ("library/busybox", "docker.io/library/busybox:latest"),
        ("127.0.0.1:5000/library/busybox:latest", "127.0.0.1:5000/library/busybox:latest"),
        ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.9"),
        ("localhost/img", "localhost/img:latest"),
    ],
)
def test_image_names_normalize(name, expected):
    assert normalize_image(name) == expected


def _pending() -> dict:  # type: ignore[type-arg]
    spread = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
    spread["labelSelector"] = {"matchLabels": {"app": "a"}}
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "labels": {"app": "a"},
            "resourceVersion": "5",
        },
        "spec": {
            "containers": [c("250m", "64Mi", image="busybox")],
            "topologySpreadConstraints": [spread],
            "tolerations": [{"key": "k", "operator": "Exists"}],
        },
        "status": {"phase": "Pending"},
    }


def test_a_pod_seen_again_bound_is_taken_from_what_was_parsed_and_equals_a_fresh_parse():
    known = pod_info(_pending())
    bound = _pending()
    bound["metadata"]["resourceVersion"] = "9"
    bound["spec"]["nodeName"] = "n1"
    bound["status"] = {
        "phase": "Running",
        "startTime": "2026-12-06T10:00:00Z",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
    }
    again = rebound(known, bound)
    assert again is not None and again == pod_info(bound)
    assert again.node_name == "n1" and again.phase == "Running" and again.obj is bound
    assert again.spread_hard is known.spread_hard  # the parsed parts are shared, not parsed again
    nominated = _pending()
    nominated["status"]["nominatedNodeName"] = "n2"
    assert rebound(known, nominated) == pod_info(nominated)


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p["metadata"]["labels"].update(app="b"),
        lambda p: p["metadata"].update(deletionTimestamp="2026-12-06T10:00:00Z"),
        lambda p: p["metadata"].update(uid="u2"),
        lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu="1"),
        lambda p: p["spec"].update(priority=5),
        lambda p: p["spec"].pop("tolerations"),
        lambda p: p["spec"].update(schedulingGates=[{"name": "g"}]),
    ],
)
def test_anything_else_changed_means_parsing_again(change):
    known = pod_info(_pending())
    changed = _pending()
    change(changed)
    assert rebound(known, changed) is None
