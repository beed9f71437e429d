"""The timeline as a sequence diagram a person opens in a browser: one lane per component (the user,
kube-controller-manager, kube-scheduler, kubelet...), one arrow per write from the writer's lane to the
lane of the step it reacted to, labelled with the object, what was written and the gap. Standalone SVG
1.1, written with xml.etree so it is always well-formed."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from journey.timeline import Step, gap_text

LANE_W = 220
ROW_H = 26
TOP = 60
SVG_NS = "http://www.w3.org/2000/svg"
LANE_ORDER = ("user", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet")


def lanes_of(steps: list[Step]) -> list[str]:
    present = list(dict.fromkeys(s.writer for s in steps))
    known = [lane for lane in LANE_ORDER if lane in present]
    return known + [lane for lane in present if lane not in known]


def render_svg(steps: list[Step], title: str) -> str:
    lanes = lanes_of(steps)
    width = max(1, len(lanes)) * LANE_W + 40
    height = TOP + (len(steps) + 1) * ROW_H + 20
    ET.register_namespace("", SVG_NS)
    svg = ET.Element(
        f"{{{SVG_NS}}}svg",
        {"width": str(width), "height": str(height), "viewBox": f"0 0 {width} {height}", "version": "1.1"},
    )
    style = ET.SubElement(svg, f"{{{SVG_NS}}}style")
    style.text = (
        "text{font-family:sans-serif;font-size:11px} .lane{font-weight:bold;font-size:13px}"
        " .approx{fill:#777} line.life{stroke:#bbb;stroke-dasharray:4 3} line.arrow{stroke:#246;marker-end:url(#head)}"
    )
    defs = ET.SubElement(svg, f"{{{SVG_NS}}}defs")
    marker = ET.SubElement(
        defs,
        f"{{{SVG_NS}}}marker",
        {"id": "head", "markerWidth": "8", "markerHeight": "8", "refX": "8", "refY": "4", "orient": "auto"},
    )
    ET.SubElement(marker, f"{{{SVG_NS}}}path", {"d": "M0,0 L8,4 L0,8 z", "fill": "#246"})
    ET.SubElement(svg, f"{{{SVG_NS}}}text", {"x": "20", "y": "20", "class": "lane"}).text = title
    x_of = {lane: 20 + i * LANE_W + LANE_W // 2 for i, lane in enumerate(lanes)}
    for lane, x in x_of.items():
        group = ET.SubElement(svg, f"{{{SVG_NS}}}g", {"class": "lane-group", "data-lane": lane})
        ET.SubElement(
            group, f"{{{SVG_NS}}}text", {"x": str(x), "y": "45", "class": "lane", "text-anchor": "middle"}
        ).text = lane
        ET.SubElement(
            group,
            f"{{{SVG_NS}}}line",
            {"x1": str(x), "y1": "50", "x2": str(x), "y2": str(height - 10), "class": "life"},
        )
    start = steps[0].time if steps else None
    for i, step in enumerate(steps):
        y = TOP + (i + 1) * ROW_H
        x2 = x_of[step.writer]
        cause = steps[step.cause] if step.cause is not None else None
        x1 = x_of[cause.writer] if cause else x2
        g = ET.SubElement(svg, f"{{{SVG_NS}}}g", {"class": "step", "data-writer": step.writer})
        if x1 != x2:
            ET.SubElement(
                g,
                f"{{{SVG_NS}}}line",
                {"x1": str(x1), "y1": str(y - 8), "x2": str(x2), "y2": str(y), "class": "arrow"},
            )
        else:
            ET.SubElement(g, f"{{{SVG_NS}}}circle", {"cx": str(x2), "cy": str(y), "r": "3", "fill": "#246"})
        offset = (step.time - start).total_seconds() if start else 0.0
        text = f"+{offset:.3f}s {step.obj} {step.what}"
        if cause is not None:
            text += f" ({gap_text(step, cause)})"
        attrs = {"x": str(min(x1, x2) + 6), "y": str(y - 2)}
        if not step.exact:
            attrs["class"] = "approx"
        ET.SubElement(g, f"{{{SVG_NS}}}text", attrs).text = text
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(svg, encoding="unicode") + "\n"
