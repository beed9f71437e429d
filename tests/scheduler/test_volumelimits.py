"""NodeVolumeLimits for CSI: a node's CSINode allocatable count per driver bounds the distinct volumes its
pods use (bound claims by handle, pending claims of the driver's class, inline CSI volumes); a volume the
node already has does not count twice; drivers without a count and pods without CSI volumes fit."""

from __future__ import annotations

from controlplane.scheduler.volumelimits import MAX_VOLUME_COUNT, NodeVolumeLimits
from tests.scheduler.helpers import make_node, make_pod
from tests.scheduler.test_volumebinding import Store

DRIVER = "d.example.com"


def claim(name: str, volume: str = "", cls: str = "csi") -> dict:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"volumeName": volume, "storageClassName": cls},
    }


def pv(name: str, handle: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"csi": {"driver": DRIVER, "volumeHandle": handle}}}


def uses(*claims: str, inline: bool = False) -> list[dict]:
    out = [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]
    if inline:
        out.append({"name": "scratch", "csi": {"driver": DRIVER}})
    return out


def plugin(count: int | None) -> NodeVolumeLimits:
    claims = Store(claim("a", "pv-a"), claim("b", "pv-b"), claim("a2", "pv-a"), claim("new"), namespaced=True)
    volumes = Store(pv("pv-a", "h-a"), pv("pv-b", "h-b"))
    classes = Store({"metadata": {"name": "csi"}, "provisioner": DRIVER})
    entry = {"name": DRIVER, "nodeID": "n"}
    if count is not None:
        entry["allocatable"] = {"count": count}
    csinodes = Store({"metadata": {"name": "n"}, "spec": {"drivers": [entry]}})
    return NodeVolumeLimits(claims, volumes, classes, csinodes)


def test_the_count_bounds_distinct_volumes():
    limits = plugin(2)
    node = make_node("n")
    node.add_pod(make_pod(name="first", volumes=uses("a")))
    assert limits.filter(make_pod(name="same", volumes=uses("a2")), node) == ()  # the same handle
    assert limits.filter(make_pod(name="second", volumes=uses("b")), node) == ()
    assert limits.filter(make_pod(name="two", volumes=uses("b", "new")), node) == (MAX_VOLUME_COUNT,)
    assert limits.filter(make_pod(name="inline", volumes=uses("b", inline=True)), node) == (MAX_VOLUME_COUNT,)


def test_no_count_or_no_csi_fits():
    node = make_node("n")
    node.add_pod(make_pod(name="first", volumes=uses("a", "b")))
    assert plugin(None).filter(make_pod(name="more", volumes=uses("new")), node) == ()
    assert plugin(1).applies(make_pod(name="plain")) is False
    assert plugin(1).filter(make_pod(name="empty", volumes=[{"name": "e", "emptyDir": {}}]), node) == ()
