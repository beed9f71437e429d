"""ApiError: what the API answered when it said no (or could not be reached), with its Status.

One error type for every component, so a controller, the agent and the scheduler test the same
properties (`err.not_found`, `err.conflict`, `err.gone`) and log the server's own message.
"""

from __future__ import annotations

import json
from typing import Any


class ApiError(Exception):
    """An error Status from the API server, or status 0 when it could not be reached at all."""

    def __init__(
        self,
        status: int,
        reason: str = "",
        message: str = "",
        body: dict[str, Any] | None = None,
        what: str = "",
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}
        self.what = what  # "METHOD /path", for logs
        prefix = f"{what}: " if what else ""
        super().__init__(
            f"{prefix}{status} {reason}: {message}" if reason else f"{prefix}{status}: {message}"
        )

    @classmethod
    def from_response(cls, status: int, raw: bytes, what: str = "") -> ApiError:
        """From an HTTP error answer: a metav1.Status if the body is one, else its first bytes."""
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return cls(status, "", raw.decode(errors="replace")[:300], {}, what)
        return cls(status, str(body.get("reason") or ""), str(body.get("message") or ""), body, what)

    @classmethod
    def from_status(cls, status: dict[str, Any], what: str = "") -> ApiError:
        """From a Status object (a watch ERROR event's object)."""
        return cls(
            int(status.get("code") or 500),
            str(status.get("reason") or ""),
            str(status.get("message") or ""),
            status,
            what,
        )

    @property
    def unreachable(self) -> bool:
        return self.status == 0

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def forbidden(self) -> bool:
        return self.status == 403

    @property
    def invalid(self) -> bool:
        return self.status == 422

    @property
    def too_many_requests(self) -> bool:
        return self.status == 429

    @property
    def retry_after(self) -> float | None:
        """The server's suggested pause (Status details.retryAfterSeconds), if it gave one."""
        seconds = (self.body.get("details") or {}).get("retryAfterSeconds")
        return float(seconds) if isinstance(seconds, int | float) and seconds > 0 else None
