"""Each CIS Kubernetes Benchmark control SECURITY.md claims as met by default, checked on the default
itself: the API server's flags and admission chain, what `pykubelet up` passes its API server, the
rig's etcd, the agent's kubelet defaults. A change of default that breaks a claim fails here."""

from __future__ import annotations

from pathlib import Path

import yaml

from controlplane.apiserver.admission import plugin_name
from controlplane.apiserver.authmodes import DEFAULT_MODES
from controlplane.apiserver.kindparts import builtin_table
from tests.controlplane.conftest import Kubectl


def test_authorization_is_node_and_rbac_never_always_allow() -> None:  # CIS 1.2.6, 1.2.7, 1.2.8
    assert DEFAULT_MODES == ("Node", "RBAC")


def test_the_default_admission_chain() -> None:  # CIS 1.2.10, 1.2.12, 1.2.13, 1.2.14, 5.2.1
    chain = builtin_table().admission_chain()
    names = {plugin_name(p) for p in chain.mutating + chain.validating + chain.deleting}
    assert {"ServiceAccount", "NamespaceLifecycle", "NodeRestriction", "PodSecurity"} <= names
    assert "AlwaysAdmit" not in names


def test_up_encrypts_secrets_and_keeps_an_audit_log(
    tmp_path: Path,
) -> None:  # CIS 1.2.2, 1.2.16, 1.2.19, 1.2.27, 1.2.28
    from pykubelet.rig.auditlog import audit_args
    from pykubelet.rig.stack import Stack, StackConfig

    args = Stack(StackConfig(state_dir=tmp_path / "state"))._apiserver_extra_args()
    assert "--token-auth-file" not in args
    config = yaml.safe_load(Path(args[args.index("--encryption-provider-config") + 1]).read_text())
    secrets = config["resources"][0]
    assert secrets["resources"] == ["secrets"] and "aescbc" in secrets["providers"][0]
    audit = audit_args(tmp_path / "apiserver")
    assert "--audit-log-path" in audit
    assert int(audit[audit.index("--audit-log-maxsize") + 1]) >= 100


def test_the_rigs_etcd_wants_client_certificates(tmp_path: Path) -> None:  # CIS 2.1, 2.2, 2.3
    from pykubelet.rig.etcd import Etcd

    argv = Etcd(tmp_path / "etcd").daemon.argv
    for flag in ("--cert-file", "--key-file", "--trusted-ca-file", "--client-cert-auth"):
        assert flag in argv
    assert "--auto-tls" not in argv


def test_the_kubelet_api_is_closed_by_default() -> None:  # CIS 4.2.1, 4.2.2, 4.2.4
    from agent.config import AgentConfig
    from agent.configfields import FIELDS

    cfg = AgentConfig()
    assert cfg.anonymous_auth is False
    assert cfg.authorization_mode == "Webhook" and cfg.webhook_authentication is True
    assert FIELDS["readOnlyPort"].default == 0  # no read-only port is ever served


def test_no_profiling_handlers(kubectl: Kubectl) -> None:  # CIS 1.2.15
    for path in ("/debug/pprof/", "/debug/pprof/profile", "/debug/flags/v"):
        proc = kubectl.run("get", "--raw", path, check=False)  # as the cluster admin
        assert proc.returncode == 1 and "NotFound" in proc.stderr, (path, proc.stderr)
