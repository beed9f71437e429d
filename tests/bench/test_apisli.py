"""The SLI maths of the density bench (bench/scale/apisli.py) against hand-computed cases: Prometheus's
histogram_quantile and quantile_over_time rules, the exposition's groups summed as ClusterLoader2's
`sum by (resource, subresource, verb, scope, le)`, its exclusions, thresholds, slow-call allowance and
windows."""

from __future__ import annotations

import math

import pytest

from bench.scale import apisli
from bench.scale.apisli import Group, histogram_quantile, quantile_over_time

INF = math.inf


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        # rank 10 reaches the 0.1 bucket's cumulative 10 exactly: its upper bound
        (0.5, {0.05: 0, 0.1: 10, 0.2: 20, INF: 20}, 0.1),
        # rank 15: 5 of the 10 calls in (0.1, 0.2]
        (0.75, {0.05: 0, 0.1: 10, 0.2: 20, INF: 20}, 0.15),
        # the lowest bucket starts at 0 when its bound is positive
        (0.5, {0.05: 4, INF: 4}, 0.025),
        # a rank in the +Inf bucket answers the highest finite bound
        (0.99, {0.05: 1, 1.0: 1, INF: 10}, 1.0),
        # counts made monotonic first: the 0.2 bucket's 3 becomes 5
        (0.5, {0.1: 5, 0.2: 3, INF: 6}, 0.06),
        # quantiles outside [0, 1]
        (1.5, {0.1: 1, INF: 1}, INF),
        (-0.1, {0.1: 1, INF: 1}, -INF),
    ],
)
def test_histogram_quantile_follows_prometheus(
    q: float, buckets: dict[float, float], expected: float
) -> None:
    assert histogram_quantile(q, buckets) == pytest.approx(expected)


@pytest.mark.parametrize(
    "buckets",
    [
        {0.05: 0, INF: 0},  # no observation
        {0.05: 3, 0.1: 3},  # no +Inf bucket
        {INF: 3},  # fewer than two buckets
        {},
    ],
)
def test_histogram_quantile_without_an_answer_is_nan(buckets: dict[float, float]) -> None:
    assert math.isnan(histogram_quantile(0.99, buckets))


def test_quantile_over_time_interpolates_and_sorts_nan_first() -> None:
    assert quantile_over_time(0.99, [5.0, 1.0, 3.0, 2.0, 4.0]) == pytest.approx(4.96)  # 4 x 0.04 + 5 x 0.96
    assert quantile_over_time(0.5, [math.nan, 3.0, math.nan, 1.0, 2.0]) == 1.0  # rank 2 of nan nan 1 2 3
    assert math.isnan(quantile_over_time(0.99, [math.nan, 2.0]))  # the interpolation touches the NaN
    assert quantile_over_time(0.99, [7.0]) == 7.0
    assert math.isnan(quantile_over_time(0.99, []))


EXPOSITION = """# HELP apiserver_request_sli_duration_seconds [ALPHA] SLI.
# TYPE apiserver_request_sli_duration_seconds histogram
{rows}
# HELP apiserver_request_duration_seconds [STABLE] whole.
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{{verb="GET",dry_run="",group="",version="v1",resource="pods",subresource="",scope="resource",component="apiserver",le="+Inf"}} 999.0
"""


def rows(
    verb: str, resource: str, scope: str, counts: dict[str, float], subresource: str = "", group: str = ""
) -> str:
    labels = (
        f'verb="{verb}",group="{group}",version="v1",resource="{resource}",subresource="{subresource}",'
        f'scope="{scope}",component="apiserver"'
    )
    out = [
        f'apiserver_request_sli_duration_seconds_bucket{{{labels},le="{le}"}} {n}' for le, n in counts.items()
    ]
    out.append(f"apiserver_request_sli_duration_seconds_count{{{labels}}} {counts['+Inf']}")
    out.append(f"apiserver_request_sli_duration_seconds_sum{{{labels}}} 1.0")
    return "\n".join(out)


def text(*parts: str) -> str:
    return EXPOSITION.format(rows="\n".join(parts))


def test_parse_sums_a_group_over_its_other_labels_and_reads_nothing_else() -> None:
    parsed = apisli.parse(
        text(
            rows("GET", "pods", "resource", {"0.05": 2, "1.0": 3, "+Inf": 3}),
            rows("GET", "pods", "resource", {"0.05": 1, "1.0": 1, "+Inf": 2}, group="x.io"),
            rows("LIST", "nodes", "cluster", {"0.05": 0, "1.0": 4, "+Inf": 4}),
        )
    )
    assert parsed == {
        ("pods", "", "GET", "resource"): {0.05: 3.0, 1.0: 4.0, INF: 5.0},
        ("nodes", "", "LIST", "cluster"): {0.05: 0.0, 1.0: 4.0, INF: 4.0},
    }


def test_increase_counts_a_new_group_and_a_reset_from_zero() -> None:
    start = {
        ("a", "", "GET", "resource"): {1.0: 5.0, INF: 6.0},
        ("b", "", "GET", "resource"): {1.0: 9.0, INF: 9.0},
    }
    end = {
        ("a", "", "GET", "resource"): {1.0: 7.0, INF: 9.0},
        ("b", "", "GET", "resource"): {1.0: 2.0, INF: 2.0},  # the server restarted
        ("c", "", "GET", "resource"): {1.0: 1.0, INF: 1.0},
    }
    assert apisli.increase(start, end) == {
        ("a", "", "GET", "resource"): {1.0: 2.0, INF: 3.0},
        ("b", "", "GET", "resource"): {1.0: 2.0, INF: 2.0},
        ("c", "", "GET", "resource"): {1.0: 1.0, INF: 1.0},
    }


BOUNDS = (0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60)


def spread(**at: int) -> dict[float, float]:
    """Cumulative buckets with `n` calls in the bucket bounded by each given bound (`b1_25=3`: 3 calls in
    (1.0, 1.25])."""
    counts = {float(k[1:].replace("_", ".")): n for k, n in at.items()}
    out, total = {}, 0.0
    for bound in (*BOUNDS, INF):
        total += counts.get(float(bound), 0)
        out[float(bound)] = total
    return out


def test_groups_are_judged_by_scope_with_clusterloader2s_exclusions_and_thresholds() -> None:
    delta = {
        ("pods", "", "POST", "resource"): spread(b0_05=98, b1_25=2),  # p99 in (1, 1.25]: breaks 1 s
        ("leases", "", "PUT", "resource"): spread(b0_05=100),
        ("pods", "", "LIST", "namespace"): spread(b8=100),  # held at 30 s, broken at issue 36's 5 s
        ("nodes", "", "LIST", "cluster"): spread(b20=100),  # held at 30 s
        ("pods", "", "WATCH", "namespace"): spread(b60=100),  # a watch: not an API call of the SLO
        ("pods", "exec", "CONNECT", "resource"): spread(b60=5),  # streaming: excluded
        ("", "/healthz", "GET", ""): spread(b0_05=3),
        ("configmaps", "", "GET", "resource"): spread(),  # no call in the run: no group
    }
    groups = apisli.whole_run(delta)
    keys = [g.key for g in groups]
    assert ("pods", "", "WATCH", "namespace") not in keys
    assert ("pods", "exec", "CONNECT", "resource") not in keys
    assert ("configmaps", "", "GET", "resource") not in keys
    assert keys[:2] == [("nodes", "", "LIST", "cluster"), ("pods", "", "LIST", "namespace")]  # worst first
    assert (groups[0].p99, groups[1].p99) == (pytest.approx(19.95), pytest.approx(7.98))
    post = next(g for g in groups if g.key == ("pods", "", "POST", "resource"))
    assert (post.count, post.slow) == (100, 2)
    assert post.p99 == pytest.approx(1.125)  # rank 99: the first of 2 calls in (1.0, 1.25]
    assert post.row()["buckets"]["1.25"] == 100 and post.row()["buckets"]["+Inf"] == 100
    judged = apisli.classes(groups)
    single = judged["single object"]
    assert not single["held"] and [b["resource"] for b in single["broken"]] == ["pods"]
    assert single["worst"]["verb"] == "POST" and single["calls"] == 200
    namespace = judged["namespace"]
    assert namespace["held"] and namespace["held_at_issue_slo"] is False and namespace["threshold_s"] == 30.0
    assert judged["cluster"]["held"] and judged["cluster"]["held_at_issue_slo"] is True
    assert judged["non-resource"]["held"] and judged["non-resource"]["held_at_issue_slo"] is None
    # allowedSlowCalls: as many slow calls as allowed keep a group from breaking, one fewer does not
    assert apisli.classes(groups, allowed_slow_calls=2)["single object"]["held"]
    assert not apisli.classes(groups, allowed_slow_calls=1)["single object"]["held"]


def test_slow_calls_are_counted_above_clusterloader2s_bucket_for_the_call() -> None:
    assert apisli.slow_bound(("pods", "", "PATCH", "resource")) == 1.0
    assert apisli.slow_bound(("pods", "", "DELETECOLLECTION", "namespace")) == 1.0
    assert apisli.slow_bound(("pods", "", "LIST", "namespace")) == 5.0
    assert apisli.slow_bound(("pods", "", "LIST", "cluster")) == 30.0
    (group,) = apisli.whole_run({("pods", "", "LIST", "namespace"): spread(b4=7, b6=3)})
    assert group.slow == 3


def cumulative(*windows: dict[float, float]) -> list[dict[float, float]]:
    out, running = [], {}
    for w in windows:
        running = {b: running.get(b, 0.0) + n for b, n in w.items()}
        out.append(running)
    return out


def test_windows_judge_the_run_less_its_first_five_minutes() -> None:
    key = ("pods", "", "PATCH", "resource")
    quiet = ("leases", "", "PUT", "resource")
    totals = cumulative(spread(), spread(b30=100), spread(b0_1=100), spread(b0_1=100))
    quiet_totals = cumulative(spread(b0_05=1), spread(b0_05=1), spread(), spread(b0_05=1))
    times = [0.0, 60.0, 360.0, 420.0]  # run of 420 s: the last 120 s are judged, 2 windows
    scrapes = [(t, {key: a, quiet: b}) for t, a, b in zip(times, totals, quiet_totals, strict=True)]
    fresh = ("pods", "", "POST", "resource")
    scrapes[-1][1][fresh] = spread(b0_2=10)  # first seen in the last window: counted from zero
    groups, windows, judged = apisli.windowed(scrapes)
    assert (windows, judged) == (2, 120.0)
    by_key = {g.key: g for g in groups}
    # the slow window ended at 60 s, in the first five minutes: not judged
    assert by_key[key].p99 == pytest.approx(histogram_quantile(0.99, spread(b0_1=100)))
    assert by_key[key].count == 300  # the whole run's calls
    # a window without calls is NaN, sorted first: 0.99 x (2 - 1) interpolates with the NaN
    assert math.isnan(by_key[quiet].p99)
    assert by_key[fresh].p99 == pytest.approx(0.199) and by_key[fresh].count == 10
    short = [(0.0, {key: totals[0]}), (30.0, {key: totals[1]})]
    assert apisli.windowed(short)[1:] == (1, 60.0)  # at least the last minute: the one window


def test_report_reads_every_servers_scrapes() -> None:
    first = text(rows("PUT", "leases", "resource", {"0.05": 10, "+Inf": 10}))
    second = text(rows("PUT", "leases", "resource", {"0.05": 30, "+Inf": 31}))
    other = text(rows("PUT", "leases", "resource", {"0.05": 5, "+Inf": 5}))
    out = apisli.report([(0.0, [first, other]), (90.0, [second, other])])
    (group,) = out["whole_run"]["groups"]
    # the other server's leases did not change
    assert (group["resource"], group["count"], group["slow"]) == ("leases", 21, 0)
    assert out["scrapes"] == 2 and out["duration_s"] == 90.0
    assert out["windowed"]["windows"] == 1
    with pytest.raises(ValueError, match="two scrapes"):
        apisli.report([(0.0, [first])])


def test_group_threshold_is_one_second_for_single_objects_and_thirty_otherwise() -> None:
    nan = math.nan
    assert Group(("p", "", "GET", "resource"), 1, 0, nan, nan, 1.0).threshold == 1.0
    assert Group(("p", "", "LIST", "namespace"), 1, 0, nan, nan, 1.0).threshold == 30.0
    assert Group(("p", "", "LIST", "cluster"), 1, 0, nan, nan, 1.0).threshold == 30.0
    assert Group(("", "/healthz", "GET", ""), 1, 0, nan, nan, 1.0).threshold == 30.0


def test_a_scrape_keeps_the_sli_familys_block_alone() -> None:
    before = "# HELP apiserver_request_total [STABLE] total.\n# TYPE apiserver_request_total counter\n"
    before += 'apiserver_request_total{verb="GET"} 3.0\n'
    sli = text(rows("PUT", "leases", "resource", {"0.05": 2, "+Inf": 3}))
    whole = (before + sli).encode()
    block = apisli.family_block(whole)
    assert block.startswith(b"# HELP apiserver_request_sli_duration_seconds ")
    assert (
        b"apiserver_request_total" not in block and b"apiserver_request_duration_seconds_bucket" not in block
    )
    assert (
        apisli.parse(block.decode())
        == apisli.parse(whole.decode())
        == {("leases", "", "PUT", "resource"): {0.05: 2.0, INF: 3.0}}
    )
    assert apisli.family_block(before.encode()) == b""


def test_a_group_without_a_call_in_the_judged_windows_is_left_out() -> None:
    idle = ("leases", "", "GET", "resource")
    scrapes = [(0.0, {idle: spread(b0_05=3)}), (60.0, {idle: spread(b0_05=3)})]
    assert apisli.windowed(scrapes) == ([], 1, 60.0)


def test_a_groups_worst_window_says_when_it_ended_and_how_many_calls_it_had() -> None:
    key = ("events", "", "POST", "resource")
    totals = cumulative(
        spread(b0_05=500), spread(b0_05=100), spread(b0_05=10, b1_25=50), spread(b0_1=80), spread(b0_05=5)
    )
    scrapes = [(t, {key: c}) for t, c in zip([0.0, 300.0, 360.0, 420.0, 480.0], totals, strict=True)]
    (group,), windows, _judged = apisli.windowed(scrapes)
    assert windows == 3
    slow = spread(b0_05=10, b1_25=50)
    assert group.worst_window == {
        "end_s": 360.0,
        "calls": 60,
        "p50": round(histogram_quantile(0.5, slow), 4),
        "p99": round(histogram_quantile(0.99, slow), 4),
    }
    assert group.row()["worst_window"]["end_s"] == 360.0
    assert (
        group.breaks(0)
        and "worst_window"
        not in apisli.whole_run(apisli.increase({key: totals[0]}, {key: totals[-1]}))[0].row()
    )
