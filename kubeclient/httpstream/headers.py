"""What a reverse proxy in this project drops between hops and how much it moves at a time, in one place
so the API server's resource proxy (pods/services/nodes proxy) and the aggregator's proxy agree.

The set is the hop-by-hop headers of RFC 9110 section 7.6.1 (as Go's httputil.ReverseProxy removes
them) plus the caller's credentials (`Authorization`, which upstream's proxies strip so a token meant for
the API server never reaches a pod or an extension server), `Host` (the dialled address decides it) and
`Content-Length` (the relay streams, so the length is whatever the writer sends)."""

from __future__ import annotations

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-authenticate",
        "proxy-authorization",
        "authorization",
        "host",
        "content-length",
    }
)
# Bytes read from the backend per write towards the client.
CHUNK_SIZE = 64 * 1024


def is_hop_by_hop(header: str) -> bool:
    return header.lower() in HOP_BY_HOP
