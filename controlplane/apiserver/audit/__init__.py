"""The API server's audit log (upstream's k8s.io/apiserver/pkg/audit and plugin/pkg/audit/log).

`policy.py` decides each request's level, `requestinfo.py` reads what the policy judges, `auditor.py`
opens and closes each request's event (the middleware and the hooks the pipeline calls), `backend.py`
buffers events and writes them off the event loop, `logfile.py` rotates the file as lumberjack does,
`webhook.py` POSTs them to an audit webhook."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from controlplane.apiserver.audit.auditor import (
    AUDIT_KEY,
    HEADER,
    Auditor,
    authenticated,
    authorized,
    impersonated,
    panicked,
    request_object,
)
from controlplane.apiserver.audit.backend import Backends, BufferedBackend
from controlplane.apiserver.audit.logfile import LogFile, Rotation
from controlplane.apiserver.audit.policy import Policy, PolicyError, load_policy_file, parse_policy


@dataclass
class AuditOptions:
    """upstream's --audit-policy-file, --audit-log-path (`-`: stdout), --audit-log-maxsize (MB),
    --audit-log-maxbackup, --audit-log-maxage (days)."""

    policy_file: Path | None = None
    log_path: str = ""
    max_size_mb: int = 0
    max_backups: int = 0
    max_age_days: int = 0
    log_mode: str = "blocking"  # --audit-log-mode: blocking, blocking-strict or batch
    # --audit-webhook-config-file (a kubeconfig), --audit-webhook-mode (batch by default, as upstream) and
    # --audit-webhook-initial-backoff (seconds).
    webhook_config: Path | None = None
    webhook_mode: str = "batch"
    webhook_initial_backoff: float = 10.0
    # --audit-log-truncate-enabled / --audit-webhook-truncate-enabled and their max event sizes.
    log_truncate_at: int = 0
    webhook_truncate_at: int = 0

    def problems(self) -> list[str]:
        out = []
        for flag, value in (
            ("--audit-log-maxage", self.max_age_days),
            ("--audit-log-maxbackup", self.max_backups),
            ("--audit-log-maxsize", self.max_size_mb),
        ):
            if value < 0:
                out.append(f"{flag} {value} can't be a negative number")
        return out


def load_options(options: AuditOptions) -> Policy | None:
    """The policy the options name, checked (PolicyError with upstream's `loading audit policy file:
    ...`); None when nothing is to be audited (no policy file, or no log to write: upstream's no-op)."""
    problems = options.problems()
    if problems:
        raise PolicyError(problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]")
    if options.policy_file is None or not (options.log_path or options.webhook_config):
        return None
    try:
        return load_policy_file(options.policy_file)
    except PolicyError as err:
        raise PolicyError(f"loading audit policy file: {err}") from None


def build_auditor(options: AuditOptions) -> Auditor:
    """The auditor the options ask for (see load_options)."""
    policy = load_options(options)
    if policy is None:
        return Auditor(None, None)
    backends = []
    if options.log_path:
        rotation = Rotation(options.max_size_mb, options.max_backups, options.max_age_days)
        backends.append(
            BufferedBackend(
                LogFile(options.log_path, rotation),
                mode=options.log_mode,
                truncate_at=options.log_truncate_at,
            )
        )
    if options.webhook_config is not None:
        from controlplane.apiserver.audit.webhook import WebhookSink
        from kubeclient.config import load_kubeconfig

        sink = WebhookSink(load_kubeconfig(options.webhook_config), options.webhook_initial_backoff)
        backends.append(
            BufferedBackend(sink, mode=options.webhook_mode, truncate_at=options.webhook_truncate_at)
        )
    return Auditor(policy, Backends(backends))


__all__ = [
    "AUDIT_KEY",
    "HEADER",
    "AuditOptions",
    "Auditor",
    "Policy",
    "PolicyError",
    "authenticated",
    "authorized",
    "build_auditor",
    "impersonated",
    "load_options",
    "load_policy_file",
    "panicked",
    "parse_policy",
    "request_object",
]
