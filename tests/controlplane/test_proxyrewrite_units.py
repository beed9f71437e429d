"""The proxy's HTML rewriting as pure functions: upstream's rewriteURL cases, deflate both ways, encodings
it cannot read left alone, a corrupt body refused, and pages with nothing to change returned untouched."""

from __future__ import annotations

import gzip
import zlib

import pytest

from controlplane.apiserver.proxyrewrite import (
    Rewriter,
    forwarded_uri,
    is_html,
    rewritable_encoding,
    rewrite_body,
    rewrite_html,
)

R = Rewriter("/api/v1/namespaces/ns/services/web/proxy", "10.1.0.7:80", "apiserver:6443")


@pytest.mark.parametrize(
    ("link", "want"),
    [
        ("/a", "/api/v1/namespaces/ns/services/web/proxy/a"),
        ("/a/", "/api/v1/namespaces/ns/services/web/proxy/a/"),
        ("/", "/api/v1/namespaces/ns/services/web/proxy/"),
        ("/a/../b?x=1#top", "/api/v1/namespaces/ns/services/web/proxy/b?x=1#top"),
        ("http://10.1.0.7:80/a", "/api/v1/namespaces/ns/services/web/proxy/a"),
        ("https://apiserver:6443/a", "https://apiserver:6443/api/v1/namespaces/ns/services/web/proxy/a"),
        ("/api/v1/namespaces/ns/services/web/proxy/a", "/api/v1/namespaces/ns/services/web/proxy/a"),
        ("a/b", "a/b"),
        ("../up", "../up"),
        ("http://other/a", "http://other/a"),
        ("mailto:x@y", "mailto:x@y"),
        ("#frag", "#frag"),
        ("http://[bad", "http://[bad"),
    ],
)
def test_rewrite_url(link: str, want: str) -> None:
    assert R.url(link) == want


def test_location_only_for_the_backend_itself() -> None:
    assert R.location("http://10.1.0.7:80/login", "http") == "/api/v1/namespaces/ns/services/web/proxy/login"
    assert R.location("https://10.1.0.7:80/login", "http") == "https://10.1.0.7:80/login"
    assert R.location("/login", "http") == "/login"


def test_attributes_outside_the_table_and_unchanged_pages_stay_byte_for_byte() -> None:
    page = b'<div data-href="/x"><a name="/y" href="rel">r</a><A  HREF = "http://x.org/" >\xff</div>'
    assert rewrite_html(page, R) is page
    out = rewrite_html(b'<a   HREF=/x title="a&quot;b" data-x>t</a>\n<p>\xe9</p>', R)
    assert (
        out
        == b'<a href="/api/v1/namespaces/ns/services/web/proxy/x" title="a&#34;b" data-x="">t</a>\n<p>\xe9</p>'
    )


def test_tags_on_later_lines_are_found_where_they_are() -> None:
    out = rewrite_html(b"<html>\n\n  <body>\n<img\n src='/i.png'\n/>x</body>", R)
    assert out == b'<html>\n\n  <body>\n<img src="/api/v1/namespaces/ns/services/web/proxy/i.png"/>x</body>'


def test_encodings() -> None:
    page = b'<a href="/x">x</a>'
    want = b'<a href="/api/v1/namespaces/ns/services/web/proxy/x">x</a>'
    assert gzip.decompress(rewrite_body(gzip.compress(page), "gzip", R)) == want
    raw_deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = raw_deflate.compress(page) + raw_deflate.flush()
    assert zlib.decompress(rewrite_body(body, "deflate", R), -zlib.MAX_WBITS) == want
    assert zlib.decompress(rewrite_body(zlib.compress(page), "deflate", R), -zlib.MAX_WBITS) == want
    assert rewritable_encoding("") and rewritable_encoding("GZIP") and not rewritable_encoding("br")
    with pytest.raises(ValueError, match="cannot decode gzip body"):
        rewrite_body(b"not gzip", "gzip", R)


def test_content_types_and_forwarded_uri() -> None:
    assert is_html("text/html; charset=utf-8") and is_html("TEXT/HTML") and not is_html("text/htmlx")
    assert forwarded_uri("/api/v1/x/proxy", "/a/b/") == "/api/v1/x/proxy/a/b/"
    assert forwarded_uri("/api/v1/x/proxy", "/") == "/api/v1/x/proxy/"
    # escaped as Go's URL.EscapedPath: reserved path characters stay, the rest is percent-encoded
    assert forwarded_uri("/p", "/a b/ü?x%/") == "/p/a%20b/%C3%BC%3Fx%25/"
    assert forwarded_uri("/p", "/k=v;a,b:c@d$e&f+g") == "/p/k=v;a,b:c@d$e&f+g"
