"""The query parameters every verb shares, read as upstream's parameter codec reads them: a low module
(errors alone) so that DeleteOptions (options.py) and the request parsing (request.py) both use it."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import errors


def bool_param(query: Any, name: str) -> bool:
    return str(query.get(name, "")).lower() in ("1", "true")


def int_param(query: Any, name: str, default: int = 0) -> int:
    """An integer query parameter; a 400 naming it when it is not one."""
    text = query.get(name, "")
    if text in ("", None):
        return default
    try:
        return int(text)
    except ValueError:
        raise errors.bad_request(
            f'invalid value "{text}" for query parameter {name}: strconv.ParseInt: parsing "{text}": invalid syntax'
        ) from None
