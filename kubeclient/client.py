"""An asyncio REST client for the Kubernetes API, over JSON dicts.

The official Python client blocks (a thread per call in flight, another per watch), and every component
here shares one event loop with its own work (the agent with CRI and its pod workers, the scheduler with
its decisions), so this is a thin aiohttp client instead: one keep-alive connection pool, a token-bucket
rate limit (client-go's QPS and burst), and retries with backoff where a retry cannot do harm:

- a 429 or a 5xx carrying Retry-After (the server asks to be asked again) for every verb, after that
  many seconds, as client-go's request.go (`checkWait`) retries;
- a connection that could not be made, or a body that could not be written (nothing reached the
  server) for every verb, as Go's transport does;
- other connection failures, timeouts and 5xx without Retry-After only for reads (GET, HEAD): a write
  that may have reached the server is never sent again, as client-go retries connection errors only for
  GET: a generateName create cannot duplicate, and a PATCH (not idempotent: a JSON patch `add` to a
  list appends again) is not applied twice.

Errors come out as `ApiError` carrying the server's Status.

Failover: a config naming several replicas of the API server (`ClusterConfig.servers`) sends every
request to the current one and moves to the next when it cannot be reached or answers a retryable 5xx;
the retries above then go there (a POST only when nothing was sent). A watch that breaks moves too, and
its caller (the informer) resumes from its last resourceVersion on the next replica: every replica's
watch cache is fed from the same etcd, so resourceVersions mean the same everywhere and no event is lost
or repeated. With one server nothing changes.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp

from kubeclient.backoff import Backoff
from kubeclient.config import ClusterConfig, load_client_certificate
from kubeclient.errors import ApiError
from kubeclient.execcredential import ExecError
from kubeclient.jsoncodec import dumps, loads
from kubeclient.ratelimit import TokenBucket
from kubeclient.version import KUBERNETES_VERSION

log = logging.getLogger("kubeclient")

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
READS = frozenset({"GET", "HEAD"})
# A watch that sends nothing (not even the bookmark servers send about every minute) for this long is
# taken as a dead peer; the caller resumes from its last resourceVersion.
WATCH_SILENCE = 150.0


class Replicas:
    """The API server URLs in order and which one is in use; shared by a client and its derived ones."""

    def __init__(self, urls: tuple[str, ...]) -> None:
        self.urls = urls
        self.index = 0

    @property
    def current(self) -> str:
        return self.urls[self.index]

    def failed(self, url: str, why: str) -> bool:
        """`url` failed: move on from it (unless another call already has). False with one server."""
        if len(self.urls) < 2:
            return False
        if self.current == url:
            self.index = (self.index + 1) % len(self.urls)
            log.warning("api failover from=%s to=%s cause=%s", url, self.current, why)
        return True


def replicas_from_endpoints(endpoints: dict[str, Any]) -> tuple[str, ...]:
    """The API server URLs the `default/kubernetes` Endpoints list (https://ip:port, in their order)."""
    urls = []
    for subset in endpoints.get("subsets") or []:
        ports = [p.get("port") for p in subset.get("ports") or [] if p.get("name") in ("https", None, "")]
        for address in subset.get("addresses") or []:
            ip = address.get("ip", "")
            host = f"[{ip}]" if ":" in ip else ip
            urls += [f"https://{host}:{port}" for port in ports[:1] if ip and port]
    return tuple(urls)


def user_agent(component: str) -> str:
    """client-go's shape, `<component>/<version> (linux/amd64) kubernetes/<commit>`; the API server takes
    the part before "/" as the default field manager."""
    return f"{component}/{KUBERNETES_VERSION} (linux/amd64) kubernetes/pykubelet"


class KubeClient:
    def __init__(
        self,
        config: ClusterConfig,
        *,
        qps: float = 50.0,
        burst: int = 100,
        max_attempts: int = 5,
        request_timeout: float = 30.0,
        component: str = "pykubelet",
        max_connections: int = 64,
    ) -> None:
        self.config = config
        self.limiter = TokenBucket(qps, burst)
        self.max_attempts = max_attempts
        self.request_timeout = request_timeout
        self.user_agent = user_agent(component)
        self.max_connections = max_connections
        self._ssl = config.ssl_context()
        self._session: aiohttp.ClientSession | None = None
        self.replicas = Replicas(config.all_servers)

    @property
    def server(self) -> str:
        """The API server in use (the config's `server` unless a failover moved on)."""
        return self.replicas.current

    async def discover_replicas(self) -> tuple[str, ...]:
        """Add the API servers the `kubernetes` Service's Endpoints list (every live replica, kept by the
        lease endpoint reconciler) after the configured ones: what an in-cluster client, whose config
        names only the Service's ClusterIP, can fail over to. Returns the whole list now in use."""
        endpoints = await self.get("/api/v1/namespaces/default/endpoints/kubernetes")
        found = replicas_from_endpoints(endpoints)
        self.replicas.urls = tuple(dict.fromkeys((*self.replicas.urls, *found)))
        return self.replicas.urls

    def derive(self, qps: float | None = None, burst: int | None = None) -> KubeClient:
        """A client on the same connections and credentials with a rate limit of its own, as client-go
        gives each controller its own clientset. Call it on the event loop; the parent closes the pool."""
        other = copy.copy(self)
        other.limiter = TokenBucket(
            self.limiter.qps if qps is None else qps, self.limiter.burst if burst is None else burst
        )
        other._session = self._get_session()
        other._derived = True
        return other

    def reload_client_certificate(
        self, cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]
    ) -> None:
        """Take a new client certificate for the connections opened from now on (certificate rotation);
        the derived clients share the context, so they take it too. Connections already open keep the
        certificate they shook hands with (still valid: rotation happens well before expiry)."""
        if self._ssl is None:
            raise ValueError("a plain-HTTP client has no client certificate")
        self._ssl.load_cert_chain(str(cert_file), str(key_file))

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                ssl=self._ssl if self._ssl is not None else False, limit=self.max_connections
            )
            auth = None
            if self.config.username and self.config.password is not None:
                auth = aiohttp.BasicAuth(self.config.username, self.config.password)
            self._session = aiohttp.ClientSession(
                connector=connector, headers={"User-Agent": self.user_agent, "Accept": JSON}, auth=auth
            )
        return self._session

    async def _headers(self, content_type: str | None, what: str) -> dict[str, str]:
        headers: dict[str, str] = {}
        try:
            if self.config.exec is not None:  # one credential for both the token and the certificate
                credential = await self.config.exec.credential()
                token: str | None = credential.token
                self._exec_certificate(credential.certificate)
            else:
                token = self.config.bearer_token()
        except ExecError as err:  # client-go: "getting credentials: exec: ..."
            raise ApiError(0, "Unauthorized", f"getting credentials: {err}", what=what) from None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    _exec_pair: tuple[bytes, bytes] | None = None

    def _exec_certificate(self, pair: tuple[bytes, bytes] | None) -> None:
        """An exec plugin's client certificate, loaded for the connections made from now on. When it
        rotates, connections already pooled keep the old one until they idle out (aiohttp's 15 s
        keep-alive); client-go closes them at once instead."""
        if pair is None or pair == self._exec_pair:
            return
        if self._ssl is None:
            raise ExecError("exec plugin returned a client certificate for a plain-HTTP server")
        try:
            load_client_certificate(self._ssl, *pair)
        except (ssl.SSLError, ValueError) as err:
            raise ExecError(f"failed parsing client key/certificate: {err}") from None
        self._exec_pair = pair

    def _refused(self, status: int, headers: dict[str, str]) -> None:
        """A 401 spends an exec plugin's credential: the next request runs the plugin again."""
        if status == 401 and self.config.exec is not None:
            self.config.exec.refused(headers.get("Authorization", "").removeprefix("Bearer "))

    _derived = False

    async def close(self) -> None:
        if self._derived:
            return  # the pool is the parent's
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- one call ------------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        retry: bool = True,
        deadline: float | None = None,
    ) -> Any:
        """One API call with the rate limit and the retries above; returns the decoded JSON body.
        `deadline` bounds each attempt (default: the client's request_timeout)."""
        backoff = Backoff(initial=0.2, maximum=5.0)
        replicas = len(self.replicas.urls)
        # With several replicas each gets a try before the attempts run out.
        attempts = max(self.max_attempts, replicas) if retry else 1
        data = None if body is None else (body if isinstance(body, bytes) else dumps(body))
        query = _query(params)
        what = f"{method} {path}"
        for attempt in range(1, attempts + 1):
            await self.limiter.acquire()
            server = self.server
            headers = await self._headers(content_type if data is not None else None, what)
            try:
                async with self._get_session().request(
                    method,
                    server + path,
                    params=query,
                    data=data,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=deadline or self.request_timeout),
                ) as resp:
                    raw = await resp.read()
                    if resp.status < 400:
                        return loads(raw) if raw else {}
                    self._refused(resp.status, headers)
                    err = ApiError.from_response(resp.status, raw, what)
                    wait = _retry_after(resp.headers.get("Retry-After"))
                    retryable = retryable_answer(method, resp.status, wait)
                    sick = resp.status in RETRYABLE_STATUS and resp.status != 429
                    if sick and self.replicas.failed(server, str(resp.status)) and retryable:
                        if attempt < replicas:
                            continue  # another replica may answer now: no wait
                    if not retryable or attempt == attempts:
                        raise err
                    delay = wait if wait is not None else backoff.next()
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
                moved = self.replicas.failed(server, type(exc).__name__)
                if (method not in READS and not _unsent(exc)) or attempt == attempts:
                    raise ApiError(0, "Unreachable", str(exc) or type(exc).__name__, what=what) from None
                if moved and attempt < replicas:
                    continue
                delay = backoff.next()
            log.debug("api retry method=%s path=%s attempt=%d delay=%.2f", method, path, attempt, delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def websocket(
        self, path: str, params: list[tuple[str, str]], protocols: tuple[str, ...]
    ) -> aiohttp.ClientWebSocketResponse:
        """A WebSocket to `path` on the API server in use, with our credentials (for pods/exec)."""
        await self.limiter.acquire()
        headers = await self._headers(None, f"WEBSOCKET {path}")
        return await self._get_session().ws_connect(
            self.server + path, params=params, protocols=protocols, headers=headers, heartbeat=None
        )

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        return await self.request("GET", path, params=params)

    async def create(self, path: str, body: dict[str, Any], **params: Any) -> dict[str, Any]:
        return await self.request("POST", path, body=body, params=params)

    async def replace(self, path: str, body: dict[str, Any], **params: Any) -> dict[str, Any]:
        return await self.request("PUT", path, body=body, params=params)

    async def patch(
        self, path: str, body: Any, content_type: str = STRATEGIC_PATCH, **params: Any
    ) -> dict[str, Any]:
        return await self.request("PATCH", path, body=body, content_type=content_type, params=params)

    async def delete(self, path: str, body: dict[str, Any] | None = None, **params: Any) -> dict[str, Any]:
        return await self.request("DELETE", path, body=body, params=params)

    async def list(
        self, path: str, params: Mapping[str, Any] | None = None, page: int = 500
    ) -> tuple[list[dict[str, Any]], str]:
        """All items (following `continue`, one consistent snapshot) and the list's resourceVersion.

        Items carry apiVersion and kind, taken from the list where the server left them out (upstream
        omits them in list items), so an item reads like the object a watch or a GET returns."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            out = await self.request(
                "GET", path, params={**(params or {}), "limit": page, "continue": token}, deadline=120
            )
            kind = str(out.get("kind") or "")
            item_kind = kind[:-4] if kind.endswith("List") else ""
            for item in out.get("items") or ():
                if item_kind and isinstance(item, dict) and not item.get("kind"):
                    item["kind"] = item_kind
                    item.setdefault("apiVersion", out.get("apiVersion", "v1"))
                items.append(item)
            meta = out.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    # --- watch ---------------------------------------------------------------------------------------

    async def watch(
        self, path: str, params: Mapping[str, Any] | None = None, idle_timeout: float = WATCH_SILENCE
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events ({type, object}) from one watch request until the server ends it.

        An ERROR event (410 Gone for a too-old resourceVersion, say) is raised as ApiError. If nothing
        arrives for `idle_timeout` seconds the stream is taken as dead (a half-open connection) and
        ApiError(0) is raised, as for any other broken connection."""
        await self.limiter.acquire()
        query = _query({**(params or {}), "watch": True})
        what = f"WATCH {path}"
        server = self.server
        headers = await self._headers(None, what)
        try:
            async with self._get_session().get(
                server + path,
                params=query,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=idle_timeout),
            ) as resp:
                if resp.status >= 400:
                    self._refused(resp.status, headers)
                    raise ApiError.from_response(resp.status, await resp.read(), what)
                async for line in _lines(resp.content):
                    event = loads(line)
                    if not isinstance(event, dict):
                        raise ValueError("a watch event is not an object")
                    if event.get("type") == "ERROR":
                        raise ApiError.from_status(event.get("object") or {}, what)
                    yield event
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
            # The caller resumes from its last resourceVersion, on the next replica if there is one.
            self.replicas.failed(server, type(exc).__name__)
            raise ApiError(0, "Unreachable", str(exc) or type(exc).__name__, what=what) from None


def retryable_answer(method: str, status: int, retry_after: float | None) -> bool:
    """Whether an error answer may be asked again: any verb when the server sent a 429 or 5xx with
    Retry-After (client-go's checkWait), and reads on any 429 or 5xx that may pass (failover, a
    restarting server); a write without Retry-After may have been carried out."""
    if retry_after is not None and (status == 429 or status >= 500):
        return True
    return method in READS and status in RETRYABLE_STATUS


def _unsent(exc: BaseException) -> bool:
    """Whether a failed request certainly never reached a server, so even a POST may go again: no
    connection was made, or the body could not be written (a pooled connection the server had closed,
    or a server that died: it cannot have acted on a request whose body it never had). Go's transport
    retries the same cases (nothing written, or a closed idle connection). aiohttp gives the body's
    failure no type of its own, only ClientOSError with this text."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return True
    return isinstance(exc, aiohttp.ClientOSError) and "Can not write request body" in str(exc)


async def _lines(stream: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Newline-delimited records of any length (aiohttp's readline caps a line at 64 KiB, and one pod
    with a large last-applied annotation can exceed that)."""
    buf = b""
    async for chunk in stream.iter_any():
        if b"\n" not in chunk:
            buf += chunk
            continue
        # Every complete line of the chunk at once: splitting one line off at a time copied the rest
        # of the buffer for each (a burst of events arrives as one large chunk).
        lines = (buf + chunk).split(b"\n")
        buf = lines.pop()
        for line in lines:
            if line.strip():
                yield line
    if buf.strip():
        yield buf


def _query(params: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (params or {}).items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else value
    return out


def _retry_after(value: str | None) -> float | None:
    """Retry-After in whole seconds, as client-go reads it (a date or a fraction is no Retry-After),
    capped at 10 s."""
    try:
        return min(float(int(value)), 10.0) if value and int(value) >= 0 else None
    except ValueError:
        return None
