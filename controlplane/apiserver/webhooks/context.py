"""What admission needs from the HTTP request and gives back to its response, without the admission
chain knowing HTTP: whether the request is a dry run (webhooks with side effects may not be called)
and the warnings webhooks and policies return (upstream's warning.AddWarning), sent as `Warning: 299`
headers, and the audit annotations they add. A context variable carries them: aiohttp runs each request in its own task, so what the
middleware sets is what every await below it sees, and writes made by the server itself (no HTTP
request) see the defaults: not a dry run, warnings dropped."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

from aiohttp import web

# Upstream truncates and caps warnings (4 KiB each, 128 KiB in all); the cap here is the count.
_MAX_WARNINGS = 64


@dataclass
class RequestContext:
    dry_run: bool = False
    warnings: list[str] = field(default_factory=list)
    # Audit annotations admission adds (upstream's admission.Attributes.AddAnnotation): the request's
    # audit event carries them (audit/auditor.py reads them when the request completes).
    audit_annotations: dict[str, str] = field(default_factory=dict)

    def warn(self, text: str) -> None:
        if text and text not in self.warnings and len(self.warnings) < _MAX_WARNINGS:
            self.warnings.append(text)


_CURRENT: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "admission_ctx", default=None
)


def current() -> RequestContext:
    return _CURRENT.get() or RequestContext()


def is_dry_run() -> bool:
    ctx = _CURRENT.get()
    return ctx.dry_run if ctx is not None else False


def add_warning(text: str) -> None:
    ctx = _CURRENT.get()
    if ctx is not None:
        ctx.warn(text)


def add_audit_annotation(key: str, value: str) -> None:
    ctx = _CURRENT.get()
    if ctx is not None:
        ctx.audit_annotations.setdefault(key, value)  # upstream refuses to overwrite a key


def audit_annotations() -> dict[str, str]:
    ctx = _CURRENT.get()
    return dict(ctx.audit_annotations) if ctx is not None else {}


def warning_header(text: str) -> str:
    """RFC 7234 warn-value as upstream writes it: code 299, agent "-", the text quoted."""
    escaped = "".join(
        "\\" + c if c in '"\\' else (c if c.isprintable() else f"\\x{ord(c):02x}") for c in text
    )
    return f'299 - "{escaped}"'


@web.middleware
async def middleware(request: web.Request, handler):  # type: ignore[no-untyped-def]
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return await handler(request)  # reads never reach admission
    ctx = RequestContext(dry_run=bool(request.query.getall("dryRun", [])))
    token = _CURRENT.set(ctx)
    try:
        response = await handler(request)
    finally:
        _CURRENT.reset(token)
    if ctx.warnings and not response.prepared:
        for text in ctx.warnings:
            response.headers.add("Warning", warning_header(text))
    return response
