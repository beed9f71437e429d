"""Rewriting a proxied HTML page so its links lead back through the proxy, as upstream's proxy transport
(k8s.io/apimachinery/pkg/util/proxy/transport.go and rewrite.go) does for pods/proxy, services/proxy and
nodes/proxy: a page served at `/` by a pod and read at `/api/v1/namespaces/ns/pods/web/proxy/` links to
`/style.css`, which only works if the link becomes `/api/v1/namespaces/ns/pods/web/proxy/style.css`.

Only `text/html` is touched; the URL attributes are upstream's table (`atomsToAttrs`); a link is
rewritten when its path is absolute and its host is empty, the backend's address or the Host the
client asked for; relative links and other hosts stay as they are. gzip and deflate bodies are
decoded, rewritten and encoded again; any other encoding passes untouched (upstream logs and gives up
too). Redirects to the backend itself get the same treatment in their Location. Everything here is
pure (bytes in, bytes out) so it runs in a worker thread, off the event loop."""

from __future__ import annotations

import gzip
import posixpath
import zlib
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import quote, urlsplit, urlunsplit

# upstream's atomsToAttrs: the attributes of each element that hold a URL.
URL_ATTRS: dict[str, frozenset[str]] = {
    "a": frozenset({"href"}),
    "applet": frozenset({"codebase"}),
    "area": frozenset({"href"}),
    "audio": frozenset({"src"}),
    "base": frozenset({"href"}),
    "blockquote": frozenset({"cite"}),
    "body": frozenset({"background"}),
    "button": frozenset({"formaction"}),
    "command": frozenset({"icon"}),
    "del": frozenset({"cite"}),
    "embed": frozenset({"src"}),
    "form": frozenset({"action"}),
    "frame": frozenset({"longdesc", "src"}),
    "head": frozenset({"profile"}),
    "html": frozenset({"manifest"}),
    "iframe": frozenset({"longdesc", "src"}),
    "img": frozenset({"longdesc", "src", "usemap"}),
    "input": frozenset({"src", "usemap", "formaction"}),
    "ins": frozenset({"cite"}),
    "link": frozenset({"href"}),
    "object": frozenset({"classid", "codebase", "data", "usemap"}),
    "q": frozenset({"cite"}),
    "script": frozenset({"src"}),
    "source": frozenset({"src"}),
    "video": frozenset({"poster", "src"}),
}
# Access-Control-* headers of the backend are dropped (upstream's corsRemovingTransport): the API
# server's origin policy is not the pod's to set.
CORS_HEADERS = frozenset(
    {
        "access-control-allow-credentials",
        "access-control-allow-headers",
        "access-control-allow-methods",
        "access-control-allow-origin",
    }
)


@dataclass(frozen=True)
class Rewriter:
    """One proxied request: `prepend` is the proxy path in front of the backend's path (upstream's
    PathPrepend), `backend_host` the host:port dialled, `request_host` the Host the client sent."""

    prepend: str
    backend_host: str
    request_host: str

    def url(self, target: str) -> str:
        """upstream's rewriteURL (the transport's Scheme and Host are empty for these proxies)."""
        try:
            parts = urlsplit(target)
        except ValueError:
            return target
        different_host = parts.netloc != "" and parts.netloc not in (self.backend_host, self.request_host)
        if different_host or not parts.path.startswith("/"):
            return target
        scheme, netloc = parts.scheme, parts.netloc
        if netloc != self.request_host:
            scheme, netloc = "", ""
        if parts.path.startswith(self.prepend):
            return urlunsplit((scheme, netloc, parts.path, parts.query, parts.fragment))
        path = _join(self.prepend, parts.path)
        return urlunsplit((scheme, netloc, path, parts.query, parts.fragment))

    def location(self, target: str, backend_scheme: str) -> str:
        """A redirect is rewritten only when it points at the backend itself (same scheme and host)."""
        try:
            parts = urlsplit(target)
        except ValueError:
            return target
        if parts.scheme == backend_scheme and parts.netloc == self.backend_host:
            return self.url(target)
        return target


def _join(prefix: str, path: str) -> str:
    """Go's path.Join (cleaned) with the trailing slash put back, as upstream does."""
    joined = posixpath.normpath("/".join(p for p in (prefix, path) if p))
    if joined.startswith("//"):
        joined = "/" + joined.lstrip("/")
    return joined + "/" if path.endswith("/") and joined != "/" else joined


# What Go's url.EscapedPath leaves as it is in a path besides letters, digits and -_.~ (shouldEscape's
# encodePath mode): everything else, `?`, `%`, spaces and non-ASCII included, is percent-encoded.
_PATH_SAFE = "$&+,/:;=@"


def forwarded_uri(prepend: str, backend_path: str) -> str:
    """X-Forwarded-Uri: the path the client asked for, as upstream's transport sets it
    (path.Join(PathPrepend, URL.EscapedPath()), the trailing slash kept): escaped, so a backend can
    rebuild the client's URL from it."""
    return _join(prepend, quote(backend_path or "/", safe=_PATH_SAFE))


def is_html(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "text/html"


def rewritable_encoding(encoding: str) -> bool:
    return encoding.strip().lower() in ("", "gzip", "deflate")


def rewrite_body(body: bytes, encoding: str, rewriter: Rewriter) -> bytes:
    """Decode (gzip/deflate), rewrite the links, encode again. Raises ValueError on a corrupt body."""
    encoding = encoding.strip().lower()
    try:
        if encoding == "gzip":
            return gzip.compress(rewrite_html(gzip.decompress(body), rewriter))
        if encoding == "deflate":
            return _deflate(rewrite_html(_inflate(body), rewriter))
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(f"cannot decode {encoding} body: {err}") from None
    return rewrite_html(body, rewriter)


def _inflate(body: bytes) -> bytes:
    # Go's flate reader reads raw DEFLATE; servers in the wild also send the zlib wrapping.
    try:
        return zlib.decompress(body, -zlib.MAX_WBITS)
    except zlib.error:
        return zlib.decompress(body)


def _deflate(body: bytes) -> bytes:
    c = zlib.compressobj(zlib.Z_BEST_COMPRESSION, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(body) + c.flush()


def rewrite_html(page: bytes, rewriter: Rewriter) -> bytes:
    """Every start tag with a URL attribute that changes is written anew (upstream writes
    token.String(): lower-case names, values quoted and escaped); the rest of the page is copied byte
    for byte. Latin-1 keeps any charset's bytes as they are."""
    text = page.decode("latin-1")
    finder = _TagFinder(rewriter)
    finder.feed(text)
    finder.close()
    if not finder.edits:
        return page
    line_starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            line_starts.append(i + 1)
    out: list[str] = []
    cursor = 0
    for (line, col), raw, replacement in finder.edits:
        start = line_starts[line - 1] + col
        if text[start : start + len(raw)] != raw:
            continue  # the parser's position disagrees with the text: leave the tag alone
        out.append(text[cursor:start])
        out.append(replacement)
        cursor = start + len(raw)
    out.append(text[cursor:])
    return "".join(out).encode("latin-1")


class _TagFinder(HTMLParser):
    def __init__(self, rewriter: Rewriter) -> None:
        super().__init__(convert_charrefs=True)
        self.rewriter = rewriter
        self.edits: list[tuple[tuple[int, int], str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag(tag, attrs, self_closing=False)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag(tag, attrs, self_closing=True)

    def _tag(self, tag: str, attrs: list[tuple[str, str | None]], self_closing: bool) -> None:
        wanted = URL_ATTRS.get(tag)
        raw = self.get_starttag_text()
        if not wanted or raw is None:
            return
        changed = False
        new_attrs: list[tuple[str, str | None]] = []
        for key, value in attrs:
            if key in wanted and value is not None:
                new = self.rewriter.url(value)
                changed = changed or new != value
                value = new
            new_attrs.append((key, value))
        if changed:
            self.edits.append((self.getpos(), raw, _serialize(tag, new_attrs, self_closing)))


_ESCAPES = str.maketrans({"&": "&amp;", "'": "&#39;", "<": "&lt;", ">": "&gt;", '"': "&#34;"})


def _serialize(tag: str, attrs: list[tuple[str, str | None]], self_closing: bool) -> str:
    """As Go's html Token.String(): name="value" with the value escaped as html.EscapeString does."""
    parts = [tag] + [f'{k}="{(v or "").translate(_ESCAPES)}"' for k, v in attrs]
    return "<" + " ".join(parts) + ("/>" if self_closing else ">")
