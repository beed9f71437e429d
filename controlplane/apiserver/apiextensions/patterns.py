"""A CRD schema's `pattern` as upstream compiles it: a Go regular expression (RE2 syntax: `(?i)` flag
groups anywhere, no backreferences or lookaround), matched anywhere in the string as go-openapi's
`regexp.MatchString`. Compiled by RE2 itself (google-re2); RE2's compile errors are given Go's
regexp/syntax texts (`error parsing regexp: missing argument to repetition operator: `+``), which the
CRD's 422 and the object's error quote."""

from __future__ import annotations

from functools import lru_cache

import re2

# RE2's error prefixes and Go's regexp/syntax ErrorCode texts for the same errors.
_GO_TEXTS = {
    "no argument for repetition operator": "missing argument to repetition operator",
    "missing )": "missing closing )",
    "unexpected )": "unexpected )",
    "missing ]": "missing closing ]",
    "trailing \\": "trailing backslash at end of expression",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid named capture group": "invalid named capture",
    "invalid character class range": "invalid character class range",
    "invalid character class": "invalid character class",
    "invalid escape sequence": "invalid escape sequence",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid UTF-8": "invalid UTF-8",
    "pattern too large - compile failed": "expression too large",
}


class PatternError(ValueError):
    """A pattern RE2 (and so Go) refuses; str() is Go's error text."""


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    return options


_OPTIONS = _options()


def _go_error(pattern: str, err: Exception) -> str:
    raw = err.args[0] if err.args else ""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    code, _, arg = text.partition(": ")
    if code.startswith("trailing \\"):
        code, arg = "trailing \\", ""
    return f"error parsing regexp: {_GO_TEXTS.get(code, code)}: `{arg}`"


@lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> re2._Regexp:
    """The compiled pattern; PatternError with Go's text when it is not a valid RE2 expression."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as err:
        raise PatternError(_go_error(pattern, err)) from err


def pattern_error(pattern: str) -> str | None:
    """Go's compile error for `pattern`, or None when it compiles."""
    try:
        compile_pattern(pattern)
    except PatternError as err:
        return str(err)
    return None


__all__ = ["PatternError", "compile_pattern", "pattern_error"]
