"""Points in memory and the usage they give, as metrics-server's storage (pkg/storage): for each node
and container the last two samples; CPU usage is the rate between them (core-seconds over seconds), its
window the time between them, memory the newest working set. Each scrape round replaces the whole
store: a node that could not be scraped, a pod that is gone, has no metrics. A counter that went down
(a restarted container, a rebooted node) or a container that started again starts over from one point.
A pod is served only when every container it reported has a rate, as upstream."""

from __future__ import annotations

from dataclasses import dataclass

from metricsserver.points import NodeSample, Point


@dataclass(frozen=True)
class Usage:
    cpu_cores: float  # rate, cores
    memory_bytes: int
    timestamp: float  # unix seconds of the newer point
    window: float  # seconds between the two points


@dataclass(frozen=True)
class ContainerUsage:
    name: str
    usage: Usage


def _advance(prev: tuple[Point, Point | None] | None, new: Point) -> tuple[Point, Point | None]:
    """(last, previous) after `new` arrives."""
    if prev is None:
        return new, None
    last, _ = prev
    assert new.cpu_time is not None and last.cpu_time is not None
    if new.cpu_time <= last.cpu_time:
        return prev  # the same sample again
    restarted = (new.start_time and last.start_time and new.start_time != last.start_time) or (
        (new.cpu or 0.0) < (last.cpu or 0.0)
    )
    return (new, None) if restarted else (new, last)


def _usage(pair: tuple[Point, Point | None]) -> Usage | None:
    last, prev = pair
    if prev is None or last.cpu_time is None or prev.cpu_time is None:
        return None
    window = last.cpu_time - prev.cpu_time
    if window <= 0:
        return None
    cpu = max(0.0, ((last.cpu or 0.0) - (prev.cpu or 0.0)) / window)
    return Usage(cpu, int(last.memory or 0), last.cpu_time, window)


class MetricsStore:
    def __init__(self) -> None:
        self._nodes: dict[str, tuple[Point, Point | None]] = {}
        self._containers: dict[tuple[str, str, str], tuple[Point, Point | None]] = {}

    def store(self, samples: dict[str, NodeSample]) -> None:
        nodes: dict[str, tuple[Point, Point | None]] = {}
        containers: dict[tuple[str, str, str], tuple[Point, Point | None]] = {}
        for name, sample in samples.items():
            if sample.node.complete:
                nodes[name] = _advance(self._nodes.get(name), sample.node)
            for key, point in sample.containers.items():
                if point.complete:
                    containers[key] = _advance(self._containers.get(key), point)
        self._nodes, self._containers = nodes, containers

    def point_counts(self) -> dict[str, int]:
        """metrics_server_storage_points: the nodes and containers with a stored point."""
        return {"node": len(self._nodes), "container": len(self._containers)}

    def node(self, name: str) -> Usage | None:
        pair = self._nodes.get(name)
        return _usage(pair) if pair else None

    def pods(self) -> dict[tuple[str, str], list[ContainerUsage]]:
        """(namespace, pod) -> its containers' usage, for pods whose every container has a rate."""
        out: dict[tuple[str, str], list[ContainerUsage]] = {}
        incomplete: set[tuple[str, str]] = set()
        for (namespace, pod, container), pair in sorted(self._containers.items()):
            usage = _usage(pair)
            if usage is None:
                incomplete.add((namespace, pod))
                continue
            out.setdefault((namespace, pod), []).append(ContainerUsage(container, usage))
        for key in incomplete:
            out.pop(key, None)
        return out
