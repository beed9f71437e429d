"""Scheduler configuration: which scoring strategy, which score weights, how long to back off.

The file is a subset of upstream's KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1), so a
config written for kube-scheduler means the same here where it overlaps:

    apiVersion: kubescheduler.config.k8s.io/v1
    kind: KubeSchedulerConfiguration
    leaderElection: {leaderElect: true, leaseDuration: 15s, renewDeadline: 10s, retryPeriod: 2s}
    podInitialBackoffSeconds: 1
    podMaxBackoffSeconds: 10
    percentageOfNodesToScore: 0                # 0: upstream's adaptive default
    profiles:
    - schedulerName: default-scheduler
      plugins:
        score:
          enabled:  [{name: ImageLocality, weight: 5}]
          disabled: [{name: NodeResourcesBalancedAllocation}]   # or {name: "*"}
      pluginConfig:
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated                  # or LeastAllocated (default), RequestedToCapacityRatio
            # requestedToCapacityRatio: {shape: [{utilization: 0, score: 0}, {utilization: 100, score: 10}]}
            resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]

Every profile is served by the one process (pods pick theirs by spec.schedulerName); the first also
names the lease holder's events component. Unknown plugin names are an error, so a typo does not silently do nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controlplane.scheduler.podinfo import SCHEDULER_NAME
from controlplane.scheduler.scores.resource_allocation import (
    LEAST_ALLOCATED,
    MAX_CUSTOM_PRIORITY_SCORE,
    MAX_UTILIZATION,
    REQUESTED_TO_CAPACITY_RATIO,
    STRATEGIES,
)
from kubeclient.duration import parse_duration
from kubeclient.leaderelection import LeaderElection

# Upstream's default score weights (pkg/scheduler/apis/config/v1/default_plugins.go).
DEFAULT_SCORE_WEIGHTS: dict[str, int] = {
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "NodeResourcesFit": 1,
    "PodTopologySpread": 2,
    "InterPodAffinity": 2,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
}
# Filter-only upstream plugins a config may mention; they have no score here.
_FILTER_ONLY = {
    "NodeUnschedulable",
    "NodeName",
    "NodePorts",
    "PrioritySort",
    "DefaultBinder",
    "SchedulingGates",
    "VolumeRestrictions",
    "VolumeBinding",
    "VolumeZone",
    "NodeVolumeLimits",
    "DefaultPreemption",
    "EBSLimits",
    "GCEPDLimits",
    "AzureDiskLimits",
}


@dataclass
class Profile:
    """One KubeSchedulerConfiguration profile: a schedulerName and its scoring."""

    scheduler_name: str = SCHEDULER_NAME
    scoring_strategy: str = LEAST_ALLOCATED
    resource_weights: list[tuple[str, int]] = field(default_factory=lambda: [("cpu", 1), ("memory", 1)])
    score_weights: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_SCORE_WEIGHTS))
    # RequestedToCapacityRatio's shape: (utilization 0-100, score 0-10) points, utilization increasing.
    scoring_shape: list[tuple[int, int]] = field(default_factory=list)
    # The profile's own percentageOfNodesToScore, over the top-level one when set (as upstream's v1).
    percentage_of_nodes_to_score: int | None = None


@dataclass
class SchedulerConfig:
    scheduler_name: str = SCHEDULER_NAME
    scoring_strategy: str = LEAST_ALLOCATED
    resource_weights: list[tuple[str, int]] = field(default_factory=lambda: [("cpu", 1), ("memory", 1)])
    score_weights: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_SCORE_WEIGHTS))
    scoring_shape: list[tuple[int, int]] = field(default_factory=list)
    backoff_initial: float = 1.0
    backoff_max: float = 10.0
    # Unschedulable pods are retried on a relevant cluster change; this is the safety net.
    unschedulable_flush: float = 300.0
    # Bindings in flight at once: enough to hide API latency, few enough not to swamp the server.
    bind_concurrency: int = 32
    event_concurrency: int = 2
    leader_election: LeaderElection = field(default_factory=lambda: LeaderElection("kube-scheduler"))
    # 0: upstream's adaptive default (all nodes below 100; 50% minus 1% per 125 nodes above).
    percentage_of_nodes_to_score: int = 0
    # clientConnection.qps/burst. 0 (no client-side limit) unless the config sets them: the bind slots
    # are this scheduler's back-pressure. Upstream's kube-scheduler defaults to 50 / 100.
    client_qps: float = 0.0
    client_burst: int = 100
    # Every profile, the first one's settings also being the fields above (one process serves all).
    profiles: list[Profile] = field(default_factory=list)

    def all_profiles(self) -> list[Profile]:
        return self.profiles or [
            Profile(
                self.scheduler_name,
                self.scoring_strategy,
                self.resource_weights,
                self.score_weights,
                self.scoring_shape,
            )
        ]


def _plugin_name(name: str) -> str:
    if name not in DEFAULT_SCORE_WEIGHTS and name not in _FILTER_ONLY and name != "*":
        raise ValueError(f"unknown scheduler plugin {name!r}")
    return name


def _leader_election(doc: dict[str, Any]) -> LeaderElection:
    le = LeaderElection("kube-scheduler")
    le.enabled = bool(doc.get("leaderElect", True))
    le.namespace = str(doc.get("resourceNamespace") or le.namespace)
    le.name = str(doc.get("resourceName") or le.name)
    for key, attr in (
        ("leaseDuration", "lease_duration"),
        ("renewDeadline", "renew_deadline"),
        ("retryPeriod", "retry_period"),
    ):
        if key in doc:
            setattr(le, attr, parse_duration(doc[key]))
    if not le.lease_duration > le.renew_deadline > le.retry_period > 0:
        raise ValueError("leaderElection needs leaseDuration > renewDeadline > retryPeriod > 0")
    return le


def config_from_dict(doc: dict[str, Any]) -> SchedulerConfig:
    cfg = SchedulerConfig()
    if "leaderElection" in doc:
        cfg.leader_election = _leader_election(doc["leaderElection"] or {})
    connection = doc.get("clientConnection") or {}
    if "qps" in connection:
        cfg.client_qps = float(connection["qps"])
    if "burst" in connection:
        cfg.client_burst = int(connection["burst"])
    if cfg.client_qps < 0 or cfg.client_burst < 1:
        raise ValueError("clientConnection needs qps >= 0 and burst >= 1")
    if doc.get("percentageOfNodesToScore") is not None:
        cfg.percentage_of_nodes_to_score = _percentage(
            doc["percentageOfNodesToScore"], "percentageOfNodesToScore"
        )
    if "podInitialBackoffSeconds" in doc:
        cfg.backoff_initial = float(doc["podInitialBackoffSeconds"])
    if "podMaxBackoffSeconds" in doc:
        cfg.backoff_max = float(doc["podMaxBackoffSeconds"])
    if cfg.backoff_initial <= 0 or cfg.backoff_max < cfg.backoff_initial:
        raise ValueError("need 0 < podInitialBackoffSeconds <= podMaxBackoffSeconds")
    profiles = doc.get("profiles") or []
    if not profiles:
        return cfg
    cfg.profiles = [_profile(p or {}, f"profiles[{i}]") for i, p in enumerate(profiles)]
    names = [p.scheduler_name for p in cfg.profiles]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"profiles: duplicate schedulerName {name!r}")
    first = cfg.profiles[0]
    cfg.scheduler_name, cfg.scoring_strategy = first.scheduler_name, first.scoring_strategy
    cfg.resource_weights, cfg.score_weights = first.resource_weights, first.score_weights
    cfg.scoring_shape = first.scoring_shape
    return cfg


def _percentage(value: Any, path: str) -> int:
    """Upstream's validation of percentageOfNodesToScore (0 is the adaptive default)."""
    percentage = int(value)
    if not 0 <= percentage <= 100:
        raise ValueError(f"{path}: Invalid value: {percentage}: not in valid range [0-100]")
    return percentage


def _profile(profile: dict[str, Any], path: str = "profiles[0]") -> Profile:
    out = Profile(str(profile.get("schedulerName") or SCHEDULER_NAME))
    if profile.get("percentageOfNodesToScore") is not None:
        key = "percentageOfNodesToScore"
        out.percentage_of_nodes_to_score = _percentage(profile[key], f"{path}.{key}")
    plugins = profile.get("plugins") or {}
    for point in ("multiPoint", "score"):
        section = plugins.get(point) or {}
        for item in section.get("disabled") or ():
            name = _plugin_name(str(item.get("name")))
            if name == "*":
                out.score_weights = {k: 0 for k in out.score_weights}
            elif name in out.score_weights:
                out.score_weights[name] = 0
        for item in section.get("enabled") or ():
            name = _plugin_name(str(item.get("name")))
            if name in DEFAULT_SCORE_WEIGHTS:
                weight = item.get("weight")
                out.score_weights[name] = int(weight) if weight is not None else DEFAULT_SCORE_WEIGHTS[name]
    for i, entry in enumerate(profile.get("pluginConfig") or ()):
        if entry.get("name") != "NodeResourcesFit":
            continue
        strategy = ((entry.get("args") or {}).get("scoringStrategy")) or {}
        where = f"{path}.pluginConfig[{i}].args.scoringStrategy"
        kind = str(strategy.get("type") or LEAST_ALLOCATED)
        if kind not in STRATEGIES:
            supported = ", ".join(f'"{k}"' for k in STRATEGIES)
            raise ValueError(f'{where}.type: Unsupported value: "{kind}": supported values: {supported}')
        out.scoring_strategy = kind
        if strategy.get("resources"):
            out.resource_weights = _resource_weights(strategy["resources"], f"{where}.resources")
        if kind == REQUESTED_TO_CAPACITY_RATIO:
            ratio = strategy.get("requestedToCapacityRatio") or {}
            out.scoring_shape = _shape(ratio.get("shape") or [], f"{where}.shape")
    for name, weight in out.score_weights.items():
        if weight < 0:
            raise ValueError(f"score weight of {name} must not be negative")
    return out


def _resource_weights(resources: list[dict[str, Any]], path: str) -> list[tuple[str, int]]:
    """scoringStrategy.resources, a missing weight defaulted to 1, each weight checked as upstream's
    validateResources does."""
    out = []
    for i, resource in enumerate(resources):
        name, weight = str(resource.get("name")), int(resource.get("weight") or 1)
        if not 0 < weight <= 100:
            raise ValueError(
                f"{path}[{i}].weight: Invalid value: {weight}: resource weight of {name} not in valid range (0, 100]"
            )
        out.append((name, weight))
    return out


def _shape(points: list[dict[str, Any]], path: str) -> list[tuple[int, int]]:
    """RequestedToCapacityRatio's shape, checked as upstream's validateFunctionShape (its texts)."""
    if not points:
        raise ValueError(f"{path}: Required value: at least one point must be specified")
    shape = [(int(p.get("utilization") or 0), int(p.get("score") or 0)) for p in points]
    errors = []
    for i in range(1, len(shape)):
        if shape[i - 1][0] >= shape[i][0]:
            errors.append(
                f"{path}[{i}].utilization: Invalid value: {shape[i][0]}: "
                "utilization values must be sorted in increasing order"
            )
            break
    for i, (utilization, score) in enumerate(shape):
        if not 0 <= utilization <= MAX_UTILIZATION:
            errors.append(
                f"{path}[{i}].utilization: Invalid value: {utilization}: "
                f"not in valid range [0, {MAX_UTILIZATION}]"
            )
        if not 0 <= score <= MAX_CUSTOM_PRIORITY_SCORE:
            errors.append(
                f"{path}[{i}].score: Invalid value: {score}: not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]"
            )
    if errors:
        raise ValueError("; ".join(errors))
    return shape


def load_config(path: Path | None) -> SchedulerConfig:
    """Defaults when `path` is None; otherwise the file's settings over the defaults."""
    if path is None:
        return SchedulerConfig()
    doc = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a KubeSchedulerConfiguration mapping")
    return config_from_dict(doc)
