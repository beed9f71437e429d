"""nginx.conf from a `model.Config`, pure text.

One `server` per host (`server_name` the host; a wildcard `*.example.com` becomes a regex matching one
label, as the Ingress API's wildcard does; the catch-all is the `default_server`), listening on the
HTTP and HTTPS ports: HTTPS with the host's certificate (SNI picks the server) or the controller's
self-signed default one. Only the default server and the hosts with a certificate of their own name
one: nginx builds an SSL context and loads a key for every server block that names a certificate (at
2 000 hosts that was 80 % of each parse), while a block that names none is served on its address's
default server's context, and its requests still reach it by their Host header; a host with a certificate answers plain HTTP with a 308 to HTTPS, as
ingress-nginx's ssl-redirect does. Exact paths are `location = /p`, Prefix paths `location /p/` (plus
`= /p`), so nginx's longest-prefix choice is the API's. Each Service port is an `upstream` of its
ready pod addresses; a Service with none answers 503, a request no rule matches 404. Gateway listeners
on ports of their own (`Config.ports`) get server blocks on those ports, each port with its catch-all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ingresscontroller.model import Config, Location, Server
from ingresscontroller.nginxtext import DOLLAR_VARIABLE, PROXY_HEADERS, quote
from ingresscontroller.routeconf import render_routes, route_paths

# ingress-nginx's defaults for the connections to the pods: idle connections each worker keeps per
# upstream (upstream-keepalive-connections; a pool smaller than the requests in flight closes the rest
# after each answer, so every request above it opens a new connection), requests per connection and idle
# seconds before nginx closes one (upstream-keepalive-requests, -timeout).
UPSTREAM_KEEPALIVE = 320
UPSTREAM_KEEPALIVE_REQUESTS = 10000
UPSTREAM_KEEPALIVE_TIMEOUT = "60s"


@dataclass(frozen=True)
class Listen:
    address: str  # "" = every address
    http_port: int
    https_port: int


@dataclass(frozen=True)
class Files:
    """Where the configuration points: the state dir and its certificate files."""

    root: Path
    default_cert: Path
    default_key: Path

    def cert(self, name: str) -> Path:
        return self.root / "certs" / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.root / "certs" / f"{name}.key"


def server_name(host: str) -> str:
    if not host:
        return "_"
    if host.startswith("*."):
        return quote("~^[^.]+" + re.escape(host[1:]) + "$")
    return host


def _listen(address: str, port: int, ssl: bool, default: bool) -> str:
    where = f"{address}:{port}" if address else str(port)
    return f"    listen {where}{' ssl' if ssl else ''}{' default_server' if default else ''};"


def _proxy(config: Config, upstream: str) -> list[str]:
    target = config.upstreams.get(upstream)
    if target is None or not target.addresses:
        return ["        return 503;"]
    return [f"        proxy_pass http://{upstream};"]


def _location(config: Config, location: Location) -> list[str]:
    if location.exact:
        head = f"    location = {quote(location.path)} {{"
    else:
        prefix = location.path if location.path.endswith("/") else location.path + "/"
        head = f"    location {quote(prefix)} {{"
    body = [f"        return {location.fixed};"] if location.fixed else _proxy(config, location.upstream)
    return [head, *body, "    }"]


def render_server(
    config: Config, server: Server, listen: Listen, files: Files, http: bool = True, https: bool = True
) -> list[str]:
    """One server block, on the HTTP port, the HTTPS port or both."""
    default = server.host == ""
    lines = [
        "server {",
        *([_listen(listen.address, listen.http_port, False, default)] if http else []),
        *([_listen(listen.address, listen.https_port, True, default)] if https else []),
        f"    server_name {server_name(server.host)};",
    ]
    pair = (files.cert(server.certificate), files.key(server.certificate)) if server.certificate else None
    if pair is None and default and https:
        pair = (files.default_cert, files.default_key)
    if pair is not None:
        lines += [
            f"    ssl_certificate {quote(str(pair[0]))};",
            f"    ssl_certificate_key {quote(str(pair[1]))};",
        ]
    if server.certificate and not default and http:
        port = "" if listen.https_port == 443 else f":{listen.https_port}"
        lines += [
            "    if ($scheme = http) {",
            f"        return 308 https://$host{port}$request_uri;",
            "    }",
        ]
    locations = sorted(server.locations.values(), key=lambda loc: (loc.path, loc.exact))
    for location in locations:
        lines += _location(config, location)
    lines += render_routes(server)
    if (False, "/") not in server.locations and (False, "/") not in route_paths(server):
        fallback = (
            _proxy(config, server.default_upstream) if server.default_upstream else ["        return 404;"]
        )
        lines += ["    location / {", *fallback, "    }"]
    return [*lines, "}"]


def _server_count(config: Config) -> int:
    return len(config.servers) + len(config.tls_servers) + sum(len(h) + 1 for h in config.ports.values())


def render(config: Config, listen: Listen, files: Files) -> str:
    root = files.root
    lines = [
        "# Written by the pykubelet ingress controller; rewritten on every change.",
        "daemon off;",
        # One worker per CPU (ingress-nginx's worker-processes): one worker is one core at most.
        "worker_processes auto;",
        "user www-data;",
        f"pid {quote(str(root / 'nginx.pid'))};",
        f"error_log {quote(str(root / 'error.log'))} notice;",
        "events {",
        "    worker_connections 1024;",
        "}",
        "http {",
        "    access_log off;",
        *(
            f"    {kind}_temp_path {quote(str(root / 'tmp' / kind))};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        ),
        "    server_names_hash_bucket_size 128;",
        f"    server_names_hash_max_size {max(512, 2 * _server_count(config))};",
        "    map_hash_bucket_size 128;",
        # As ingress-nginx with upstream keepalive: no Connection header unless upgrading, so nginx keeps
        # its connections to the pods open between requests.
        "    map $http_upgrade $connection_upgrade {",
        "        default upgrade;",
        "        '' '';",
        "    }",
        "    geo $" + DOLLAR_VARIABLE + " {",
        '        default "$";',
        "    }",
        "    proxy_http_version 1.1;",
        # ingress-nginx's proxy-buffering "off": the pod's answer goes to the client as it comes, not
        # first into a buffer (or a temporary file for a large one).
        "    proxy_buffering off;",
        *(f"    proxy_set_header {name} {value};" for name, value in PROXY_HEADERS),
        "    proxy_connect_timeout 5s;",
        "    proxy_next_upstream error timeout;",
    ]
    for upstream in sorted(config.upstreams.values(), key=lambda u: u.name):
        if upstream.addresses:
            weights = upstream.weights or (1,) * len(upstream.addresses)
            servers = [
                f"        server {a}{f' weight={w}' if w != 1 else ''};"
                for a, w in zip(upstream.addresses, weights, strict=True)
            ]
            keep = [
                f"        keepalive {UPSTREAM_KEEPALIVE};",
                f"        keepalive_requests {UPSTREAM_KEEPALIVE_REQUESTS};",
                f"        keepalive_timeout {UPSTREAM_KEEPALIVE_TIMEOUT};",
            ]
            lines += [f"    upstream {upstream.name} {{", *servers, *keep, "    }"]
    servers = dict(config.servers)
    servers.setdefault("", Server(""))
    blocks = [(servers[h], True, h not in config.tls_servers) for h in sorted(servers)]
    blocks += [(config.tls_servers[h], False, True) for h in sorted(config.tls_servers)]
    for server, http, https in blocks:
        lines += [
            "    " + line if line else line
            for line in render_server(config, server, listen, files, http=http, https=https)
        ]
    lines += _listener_ports(config, listen, files)
    return "\n".join([*lines, "}", ""])


def _listener_ports(config: Config, listen: Listen, files: Files) -> list[str]:
    """The servers of Gateway listeners on ports of their own, each port with its catch-all (404; the
    default certificate on HTTPS), on the controller's address."""
    lines = []
    for (port, tls), hosts in sorted(config.ports.items()):
        servers = {"": Server(""), **hosts}
        on = Listen(listen.address, port, port)
        for host in sorted(servers):
            rendered = render_server(config, servers[host], on, files, http=not tls, https=tls)
            lines += ["    " + line if line else line for line in rendered]
    return lines
