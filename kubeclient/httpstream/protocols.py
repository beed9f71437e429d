"""Names and numbers of Kubernetes' streaming protocols (apimachinery's util/remotecommand,
util/portforward and httpstream/wsstream), in one place so the agent and the API server agree."""

from __future__ import annotations

from multidict import MultiMapping

Headers = MultiMapping[str]

# remotecommand over WebSocket: each binary message starts with its channel's number.
STREAM_V5 = "v5.channel.k8s.io"  # v4 plus the CLOSE signal: [255, channel] half-closes a channel
STREAM_V4 = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
CLOSE_SIGNAL = 255

# remotecommand over SPDY: one stream per channel, told apart by the streamType header.
SPDY_31 = "SPDY/3.1"
STREAM_TYPE_HEADER = "streamtype"
SPDY_STREAM_TYPES = {STDIN: "stdin", STDOUT: "stdout", STDERR: "stderr", ERROR: "error", RESIZE: "resize"}

# port-forward: SPDY streams (or SPDY tunnelled in WebSocket binary messages, kubectl >= 1.31).
PORT_FORWARD = "portforward.k8s.io"
TUNNELING_PREFIX = "SPDY/3.1+"
KUBERNETES_SUFFIX = ".k8s.io"

# HTTP headers of the upgrade handshakes.
PROTOCOL_VERSION_HEADER = "X-Stream-Protocol-Version"
WEBSOCKET_PROTOCOL_HEADER = "Sec-WebSocket-Protocol"


def header_tokens(values: list[str]) -> list[str]:
    """Comma-separated header values (several headers or one list) as one list of tokens."""
    return [t.strip() for v in values for t in v.split(",") if t.strip()]


def is_upgrade_request(headers: Headers) -> bool:
    """upstream's httpstream.IsUpgradeRequest: Connection names `upgrade` and an Upgrade is asked for."""
    connection = [t.lower() for t in header_tokens(headers.getall("Connection", []))]
    return "upgrade" in connection and bool(headers.getall("Upgrade", []))


def is_websocket_request(headers: Headers) -> bool:
    return is_upgrade_request(headers) and headers.get("Upgrade", "").strip().lower() == "websocket"


def websocket_protocols(headers: Headers) -> list[str]:
    return header_tokens(headers.getall(WEBSOCKET_PROTOCOL_HEADER, []))


def tunneled_spdy_protocols(headers: Headers) -> list[str]:
    """The SPDY protocols a port-forward tunnel asks for (`SPDY/3.1+portforward.k8s.io` -> `portforward.k8s.io`)."""
    return [
        p[len(TUNNELING_PREFIX) :]
        for p in websocket_protocols(headers)
        if p.startswith(TUNNELING_PREFIX) and p.endswith(KUBERNETES_SUFFIX)
    ]
