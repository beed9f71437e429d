"""The cache's assume/confirm/forget bookkeeping, and reading a KubeSchedulerConfiguration."""

from __future__ import annotations

import pytest

from controlplane.scheduler.cache import SchedulerCache
from controlplane.scheduler.config import DEFAULT_SCORE_WEIGHTS, config_from_dict, load_config
from controlplane.scheduler.plugins import build_scores
from tests.scheduler.helpers import make_pod


def node_obj(name, images=()):
    return {
        "metadata": {"name": name},
        "status": {
            "allocatable": {"cpu": "2", "memory": "1Gi", "pods": "10"},
            "images": [{"names": [i], "sizeBytes": 1} for i in images],
        },
    }


def test_assume_confirm_forget():
    cache = SchedulerCache()
    cache.set_node(node_obj("a"))
    pod = make_pod(cpu="1")
    cache.assume(pod, "a")
    assert cache.is_assumed(pod.uid) and cache.node("a").requested["cpu"] == 1000
    cache.forget(pod.uid)
    assert not cache.has_pod(pod.uid) and cache.node("a").requested["cpu"] == 0
    cache.assume(pod, "a")
    pod.node_name = "a"
    cache.set_pod(pod)  # the watch confirms: counted once, no longer assumed
    assert not cache.is_assumed(pod.uid) and cache.node("a").requested["cpu"] == 1000
    cache.forget(pod.uid)  # a late failure report cannot undo a confirmed pod
    assert cache.has_pod(pod.uid)
    assert cache.remove_pod(pod.uid) and cache.node("a").requested["cpu"] == 0


def test_pods_on_unknown_nodes_are_kept_but_not_offered():
    cache = SchedulerCache()
    pod = make_pod(cpu="1", nodeName="later")
    cache.set_pod(pod)
    assert cache.nodes() == []
    cache.set_node(node_obj("later"))
    assert [n.name for n in cache.nodes()] == ["later"]
    assert cache.node("later").requested["cpu"] == 1000
    cache.remove_node("later")
    assert cache.nodes() == [] and cache.node("later") is not None  # still holds the pod
    cache.remove_pod(pod.uid)
    assert cache.node("later") is None


def test_image_spread_counts():
    cache = SchedulerCache()
    cache.set_node(node_obj("a", ["busybox"]))
    cache.set_node(node_obj("b", ["docker.io/library/busybox:latest"]))
    assert cache.image_nodes["docker.io/library/busybox:latest"] == 2
    cache.set_node(node_obj("b"))
    assert cache.image_nodes["docker.io/library/busybox:latest"] == 1


def test_defaults_match_upstream_weights():
    cfg = load_config(None)
    assert cfg.scoring_strategy == "LeastAllocated" and cfg.backoff_initial == 1 and cfg.backoff_max == 10
    assert {s.plugin.name: s.weight for s in build_scores(cfg)} == DEFAULT_SCORE_WEIGHTS


def test_config_file(tmp_path):
    path = tmp_path / "sched.yaml"
    path.write_text("""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 20
profiles:
- schedulerName: my-scheduler
  plugins:
    score:
      disabled: [{name: NodeResourcesBalancedAllocation}]
      enabled: [{name: ImageLocality, weight: 5}, {name: PodTopologySpread, weight: 4}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources: [{name: cpu, weight: 2}, {name: memory, weight: 1}]
""")
    cfg = load_config(path)
    assert cfg.scheduler_name == "my-scheduler"
    assert (cfg.backoff_initial, cfg.backoff_max) == (2, 20)
    assert cfg.scoring_strategy == "MostAllocated" and cfg.resource_weights == [("cpu", 2), ("memory", 1)]
    weights = {s.plugin.name: s.weight for s in build_scores(cfg)}
    assert "NodeResourcesBalancedAllocation" not in weights
    assert weights["ImageLocality"] == 5 and weights["PodTopologySpread"] == 4


@pytest.mark.parametrize(
    "doc",
    [
        {"profiles": [{"plugins": {"score": {"enabled": [{"name": "NoSuchPlugin"}]}}}]},
        {
            "profiles": [
                {
                    "pluginConfig": [
                        {
                            "name": "NodeResourcesFit",
                            "args": {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
                        }
                    ]
                }
            ]
        },
        {"podInitialBackoffSeconds": 5, "podMaxBackoffSeconds": 1},
    ],
)
def test_bad_config_is_refused(doc):
    with pytest.raises(ValueError):
        config_from_dict(doc)


@pytest.mark.parametrize(
    ("text", "seconds"), [("15s", 15), ("500ms", 0.5), ("1m30s", 90), ("2h", 7200), (3, 3)]
)
def test_durations(text, seconds):
    from controlplane.scheduler.config import parse_duration

    assert parse_duration(text) == seconds


def test_leader_election_settings():
    cfg = config_from_dict(
        {
            "leaderElection": {
                "leaderElect": True,
                "leaseDuration": "4s",
                "renewDeadline": "3s",
                "retryPeriod": "1s",
                "resourceName": "other",
            }
        }
    )
    le = cfg.leader_election
    assert (le.enabled, le.lease_duration, le.renew_deadline, le.retry_period, le.name) == (
        True,
        4,
        3,
        1,
        "other",
    )
    assert load_config(None).leader_election.enabled  # on by default, as upstream
    with pytest.raises(ValueError):
        config_from_dict({"leaderElection": {"leaseDuration": "2s", "renewDeadline": "5s"}})
    with pytest.raises(ValueError):
        config_from_dict({"leaderElection": {"leaseDuration": "15"}})


def test_profiles_each_with_their_scoring_and_unique_names():
    doc = {
        "profiles": [
            {"schedulerName": "default-scheduler"},
            {
                "schedulerName": "packer",
                "plugins": {"score": {"disabled": [{"name": "PodTopologySpread"}]}},
                "pluginConfig": [
                    {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
                ],
            },
        ]
    }
    cfg = config_from_dict(doc)
    first, packer = cfg.all_profiles()
    assert (cfg.scheduler_name, first.scoring_strategy) == ("default-scheduler", "LeastAllocated")
    assert (packer.scheduler_name, packer.scoring_strategy) == ("packer", "MostAllocated")
    assert "PodTopologySpread" not in {s.plugin.name for s in build_scores(packer)}
    assert "PodTopologySpread" in {s.plugin.name for s in build_scores(first)}
    with pytest.raises(ValueError, match="duplicate schedulerName"):
        config_from_dict({"profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}]})


def test_percentage_of_nodes_to_score_top_level_and_per_profile():
    cfg = config_from_dict(
        {
            "percentageOfNodesToScore": 30,
            "profiles": [{"schedulerName": "a"}, {"schedulerName": "b", "percentageOfNodesToScore": 70}],
        }
    )
    assert cfg.percentage_of_nodes_to_score == 30
    assert [p.percentage_of_nodes_to_score for p in cfg.profiles] == [None, 70]
    with pytest.raises(
        ValueError, match=r"^percentageOfNodesToScore: Invalid value: 101: not in valid range \[0-100\]$"
    ):
        config_from_dict({"percentageOfNodesToScore": 101})
    with pytest.raises(
        ValueError, match=r"^profiles\[1\]\.percentageOfNodesToScore: Invalid value: -1: not in valid range"
    ):
        config_from_dict(
            {"profiles": [{"schedulerName": "a"}, {"schedulerName": "b", "percentageOfNodesToScore": -1}]}
        )


def _fit_args(strategy: dict) -> dict:
    return {
        "profiles": [{"pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": strategy}}]}]
    }


def test_requested_to_capacity_ratio_profile_and_upstreams_validation_texts():
    """NodeResourcesFit's third scoring strategy: the shape reaches the scorer; a bad shape or weight gets
    upstream's validateFunctionShape / validateResources texts on the field."""
    cfg = config_from_dict(
        _fit_args(
            {
                "type": "RequestedToCapacityRatio",
                "resources": [{"name": "cpu", "weight": 2}, {"name": "memory"}],
                "requestedToCapacityRatio": {
                    "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
                },
            }
        )
    )
    (profile,) = cfg.all_profiles()
    assert (profile.scoring_strategy, profile.scoring_shape) == (
        "RequestedToCapacityRatio",
        [(0, 0), (100, 10)],
    )
    assert profile.resource_weights == [("cpu", 2), ("memory", 1)]
    (fit,) = [s.plugin for s in build_scores(profile) if s.plugin.name == "NodeResourcesFit"]
    assert fit.strategy == "RequestedToCapacityRatio"
    where = r"profiles\[0\]\.pluginConfig\[0\]\.args\.scoringStrategy"
    bad = {
        "RequestedToCapacityRatio without a shape": (
            {"type": "RequestedToCapacityRatio"},
            rf"^{where}\.shape: Required value: at least one point must be specified$",
        ),
        "unsorted": (
            {
                "type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {
                    "shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}]
                },
            },
            rf"^{where}\.shape\[1\]\.utilization: Invalid value: 50: utilization values must be sorted in increasing order$",
        ),
        "out of range": (
            {
                "type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {
                    "shape": [{"utilization": 0, "score": 11}, {"utilization": 101, "score": 0}]
                },
            },
            rf"^{where}\.shape\[0\]\.score: Invalid value: 11: not in valid range \[0, 10\]; "
            rf"{where}\.shape\[1\]\.utilization: Invalid value: 101: not in valid range \[0, 100\]$",
        ),
        "weight": (
            {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 101}]},
            rf"^{where}\.resources\[0\]\.weight: Invalid value: 101: resource weight of cpu not in valid range \(0, 100\]$",
        ),
        "unknown type": (
            {"type": "Balanced"},
            rf'^{where}\.type: Unsupported value: "Balanced": supported values: "LeastAllocated", '
            '"MostAllocated", "RequestedToCapacityRatio"$',
        ),
    }
    for name, (strategy, text) in bad.items():
        with pytest.raises(ValueError, match=text):
            config_from_dict(_fit_args(strategy))
        assert name
