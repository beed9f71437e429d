"""From the metrics' recommendation to the replica count the autoscaler sets, as upstream's
normalizeDesiredReplicas and normalizeDesiredReplicasWithBehaviors (horizontal.go): the stabilization
window (the highest recommendation of the last --horizontal-pod-autoscaler-downscale-stabilization, 5 min,
on the way down; with `behavior`, each direction's own window), then the rate limits (without
behavior: at most double, or 4, per sync; with it, the Pods and Percent policies over their periods,
selectPolicy Max, Min or Disabled) and minReplicas/maxReplicas, each decision named by the
AbleToScale and ScalingLimited conditions' reasons. The state (recent recommendations and scale events
per HPA) lives here, in memory, as upstream's controller keeps it."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
DOWNSCALE_STABILIZATION = 300.0
INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)


@dataclass
class Recommendation:
    replicas: int
    at: float


@dataclass
class ScaleEvent:
    change: int
    at: float
    outdated: bool = False


@dataclass(frozen=True)
class Decision:
    replicas: int
    able_reason: str
    able_message: str
    limited: bool
    limited_reason: str
    limited_message: str


READY = ("ReadyForNewScale", "recommended size matches current size")
DOWN_STABILIZED = (
    "ScaleDownStabilized",
    "recent recommendations were higher than current one, applying the highest recent recommendation",
)
UP_STABILIZED = (
    "ScaleUpStabilized",
    "recent recommendations were lower than current one, applying the lowest recent recommendation",
)
WITHIN = ("DesiredWithinRange", "the desired count is within the acceptable range")
TOO_FEW = ("TooFewReplicas", "the desired replica count is less than the minimum replica count")
TOO_MANY = ("TooManyReplicas", "the desired replica count is more than the maximum replica count")
UP_LIMIT = ("ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate")
DOWN_LIMIT = ("ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate")


def scale_up_limit(current: int) -> int:
    """calculateScaleUpLimit: double, or 4, whichever is more."""
    return max(2 * current, 4)


def _decision(
    stabilized: int, prenormalized: int, able: tuple[str, str], final: int, why: tuple[str, str]
) -> Decision:
    if stabilized == prenormalized:
        able = READY
    return Decision(final, able[0], able[1], final != stabilized, why[0], why[1])


@dataclass
class Normalizer:
    clock: Callable[[], float] = time.monotonic
    downscale_stabilization: float = DOWNSCALE_STABILIZATION
    recommendations: dict[str, list[Recommendation]] = field(default_factory=dict)
    scale_up_events: dict[str, list[ScaleEvent]] = field(default_factory=dict)
    scale_down_events: dict[str, list[ScaleEvent]] = field(default_factory=dict)

    def forget(self, key: str) -> None:
        for store in (self.recommendations, self.scale_up_events, self.scale_down_events):
            store.pop(key, None)

    def record_initial(self, key: str, current: int) -> None:
        """recordInitialRecommendation: the current count is the first recommendation."""
        self.recommendations.setdefault(key, [Recommendation(current, self.clock())])

    # --- without behavior ---------------------------------------------------------------------------

    def normalize(self, key: str, current: int, desired: int, minimum: int, maximum: int) -> Decision:
        stabilized = self._stabilize(key, desired)
        final, why = self.within_rules(current, stabilized, minimum, maximum)
        return _decision(stabilized, desired, DOWN_STABILIZED, final, why)

    @staticmethod
    def within_rules(current: int, desired: int, minimum: int, maximum: int) -> tuple[int, tuple[str, str]]:
        """convertDesiredReplicasWithRules."""
        up_limit = scale_up_limit(current)
        allowed, why = (up_limit, UP_LIMIT) if maximum > up_limit else (maximum, TOO_MANY)
        if desired < minimum:
            return minimum, TOO_FEW
        if desired > allowed:
            return allowed, why
        return desired, WITHIN

    def _stabilize(self, key: str, desired: int) -> int:
        """stabilizeRecommendation: the highest recommendation of the window; the oldest outside it is
        replaced by this one."""
        now = self.clock()
        cutoff = now - self.downscale_stabilization
        highest = desired
        recs = self.recommendations.setdefault(key, [])
        old = None
        for i, rec in enumerate(recs):
            if rec.at < cutoff:
                old = i
            elif rec.replicas > highest:
                highest = rec.replicas
        if old is not None:
            recs[old] = Recommendation(desired, now)
        else:
            recs.append(Recommendation(desired, now))
        return highest

    # --- with behavior ------------------------------------------------------------------------------

    def normalize_with_behavior(
        self, key: str, behavior: Obj, current: int, desired: int, minimum: int, maximum: int
    ) -> Decision:
        up, down = behavior.get("scaleUp") or {}, dict(behavior.get("scaleDown") or {})
        if down.get("stabilizationWindowSeconds") is None:
            down["stabilizationWindowSeconds"] = int(self.downscale_stabilization)
        stabilized, able = self._stabilize_with_behavior(key, up, down, current, desired)
        final, why = self._rate_limited(key, up, down, current, stabilized, minimum, maximum)
        return _decision(stabilized, desired, able, final, why)

    def _stabilize_with_behavior(
        self, key: str, up: Obj, down: Obj, current: int, desired: int
    ) -> tuple[int, tuple[str, str]]:
        now = self.clock()
        up_cutoff = now - float(up.get("stabilizationWindowSeconds") or 0)
        down_cutoff = now - float(down.get("stabilizationWindowSeconds") or 0)
        up_rec = down_rec = desired
        recs = self.recommendations.setdefault(key, [])
        old = None
        for i, rec in enumerate(recs):
            if rec.at > up_cutoff:
                up_rec = min(rec.replicas, up_rec)
            if rec.at > down_cutoff:
                down_rec = max(rec.replicas, down_rec)
            if rec.at < up_cutoff and rec.at < down_cutoff:
                old = i
        recommendation = max(current, up_rec)
        recommendation = min(recommendation, down_rec)
        if old is not None:
            recs[old] = Recommendation(desired, now)
        else:
            recs.append(Recommendation(desired, now))
        return recommendation, (UP_STABILIZED if desired >= current else DOWN_STABILIZED)

    def _changed_within(self, period: float, events: list[ScaleEvent]) -> int:
        cutoff = self.clock() - period
        return sum(e.change for e in events if e.at > cutoff)

    def _period_start(self, key: str, policy: Obj, current: int) -> int:
        period = float(policy.get("periodSeconds") or 0)
        added = self._changed_within(period, self.scale_up_events.get(key, []))
        deleted = self._changed_within(period, self.scale_down_events.get(key, []))
        return current - added + deleted

    def scale_up_limit_with_rules(self, key: str, current: int, rules: Obj) -> int:
        """calculateScaleUpLimitWithScalingRules."""
        select = rules.get("selectPolicy") or "Max"
        if select == "Disabled":
            return current
        pick, result = (min, INT32_MAX) if select == "Min" else (max, INT32_MIN)
        for policy in rules.get("policies") or []:
            start = self._period_start(key, policy, current)
            if policy.get("type") == "Pods":
                proposed = start + int(policy["value"])
            else:
                proposed = math.ceil(start * (1 + int(policy["value"]) / 100))
            result = pick(result, proposed)
        return result

    def scale_down_limit_with_rules(self, key: str, current: int, rules: Obj) -> int:
        """calculateScaleDownLimitWithBehaviors."""
        select = rules.get("selectPolicy") or "Max"
        if select == "Disabled":
            return current
        pick, result = (max, INT32_MIN) if select == "Min" else (min, INT32_MAX)
        for policy in rules.get("policies") or []:
            start = self._period_start(key, policy, current)
            if policy.get("type") == "Pods":
                proposed = start - int(policy["value"])
            else:
                proposed = int(start * (1 - int(policy["value"]) / 100))
            result = pick(result, proposed)
        return result

    def _rate_limited(
        self, key: str, up: Obj, down: Obj, current: int, desired: int, minimum: int, maximum: int
    ) -> tuple[int, tuple[str, str]]:
        """convertDesiredReplicasWithBehaviorRate."""
        if desired > current:
            limit = max(self.scale_up_limit_with_rules(key, current, up), current)
            allowed, why = (limit, UP_LIMIT) if maximum > limit else (maximum, TOO_MANY)
            if desired > allowed:
                return allowed, why
        elif desired < current:
            limit = min(self.scale_down_limit_with_rules(key, current, down), current)
            allowed, why = (limit, DOWN_LIMIT) if minimum < limit else (minimum, TOO_FEW)
            if desired < allowed:
                return allowed, why
        return desired, WITHIN

    def store_scale_event(self, key: str, behavior: Obj | None, previous: int, new: int) -> None:
        """storeScaleEvent: remembered only for HPAs with a behavior; events older than the direction's
        longest policy period are reused."""
        if behavior is None or new == previous:
            return
        up = new > previous
        rules = (behavior.get("scaleUp") if up else behavior.get("scaleDown")) or {}
        longest = max((float(p.get("periodSeconds") or 0) for p in rules.get("policies") or []), default=0.0)
        events = (self.scale_up_events if up else self.scale_down_events).setdefault(key, [])
        now = self.clock()
        for event in events:
            if event.at < now - longest:
                event.outdated = True
        fresh = ScaleEvent(abs(new - previous), now)
        for i, event in enumerate(events):
            if event.outdated:
                events[i] = fresh
                return
        events.append(fresh)
