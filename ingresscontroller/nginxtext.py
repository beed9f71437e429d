"""nginx's string syntax in one place: a quoted literal where variables are not expanded (paths, file
names, regexes) and one where they are (`set`, `if` comparisons, header values, `return` URLs), so a
user's header value holding `$` or `"` reaches the wire as written. Also the request headers every
proxied request carries, which a location that sets headers of its own must repeat (nginx inherits
`proxy_set_header` only when a level sets none).
"""

from __future__ import annotations

# A variable whose value is "$": the only way to write a literal dollar where nginx expands variables.
DOLLAR_VARIABLE = "gw_dollar"

PROXY_HEADERS: tuple[tuple[str, str], ...] = (
    ("Host", "$host"),
    ("Upgrade", "$http_upgrade"),
    ("Connection", "$connection_upgrade"),
    ("X-Real-IP", "$remote_addr"),
    ("X-Forwarded-For", "$proxy_add_x_forwarded_for"),
    ("X-Forwarded-Proto", "$scheme"),
    ("X-Forwarded-Host", "$host"),
)


def quote(text: str) -> str:
    """An nginx string literal where no variable is expanded: paths may hold spaces, quotes, braces or
    semicolons."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


_ESCAPED = {"\\": "\\\\", '"': '\\"', "$": "${" + DOLLAR_VARIABLE + "}"}


def expand(text: str) -> str:
    """`text` escaped for the inside of a quoted string that expands variables (to join with some)."""
    return "".join(_ESCAPED.get(c, c) for c in text)


def literal(text: str) -> str:
    """An nginx string literal in a place that expands variables, holding `text` as written."""
    return f'"{expand(text)}"'
