"""Building the plugin lists a SchedulerConfig asks for."""

from __future__ import annotations

from controlplane.scheduler.algorithm import WeightedScore
from controlplane.scheduler.config import Profile, SchedulerConfig
from controlplane.scheduler.framework import ScorePlugin
from controlplane.scheduler.scores import (
    BalancedAllocation,
    ImageLocality,
    InterPodAffinityScore,
    NodeAffinityScore,
    PodTopologySpreadScore,
    ResourceAllocation,
    TaintTolerationScore,
)


def build_scores(config: SchedulerConfig | Profile) -> list[WeightedScore]:
    plugins: list[ScorePlugin] = [
        TaintTolerationScore(),
        NodeAffinityScore(),
        ResourceAllocation(config.scoring_strategy, config.resource_weights, config.scoring_shape),
        PodTopologySpreadScore(),
        InterPodAffinityScore(),
        BalancedAllocation(),
        ImageLocality(),
    ]
    return [
        WeightedScore(p, config.score_weights.get(p.name, 0))
        for p in plugins
        if config.score_weights.get(p.name, 0) > 0
    ]
