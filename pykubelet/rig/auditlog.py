"""The audit log every API server of the stack (`pykubelet up`, the rig's Stack) writes, and its policy.

`pykubelet trace` reads it for the exact time and the writer of each write (journey/auditlog.py), so
the policy keeps every write and leaves out what would drown them: reads, health checks and the Lease
renewals every component makes each few seconds. Bodies are kept only where trace needs what the
request alone does not say (the name generateName chose, the resourceVersion a write made) and never
for Secrets, ConfigMaps or tokens."""

from __future__ import annotations

from pathlib import Path

AUDIT_LOG = "audit.log"
POLICY_FILE = "audit-policy.yaml"
STACK_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
# Written by pykubelet's rig: every write with who made it and when, for `pykubelet trace`.
omitStages: [RequestReceived]
rules:
- level: None
  verbs: [get, list, watch]
- level: None
  resources: [{group: coordination.k8s.io, resources: [leases]}]
- level: Metadata
  resources:
  - {group: "", resources: [secrets, configmaps, serviceaccounts/token]}
  - {group: authentication.k8s.io, resources: [tokenreviews]}
  - {group: authorization.k8s.io}
  - {group: certificates.k8s.io, resources: [certificatesigningrequests]}
- level: RequestResponse
  omitManagedFields: true
  resources:
  - {group: "", resources: [pods, pods/status, pods/binding, services, replicationcontrollers]}
  - {group: apps, resources: ["deployments/*", "replicasets/*", "statefulsets/*", "daemonsets/*"]}
  - {group: batch, resources: ["jobs/*", "cronjobs/*"]}
  - {group: discovery.k8s.io, resources: [endpointslices]}
- level: Metadata
"""


def audit_args(data_dir: Path) -> list[str]:
    """The server flags for an audit log in `data_dir` (the policy file written there too)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    policy = data_dir / POLICY_FILE
    policy.write_text(STACK_POLICY)
    return [
        "--audit-policy-file",
        str(policy),
        "--audit-log-path",
        str(data_dir / AUDIT_LOG),
        "--audit-log-maxsize",
        "100",
        "--audit-log-maxbackup",
        "3",
    ]
