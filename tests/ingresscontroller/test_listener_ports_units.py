"""Gateway listeners on the ports they name (`listenerports` and `gateway.build`, pure, plus the rendered
configuration through the real `nginx -t` where nginx is installed): a listener on a port of its own
gets `listen` directives on the controller's address and its routes there, not on the Ingress ports; an
HTTP listener on the Ingress HTTP port shares the Ingresses' servers; one Gateway's HTTP and HTTPS
listeners on one port are each Conflicted (ProtocolConflict, Accepted False Invalid, Programmed False, as
the conformance suite's gateway-listener-protocol-and-route-kind-conflicts expects); listeners with the same
port, protocol and hostname are Conflicted HostnameConflict (across Gateways, which share the address,
the older one's kept and the newer one's Accepted False PortUnavailable; within one Gateway both); a port
held elsewhere, the Ingress port of the other protocol, or another Gateway's port of another protocol is
Accepted False PortUnavailable; the other listeners and their routes are served all the same."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ingresscontroller import gateway, model
from ingresscontroller.listenerports import Ports, parse_ranges, place
from ingresscontroller.nginxconf import Files, Listen, render
from kubeclient.serving import ensure_self_signed


def _gateway(name: str, created: str, *listeners: tuple[str, str, int] | tuple[str, str, int, str]) -> dict:
    """A Gateway of ours; each listener (name, protocol, port[, hostname])."""
    return {
        "metadata": {"name": name, "namespace": "ns", "generation": 1, "creationTimestamp": created},
        "spec": {
            "gatewayClassName": "ours",
            "listeners": [
                {
                    "name": item[0],
                    "protocol": item[1],
                    "port": item[2],
                    **({"hostname": item[3]} if item[3:] else {}),
                }
                for item in listeners
            ],
        },
    }


def _route(gateway_name: str, host: str, section: str = "") -> dict:
    parent = {"name": gateway_name, **({"sectionName": section} if section else {})}
    return {
        "metadata": {"name": f"r-{host}", "namespace": "ns", "generation": 1, "creationTimestamp": "t"},
        "spec": {
            "parentRefs": [parent],
            "hostnames": [host],
            "rules": [{"backendRefs": [{"name": "web", "port": 80}]}],
        },
    }


CLUSTER = model.Cluster(
    services={"ns/web": {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}},
    slices={
        "ns/web": [
            {
                "addressType": "IPv4",
                "ports": [{"name": "", "port": 8080}],
                "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": True}}],
            }
        ]
    },
    secrets={},
)
CLASSES = [{"metadata": {"name": "ours"}, "spec": {"controllerName": "c"}}]


def _conditions(listener: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in listener["conditions"]}


def test_placement_of_each_listener() -> None:
    gateways = [
        _gateway(
            "a",
            "2026-01-01T00:00:00Z",
            ("web", "HTTP", 8080),
            ("ingress-port", "HTTP", 80),
            ("held", "HTTP", 9999),
            ("clash-http", "HTTP", 8443),
            ("clash-https", "HTTPS", 8443),
        ),
        _gateway("b", "2026-01-02T00:00:00Z", ("other-protocol", "HTTPS", 8080), ("same", "HTTP", 8080)),
        _gateway("c", "2026-01-03T00:00:00Z", ("wrong-ingress-port", "HTTPS", 80)),
    ]
    placed = place(gateways, Ports(80, 443, {9999: "port 9999 is in use"}))
    assert placed[("ns", "a", "web")].ok and placed[("ns", "a", "web")].slot == "own"
    assert placed[("ns", "a", "ingress-port")].slot == "http"
    assert placed[("ns", "c", "wrong-ingress-port")].reason == "PortUnavailable"
    assert placed[("ns", "a", "held")].reason == "PortUnavailable"
    assert placed[("ns", "a", "held")].message == "port 9999 is in use"
    assert placed[("ns", "a", "clash-http")].conflict == "ProtocolConflict"
    assert placed[("ns", "a", "clash-https")].conflict == "ProtocolConflict"
    # Gateway b is newer: within b, HTTPS and HTTP on 8080 conflict; a keeps 8080 for HTTP either way.
    assert placed[("ns", "b", "other-protocol")].conflict == "ProtocolConflict"
    # Another Gateway's port of another protocol (every Gateway shares the address): the older keeps it.
    alone = place([_gateway("b", "2026-01-02T00:00:00Z", ("tls", "HTTPS", 8080)), gateways[0]], Ports())
    assert alone[("ns", "b", "tls")].reason == "PortUnavailable"
    assert "ns/a" in alone[("ns", "b", "tls")].message
    assert alone[("ns", "a", "web")].ok


def test_statuses_and_configuration_of_good_and_bad_listeners(tmp_path: Path) -> None:
    gw = _gateway(
        "gw",
        "2026-01-01T00:00:00Z",
        ("web", "HTTP", 18080),
        ("held", "HTTP", 18081),
        ("clash-http", "HTTP", 18443),
        ("clash-https", "HTTPS", 18443),
    )
    config = model.Config()
    statuses = gateway.build(
        config,
        CLASSES,
        [gw],
        [_route("gw", "web.example")],
        CLUSTER,
        "c",
        "127.0.0.1",
        ports=Ports(18000, 18001, {18081: "port 18081 is in use on 127.0.0.1"}),
    )
    status = statuses.gateways["ns/gw"]
    listeners = {entry["name"]: entry for entry in status["listeners"]}
    assert _conditions(listeners["web"]) == {
        "Accepted": ("True", "Accepted"),
        "Programmed": ("True", "Programmed"),
        "ResolvedRefs": ("True", "ResolvedRefs"),
        "Conflicted": ("False", "NoConflicts"),
    }
    assert listeners["web"]["attachedRoutes"] == 1
    assert _conditions(listeners["held"])["Accepted"] == ("False", "PortUnavailable")
    assert _conditions(listeners["held"])["Programmed"] == ("False", "Invalid")
    assert _conditions(listeners["held"])["ResolvedRefs"] == ("True", "ResolvedRefs")
    assert listeners["held"]["attachedRoutes"] == 0
    for name in ("clash-http", "clash-https"):
        assert _conditions(listeners[name])["Accepted"] == ("False", "Invalid")
        assert _conditions(listeners[name])["Programmed"] == ("False", "Invalid")
        assert _conditions(listeners[name])["Conflicted"] == ("True", "ProtocolConflict")
        assert listeners[name]["attachedRoutes"] == 0
    gateway_conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert gateway_conditions == {
        "Accepted": ("True", "ListenersNotValid"),
        "Programmed": ("True", "Programmed"),
    }
    # The route is served on its listener's port alone: not on the Ingress ports, not on the bad ones.
    assert list(config.ports) == [(18080, False)]
    assert "web.example" in config.ports[(18080, False)] and "web.example" not in config.servers
    cert, key = ensure_self_signed(tmp_path / "certs", "ingress.local", [], "default-fake")
    text = render(config, Listen("127.0.0.1", 18000, 18001), Files(tmp_path, cert, key))
    assert "listen 127.0.0.1:18080 default_server;" in text
    assert "listen 127.0.0.1:18080;" in text
    assert "18081" not in text and "18443" not in text
    if shutil.which("nginx"):
        for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (tmp_path / "tmp" / sub).mkdir(parents=True, exist_ok=True)
        conf = tmp_path / "nginx.conf"
        conf.write_text(text)
        checked = subprocess.run(
            ["nginx", "-t", "-c", str(conf), "-p", str(tmp_path), "-e", str(tmp_path / "e.log")],
            capture_output=True,
            text=True,
        )
        assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("port", [18000, 18001])
def test_a_listener_on_an_ingress_port(port: int) -> None:
    """HTTP on the Ingress HTTP port shares the Ingresses' servers; on the HTTPS one it cannot be served."""
    config = model.Config()
    statuses = gateway.build(
        config,
        CLASSES,
        [_gateway("gw", "t", ("web", "HTTP", port))],
        [_route("gw", "web.example")],
        CLUSTER,
        "c",
        "127.0.0.1",
        ports=Ports(18000, 18001),
    )
    (listener,) = statuses.gateways["ns/gw"]["listeners"]
    if port == 18000:
        assert _conditions(listener)["Accepted"] == ("True", "Accepted")
        assert "web.example" in config.servers and not config.ports
    else:
        assert _conditions(listener)["Accepted"] == ("False", "PortUnavailable")
        assert not config.servers and not config.ports


def test_reserved_ports_are_port_unavailable() -> None:
    """--reserved-ports (the rig reserves the Services' node ports, DNATed on every local address)."""
    assert parse_ranges("30000-32767, 10250") == (range(30000, 32768), range(10250, 10251))
    for bad in ("0", "70000", "9-8", "x"):
        with pytest.raises(ValueError):
            parse_ranges(bad)
    gateways = [
        _gateway("gw", "t", ("node-port", "HTTP", 30080), ("kubelet", "HTTP", 10250), ("web", "HTTP", 8080))
    ]
    placed = place(gateways, Ports(reserved=parse_ranges("30000-32767,10250")))
    assert placed[("ns", "gw", "node-port")].reason == "PortUnavailable"
    assert "30000-32767" in placed[("ns", "gw", "node-port")].message
    assert (
        placed[("ns", "gw", "kubelet")].message
        == "port 10250 is reserved on this controller (--reserved-ports 10250)"
    )
    assert placed[("ns", "gw", "web")].ok


def test_listeners_not_distinct_by_hostname_conflict() -> None:
    """Same port, protocol and hostname (none counts as one): the older Gateway keeps the listener, by
    creationTimestamp, then namespace/name; within one Gateway (which the CRD's CEL rule refuses) both."""
    old = _gateway(
        "old",
        "2026-01-01T00:00:00Z",
        ("any", "HTTP", 8080),
        ("named", "HTTP", 8080, "a.example"),
        ("tls", "HTTPS", 8443, "a.example"),
        ("ingress", "HTTP", 80),
    )
    new = _gateway(
        "new",
        "2026-01-02T00:00:00Z",
        ("any", "HTTP", 8080),
        ("named", "HTTP", 8080, "a.example"),
        ("tls", "HTTPS", 8443, "a.example"),
        ("ingress", "HTTP", 80),
        ("other-name", "HTTP", 8080, "b.example"),
        ("wildcard", "HTTP", 8080, "*.a.example"),
        ("other-tls", "HTTPS", 8443, "b.example"),
    )
    placed = place([new, old], Ports())
    for name in ("any", "named", "tls", "ingress"):
        assert placed[("ns", "old", name)].ok, name
        lost = placed[("ns", "new", name)]
        assert (lost.reason, lost.conflict) == ("PortUnavailable", "HostnameConflict"), name
        assert f"listener {name} of Gateway ns/old" in lost.message, lost.message
    assert placed[("ns", "new", "any")].message == (
        "port 8080 (HTTP, no hostname) is served for listener any of Gateway ns/old (older, same address)"
    )
    for name in ("other-name", "wildcard", "other-tls"):  # distinct hostnames: both served
        assert placed[("ns", "new", name)].ok, name
    # The same second: namespace/name decides.
    same_time = place(
        [_gateway("b", "t", ("x", "HTTP", 8080)), _gateway("a", "t", ("x", "HTTP", 8080))], Ports()
    )
    assert same_time[("ns", "a", "x")].ok and same_time[("ns", "b", "x")].conflict == "HostnameConflict"
    # Within one Gateway no listener wins: each is conflicted (Accepted False Invalid), the rest served.
    twins = place(
        [_gateway("g", "t", ("one", "HTTP", 8080), ("two", "HTTP", 8080), ("own", "HTTP", 9090))], Ports()
    )
    for name in ("one", "two"):
        assert (twins[("ns", "g", name)].reason, twins[("ns", "g", name)].conflict) == (
            "Invalid",
            "HostnameConflict",
        )
    assert twins[("ns", "g", "own")].ok
    # A conflicted listener claims nothing: a third Gateway's twin of it loses to the oldest alone.
    third = place([old, new, _gateway("z", "2026-01-03T00:00:00Z", ("any", "HTTP", 8080))], Ports())
    assert "listener any of Gateway ns/old" in third[("ns", "z", "any")].message


def test_a_conflicted_listener_serves_no_route_and_the_others_keep_theirs() -> None:
    old = _gateway("old", "2026-01-01T00:00:00Z", ("web", "HTTP", 18080))
    new = _gateway(
        "new", "2026-01-02T00:00:00Z", ("web", "HTTP", 18080), ("mine", "HTTP", 18080, "mine.example")
    )
    config = model.Config()
    statuses = gateway.build(
        config,
        CLASSES,
        [new, old],
        [_route("old", "kept.example"), _route("new", "lost.example", "web"), _route("new", "mine.example")],
        CLUSTER,
        "c",
        "127.0.0.1",
        ports=Ports(18000, 18001),
    )
    listeners = {e["name"]: e for e in statuses.gateways["ns/new"]["listeners"]}
    assert _conditions(listeners["web"]) == {
        "Accepted": ("False", "PortUnavailable"),
        "Programmed": ("False", "Invalid"),
        "ResolvedRefs": ("True", "ResolvedRefs"),
        "Conflicted": ("True", "HostnameConflict"),
    }
    assert listeners["web"]["attachedRoutes"] == 0
    assert _conditions(listeners["mine"])["Accepted"] == ("True", "Accepted")
    assert _conditions(listeners["mine"])["Conflicted"] == ("False", "NoConflicts")
    assert listeners["mine"]["attachedRoutes"] == 1
    (kept,) = statuses.gateways["ns/old"]["listeners"]
    assert _conditions(kept)["Accepted"] == ("True", "Accepted") and kept["attachedRoutes"] == 1
    accepted = next(c for c in statuses.gateways["ns/new"]["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("True", "ListenersNotValid")
    assert accepted["message"] == "listeners not valid: web; conflicted: web; accepted: mine"
    lost = statuses.routes["ns/r-lost.example"]["parents"][0]
    assert [c["status"] for c in lost["conditions"] if c["type"] == "Accepted"] == ["False"]
    # Served: the older Gateway's route and the newer one's on its distinct listener; not the lost one.
    assert set(config.ports[(18080, False)]) == {"kept.example", "mine.example"}
