"""The sequence diagram is well-formed SVG with one lane per component and one mark per step."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from journey import graph
from journey.svg import render_svg
from journey.timeline import timeline
from tests.journey import fixtures as fx

NS = "{http://www.w3.org/2000/svg}"


def test_lanes_and_steps():
    steps = timeline(graph.build(fx.deployment(), fx.pools()))
    root = ET.fromstring(render_svg(steps, "Deployment demo/web"))
    assert root.tag == f"{NS}svg"
    lanes = [g.get("data-lane") for g in root.iter(f"{NS}g") if g.get("class") == "lane-group"]
    assert lanes == ["user", "kube-controller-manager", "kube-scheduler", "kubelet"]
    marks = [g for g in root.iter(f"{NS}g") if g.get("class") == "step"]
    assert len(marks) == len(steps)
    arrows = [line for line in root.iter(f"{NS}line") if line.get("class") == "arrow"]
    assert arrows  # the controller manager reacting to the user, the kubelet to the scheduler...
    assert any("after" in (t.text or "") for t in root.iter(f"{NS}text"))


def test_text_is_escaped():
    pools = fx.pools()
    pools["Event"].append(
        fx.event("p1", "Pod", "web-7d9c-a", "Unhealthy", "kubelet", fx.T1, 'probe <b> & "x"')
    )
    svg = render_svg(timeline(graph.build(fx.deployment(), pools)), "a <b> & c")
    ET.fromstring(svg)
