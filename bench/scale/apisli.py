"""API call latency as upstream's SLO measures and ClusterLoader2 judges it, from the API servers' own
apiserver_request_sli_duration_seconds histograms (scraped from /metrics), beside the density bench's
client-timed probes.

What upstream measures (sig-scalability api_call_latency.md, k8s.io/apiserver endpoints/metrics): inside
the API server, from a request's arrival to its answer, less the admission webhooks' time and the
priority-and-fairness queue's wait; every call of every client, per (resource, subresource, verb, scope).
How ClusterLoader2's APIResponsivenessPrometheus judges it:

- exclusions: `verb!="WATCH", subresource!~"log|exec|portforward|attach|proxy"` (long-running calls);
- per (resource, subresource, verb, scope), summed over the servers, groups and versions: p50/p90/p99 by
  Prometheus's histogram_quantile (`histogram_quantile` below: linear within a bucket, the +Inf bucket
  answered with the highest finite bound, NaN without observations);
- its default query takes each quantile over 1-minute windows (the recording rule
  `histogram_quantile(q, sum(rate(..._bucket[1m])) by (resource, subresource, verb, scope, le))`) and then
  the 99th percentile of those over the test less its first 5 minutes (at least the last minute):
  `quantile_over_time(0.99, ...[D-5m])`; its `useSimpleLatencyQuery` takes the quantile of the whole run's
  increase instead. Both are computed here (`windowed`, `whole_run`);
- threshold: 1 s for scope=resource (single-object calls), 30 s for every other scope; a group whose p99
  exceeds its threshold breaks the SLO, unless `allowedSlowCalls` > 0 and its calls slower than its
  bucket (le 1 s for non-LIST verbs, 5 s for namespaced lists, 30 s for cluster lists) are at most that.

Issue 36 asks for namespaced lists <= 5 s (the SLO's older figure); each class carries that verdict too.
Everything here is pure: the scrapes' texts in, figures out (`bench/scale/density.py` scrapes).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

SLI_METRIC = "apiserver_request_sli_duration_seconds"
EXCLUDED_VERBS = frozenset({"WATCH"})
EXCLUDED_SUBRESOURCES = frozenset({"log", "exec", "portforward", "attach", "proxy"})
QUANTILES = (0.5, 0.9, 0.99)
WINDOW_S = 60.0  # the recording rule's rate window
SKIPPED_S = 300.0  # the default query leaves out the test's first 5 minutes ...
LEAST_RANGE_S = 60.0  # ... but judges at least its last minute
# SLO classes by scope: ClusterLoader2's threshold, and issue 36's.
CLASSES = {
    "resource": ("single object", 1.0, 1.0),
    "namespace": ("namespace", 30.0, 5.0),
    "cluster": ("cluster", 30.0, 30.0),
    "": ("non-resource", 30.0, None),
}

Key = tuple[str, str, str, str]  # resource, subresource, verb, scope
Buckets = dict[float, float]  # upper bound -> cumulative count


def family_block(body: bytes, metric: str = SLI_METRIC) -> bytes:
    """The lines of one family in an exposition (the format keeps a family's lines together, opened by
    its HELP or TYPE line): what a scrape keeps of a loaded server's /metrics, found without splitting
    the rest. Empty when the family is not there."""
    name = metric.encode()
    start = body.find(b"# HELP " + name + b" ")
    if start < 0:
        start = body.find(b"# TYPE " + name + b" ")
    if start < 0:
        return b""
    end = len(body)
    for opener in (b"\n# HELP ", b"\n# TYPE "):
        at = body.find(opener, start + 1)
        while at >= 0 and body.startswith(name + b" ", at + len(opener)):  # this family's own TYPE
            at = body.find(opener, at + 1)
        if at >= 0:
            end = min(end, at + 1)
    return body[start:end]


def parse(text: str, metric: str = SLI_METRIC) -> dict[Key, Buckets]:
    """The cumulative bucket counts of `metric` per (resource, subresource, verb, scope), summed over its
    other labels (group, version, component). Only the metric's own lines are handed to the parser: a
    loaded server's /metrics is mostly other families."""
    wanted = "\n".join(
        line
        for line in text.splitlines()
        if line.startswith(metric + "_bucket") or line.startswith(("# HELP " + metric, "# TYPE " + metric))
    )
    out: dict[Key, Buckets] = {}
    for family in text_string_to_metric_families(wanted + "\n"):
        for sample in family.samples:
            if sample.name != metric + "_bucket":
                continue
            labels = sample.labels
            key = (labels.get("resource", ""), labels.get("subresource", ""), labels["verb"], labels["scope"])
            buckets = out.setdefault(key, {})
            bound = float(labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return out


def merge(parts: Iterable[dict[Key, Buckets]]) -> dict[Key, Buckets]:
    """Several servers' histograms as one (`sum by (...)` across the servers)."""
    out: dict[Key, Buckets] = {}
    for part in parts:
        for key, buckets in part.items():
            into = out.setdefault(key, {})
            for bound, count in buckets.items():
                into[bound] = into.get(bound, 0.0) + count
    return out


def increase(start: dict[Key, Buckets], end: dict[Key, Buckets]) -> dict[Key, Buckets]:
    """The observations between two scrapes, per group (a group first seen at `end` counts from zero;
    a count that went down, a restarted server, counts from zero as Prometheus's increase does)."""
    out: dict[Key, Buckets] = {}
    for key, buckets in end.items():
        before = start.get(key, {})
        reset = buckets.get(math.inf, 0.0) < before.get(math.inf, 0.0)
        out[key] = {b: c if reset else c - before.get(b, 0.0) for b, c in buckets.items()}
    return out


def histogram_quantile(q: float, buckets: Buckets) -> float:
    """Prometheus's histogram_quantile of one histogram's cumulative buckets (promql bucketQuantile):
    NaN without a +Inf bucket, with fewer than two buckets or without observations; the rank q x count
    found in the first bucket whose cumulative count reaches it and interpolated linearly within it (the
    lowest bucket starting at 0 when its bound is positive); a rank in the +Inf bucket answers the highest
    finite bound. Counts are made monotonic first, as Prometheus does."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    bounds = sorted(buckets)
    if not bounds or bounds[-1] != math.inf or len(bounds) < 2:
        return math.nan
    counts = [buckets[b] for b in bounds]
    for i in range(1, len(counts)):
        counts[i] = max(counts[i], counts[i - 1])
    observations = counts[-1]
    if observations == 0:
        return math.nan
    rank = q * observations
    b = next((i for i in range(len(bounds) - 1) if counts[i] >= rank), len(bounds) - 1)
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, count = 0.0, counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    return start + (bounds[b] - start) * (rank / count)


def quantile_over_time(q: float, values: Sequence[float]) -> float:
    """Prometheus's quantile_over_time: rank q x (n - 1) in the sorted values, interpolated between its
    neighbours; NaN values sort first (a window without calls is NaN), no value gives NaN."""
    if not values or math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = sorted(values, key=lambda v: (not math.isnan(v), v))
    rank = q * (len(ordered) - 1)
    lower = max(0, math.floor(rank))
    upper = min(len(ordered) - 1, lower + 1)
    weight = rank - math.floor(rank)
    return ordered[lower] * (1 - weight) + ordered[upper] * weight


def excluded(key: Key) -> bool:
    """Watches and the streaming subresources are not calls the SLO covers (ClusterLoader2's filters)."""
    _resource, subresource, verb, _scope = key
    return verb in EXCLUDED_VERBS or subresource in EXCLUDED_SUBRESOURCES


def slow_bound(key: Key) -> float:
    """The bucket a call must fit in not to count as slow (ClusterLoader2's allowedSlowCalls filters)."""
    _resource, _subresource, verb, scope = key
    if verb != "LIST":
        return 1.0
    return 30.0 if scope == "cluster" else 5.0


@dataclass(frozen=True, slots=True)
class Group:
    key: Key
    count: int
    slow: int
    p50: float
    p90: float
    p99: float
    buckets: tuple[tuple[str, int], ...] = ()  # the increase per bound (whole run), to recompute from
    # Windowed only: the window with the highest p99 (its end in seconds from the first scrape, its calls,
    # p50 and p99), so a report can say when in the run a group broke and what else ran then.
    worst_window: dict[str, float] | None = None

    @property
    def threshold(self) -> float:
        return CLASSES.get(self.key[3], CLASSES[""])[1]

    def breaks(self, allowed_slow_calls: int) -> bool:
        """ClusterLoader2's Validate: a p99 over the threshold, unless few enough calls were slow."""
        if allowed_slow_calls > 0 and self.slow <= allowed_slow_calls:
            return False
        return self.p99 > self.threshold

    def row(self) -> dict[str, Any]:
        resource, subresource, verb, scope = self.key
        return {
            "resource": resource,
            "subresource": subresource,
            "verb": verb,
            "scope": scope,
            "count": self.count,
            "slow": self.slow,
            "p50": _round(self.p50),
            "p90": _round(self.p90),
            "p99": _round(self.p99),
            **({"buckets": dict(self.buckets)} if self.buckets else {}),
            **({"worst_window": self.worst_window} if self.worst_window else {}),
        }


def whole_run(delta: dict[Key, Buckets]) -> list[Group]:
    """Each group's quantiles over the whole run's increase (ClusterLoader2's useSimpleLatencyQuery)."""
    groups = []
    for key, buckets in delta.items():
        if excluded(key):
            continue
        count = int(round(buckets.get(math.inf, 0.0)))
        if count == 0:
            continue
        p50, p90, p99 = (histogram_quantile(q, buckets) for q in QUANTILES)
        kept = tuple((_bound(b), int(round(buckets[b]))) for b in sorted(buckets))
        groups.append(Group(key, count, _slow(key, buckets, count), p50, p90, p99, kept))
    return _worst_first(groups)


def windowed(scrapes: Sequence[tuple[float, dict[Key, Buckets]]]) -> tuple[list[Group], int, float]:
    """ClusterLoader2's default: each quantile per window between consecutive scrapes (the 1-minute
    recording rule), then the 99th percentile over time of the windows ending in the judged range (the
    run less its first 5 minutes, at least its last minute). A group has a value in every window it
    exists at the end of (counted from zero if it appeared within it, as Prometheus scraping every few
    seconds would nearly count it), NaN when it had no call then; a group without a call in any judged
    window is left out. Returns the groups, the windows judged and the range's seconds."""
    if len(scrapes) < 2:
        return [], 0, 0.0
    first, last = scrapes[0][0], scrapes[-1][0]
    judged = max(last - first - SKIPPED_S, LEAST_RANGE_S)
    series: dict[Key, list[tuple[float, float, float]]] = {}
    edges: dict[Key, list[tuple[float, float]]] = {}  # per window of a group: its end, its calls
    windows = 0
    for (_, before), (at, after) in zip(scrapes, scrapes[1:], strict=False):
        if at <= last - judged:
            continue
        windows += 1
        for key, buckets in increase(before, after).items():
            if not excluded(key):
                q = tuple(histogram_quantile(x, buckets) for x in QUANTILES)
                series.setdefault(key, []).append(q)  # type: ignore[arg-type]
                edges.setdefault(key, []).append((at - first, buckets.get(math.inf, 0.0)))
    whole = increase(scrapes[0][1], scrapes[-1][1])
    groups = []
    for key, values in series.items():
        if all(math.isnan(v[2]) for v in values):
            continue  # no call in any judged window: no latency, nothing to judge
        p50, p90, p99 = (quantile_over_time(0.99, [v[i] for v in values]) for i in range(3))
        buckets = whole.get(key, {})
        count = int(round(buckets.get(math.inf, 0.0)))
        worst = max((i for i, v in enumerate(values) if not math.isnan(v[2])), key=lambda i: values[i][2])
        end, calls = edges[key][worst]
        window = {
            "end_s": round(end, 1),
            "calls": int(round(calls)),
            "p50": _round(values[worst][0]),
            "p99": _round(values[worst][2]),
        }
        groups.append(Group(key, count, _slow(key, buckets, count), p50, p90, p99, worst_window=window))
    return _worst_first(groups), windows, judged


def classes(groups: list[Group], allowed_slow_calls: int = 0) -> dict[str, dict[str, Any]]:
    """Per SLO class (by scope): its worst group, the groups that break ClusterLoader2's threshold, and
    whether it holds, as ClusterLoader2 judges and at issue 36's threshold."""
    out: dict[str, dict[str, Any]] = {}
    for scope, (name, threshold, issue) in CLASSES.items():
        mine = [g for g in groups if g.key[3] == scope]
        judged = [g for g in mine if not math.isnan(g.p99)]
        worst = max(judged, key=lambda g: g.p99, default=None)
        broken = [g for g in mine if g.breaks(allowed_slow_calls)]
        out[name] = {
            "scope": scope,
            "threshold_s": threshold,
            "groups": len(mine),
            "calls": sum(g.count for g in mine),
            "worst": worst.row() if worst else None,
            "broken": [g.row() for g in broken],
            "held": not broken,
            "issue_slo_s": issue,
            "held_at_issue_slo": None if issue is None else not any(g.p99 > issue for g in judged),
        }
    return out


def report(scrapes: Sequence[tuple[float, Sequence[str]]], allowed_slow_calls: int = 0) -> dict[str, Any]:
    """The SLI section of a run: `scrapes` are (monotonic time, every server's /metrics text), the first
    at the load phase's start, the last at its end, others between (every minute)."""
    parsed = [(t, merge(parse(text) for text in texts)) for t, texts in scrapes]
    if len(parsed) < 2:
        raise ValueError(f"the SLI needs two scrapes at least, not {len(parsed)}")
    whole = whole_run(increase(parsed[0][1], parsed[-1][1]))
    windows, count, judged = windowed(parsed)
    return {
        "metric": SLI_METRIC,
        "scrapes": len(parsed),
        "duration_s": round(parsed[-1][0] - parsed[0][0], 1),
        "allowed_slow_calls": allowed_slow_calls,
        "whole_run": {
            "groups": [g.row() for g in whole],
            "classes": classes(whole, allowed_slow_calls),
        },
        "windowed": {
            "windows": count,
            "judged_range_s": round(judged, 1),
            "groups": [g.row() for g in windows],
            "classes": classes(windows, allowed_slow_calls),
        },
    }


def _slow(key: Key, buckets: Buckets, count: int) -> int:
    """Calls above the group's slow-call bucket (none when the histogram lacks that bound)."""
    bound = slow_bound(key)
    return count - int(round(buckets[bound])) if bound in buckets else 0


def _worst_first(groups: list[Group]) -> list[Group]:
    return sorted(groups, key=lambda g: (math.isnan(g.p99), -g.p99 if not math.isnan(g.p99) else 0.0))


def _bound(bound: float) -> str:
    """A bucket's `le` as the exposition writes it (JSON has no infinity)."""
    return "+Inf" if bound == math.inf else repr(bound)


def _round(value: float) -> float:
    return value if math.isnan(value) or math.isinf(value) else round(value, 4)
