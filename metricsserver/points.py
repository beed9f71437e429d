"""The kubelet's /metrics/resource (Prometheus text format, with timestamps) read into points, as
metrics-server's decoder (pkg/scraper/client/resource/decode.go) reads it: node and container CPU as
cumulative core-seconds, working-set memory in bytes, each with the time the kubelet sampled it and the
container's start time (a restarted container starts its counter again)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class Point:
    """One sample: cumulative CPU (core-seconds) and working set (bytes) at `timestamp` (unix seconds);
    either may be missing (None) when the kubelet did not report it."""

    cpu: float | None = None
    cpu_time: float | None = None
    memory: float | None = None
    memory_time: float | None = None
    start_time: float = 0.0

    @property
    def complete(self) -> bool:
        return self.cpu is not None and self.memory is not None and self.cpu_time is not None


@dataclass
class NodeSample:
    node: Point = field(default_factory=Point)
    containers: dict[tuple[str, str, str], Point] = field(default_factory=dict)  # (namespace, pod, container)


class ParseError(ValueError):
    pass


# The text format's label value escapes, undone in one left-to-right pass as Prometheus's text parser
# does (a strings.Replacer: `\\n` is a backslash and an n, not a newline); other escapes stay as written.
_ESCAPE = re.compile(r'\\[\\"n]')
_UNESCAPED = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: _UNESCAPED[m.group()], value) if "\\" in value else value


def _labels(text: str) -> dict[str, str]:
    return {k: _unescape(v) for k, v in _LABEL.findall(text)}


def parse(text: str) -> NodeSample:
    sample = NodeSample()
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise ParseError(f"unparsable line: {line[:120]!r}")
        name, labels_text, value_text, ts_text = m.group(1), m.group(3) or "", m.group(4), m.group(5)
        try:
            value = float(value_text)
        except ValueError:
            raise ParseError(f"bad value in {line[:120]!r}") from None
        if math.isnan(value) or math.isinf(value):
            continue
        when = int(ts_text) / 1000.0 if ts_text else None
        if name.startswith("node_"):
            _node_metric(sample.node, name, value, when)
        elif name.startswith("container_"):
            labels = _labels(labels_text)
            key = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
            if not all(key):
                continue
            _container_metric(sample.containers.setdefault(key, Point()), name, value, when)
    return sample


def _node_metric(point: Point, name: str, value: float, when: float | None) -> None:
    if name == "node_cpu_usage_seconds_total":
        point.cpu, point.cpu_time = value, when
    elif name == "node_memory_working_set_bytes":
        point.memory, point.memory_time = value, when


def _container_metric(point: Point, name: str, value: float, when: float | None) -> None:
    if name == "container_cpu_usage_seconds_total":
        point.cpu, point.cpu_time = value, when
    elif name == "container_memory_working_set_bytes":
        point.memory, point.memory_time = value, when
    elif name == "container_start_time_seconds":
        point.start_time = value
