"""Who made a request (upstream's user.Info): a plain value the authenticators (authn.py) produce and
the authorizers, admission plugins and kinds read; it knows nothing of how a user was authenticated."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = field(default_factory=tuple)
    # Upstream's user.Info extra: (key, values) pairs, kept hashable (a token's authentication.kubernetes.io/
    # pod-name, ..., impersonation's Impersonate-Extra-*, a SubjectAccessReview's spec.extra).
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def extra_dict(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self.extra}
