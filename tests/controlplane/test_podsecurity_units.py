"""PodSecurity's checks, levels, labels and configuration against upstream's texts (the expectations of
pod-security-admission's own check tests), without a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.apiserver.podsecurity import checks
from controlplane.apiserver.podsecurity.checks import evaluate, forbidden_detail, forbidden_reason
from controlplane.apiserver.podsecurity.config import ConfigError, load, parse_pod_security
from controlplane.apiserver.podsecurity.levels import (
    BASELINE,
    DEFAULT_POLICY,
    LATEST,
    RESTRICTED,
    LevelVersion,
    Version,
    policy_from_labels,
)

RESTRICTED_LATEST = LevelVersion(RESTRICTED, LATEST)
BASELINE_LATEST = LevelVersion(BASELINE, LATEST)

GOOD_CONTAINER = {
    "name": "c",
    "image": "busybox",
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
}


def test_a_bare_pod_violates_restricted_with_upstreams_text() -> None:
    spec = {"containers": [{"name": "c", "image": "busybox"}]}
    assert forbidden_detail(evaluate(RESTRICTED_LATEST, {}, spec)) == (
        'allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), '
        'unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), '
        'runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), '
        'seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" '
        'or "Localhost")'
    )
    assert evaluate(BASELINE_LATEST, {}, spec) == []


def test_a_hardened_pod_passes_restricted() -> None:
    assert evaluate(RESTRICTED_LATEST, {}, {"containers": [GOOD_CONTAINER]}) == []


def test_baseline_checks_come_first_and_restricted_volumes_replace_host_path() -> None:
    spec = {
        "hostNetwork": True,
        "hostPID": True,
        "containers": [
            {**GOOD_CONTAINER, "securityContext": {**GOOD_CONTAINER["securityContext"], "privileged": True}}
        ],
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
    }
    found = evaluate(RESTRICTED_LATEST, {}, spec)
    assert forbidden_reason(found) == "host namespaces, privileged, restricted volume types"
    assert forbidden_detail(found) == (
        "host namespaces (hostNetwork=true, hostPID=true), "
        'privileged (container "c" must not set securityContext.privileged=true), '
        'restricted volume types (volume "h" uses restricted volume type "hostPath")'
    )
    assert forbidden_detail(evaluate(BASELINE_LATEST, {}, spec)) == (
        'host namespaces (hostNetwork=true, hostPID=true), hostPath volumes (volume "h"), '
        'privileged (container "c" must not set securityContext.privileged=true)'
    )


@pytest.mark.parametrize(
    ("fn", "meta", "spec", "reason", "detail"),
    [
        (
            checks.se_linux_options,
            {},
            {
                "securityContext": {"seLinuxOptions": {"type": "foo", "user": "bar", "role": "baz"}},
                "containers": [
                    {"name": "a", "securityContext": {"seLinuxOptions": {"type": "container_t"}}},
                    {"name": "d", "securityContext": {"seLinuxOptions": {"type": "bar"}}},
                    {"name": "e", "securityContext": {"seLinuxOptions": {"user": "bar"}}},
                    {"name": "f", "securityContext": {"seLinuxOptions": {"role": "baz"}}},
                ],
            },
            "seLinuxOptions",
            'pod and containers "d", "e", "f" set forbidden securityContext.seLinuxOptions: types "bar", "foo"; '
            "user may not be set; role may not be set",
        ),
        (
            checks.app_armor_profile,
            {},
            {
                "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "foo"}],
                "initContainers": [
                    {"name": "bar", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}
                ],
            },
            "forbidden AppArmor profile",
            'container "bar" must not set AppArmor profile type to "Unconfined"',
        ),
        (
            checks.app_armor_profile,
            {
                "annotations": {
                    "container.apparmor.security.beta.kubernetes.io/": "bogus",
                    "container.apparmor.security.beta.kubernetes.io/a": "",
                    "container.apparmor.security.beta.kubernetes.io/b": "runtime/default",
                    "container.apparmor.security.beta.kubernetes.io/d": "localhost/foo",
                    "container.apparmor.security.beta.kubernetes.io/e": "unconfined",
                }
            },
            {},
            "forbidden AppArmor profiles",
            "annotations must not set AppArmor profile type to "
            '"container.apparmor.security.beta.kubernetes.io/="bogus"", '
            '"container.apparmor.security.beta.kubernetes.io/e="unconfined""',
        ),
        (
            checks.capabilities_baseline,
            {},
            {
                "containers": [
                    {
                        "name": "a",
                        "securityContext": {"capabilities": {"add": ["NET_RAW", "CHOWN", "SYS_ADMIN"]}},
                    }
                ]
            },
            "non-default capabilities",
            'container "a" must not include "NET_RAW", "SYS_ADMIN" in securityContext.capabilities.add',
        ),
        (
            checks.capabilities_restricted,
            {},
            {
                "containers": [
                    {"name": "a"},
                    {
                        "name": "b",
                        "securityContext": {
                            "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE", "CHOWN"]}
                        },
                    },
                ]
            },
            "unrestricted capabilities",
            'container "a" must set securityContext.capabilities.drop=["ALL"]; '
            'container "b" must not include "CHOWN" in securityContext.capabilities.add',
        ),
        (
            checks.host_ports,
            {},
            {
                "containers": [
                    {"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}, {"hostPort": 443}]},
                    {"name": "b", "ports": [{"hostPort": 0}]},
                ]
            },
            "hostPort",
            'container "a" uses hostPorts 443, 8080',
        ),
        (
            checks.proc_mount,
            {},
            {
                "containers": [
                    {"name": "a", "securityContext": {"procMount": "Unmasked"}},
                    {"name": "b", "securityContext": {"procMount": "Default"}},
                ]
            },
            "procMount",
            'container "a" must not set securityContext.procMount to "Unmasked"',
        ),
        (
            checks.seccomp_baseline_1_19,
            {},
            {
                "securityContext": {"seccompProfile": {"type": "Unconfined"}},
                "containers": [{"name": "a", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}],
            },
            "seccompProfile",
            'pod and container "a" must not set securityContext.seccompProfile.type to "Unconfined"',
        ),
        (
            checks.seccomp_baseline_1_0,
            {"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}},
            {"containers": [{"name": "a"}]},
            "seccompProfile",
            'forbidden annotation seccomp.security.alpha.kubernetes.io/pod="unconfined"',
        ),
        (
            checks.run_as_non_root,
            {},
            {
                "securityContext": {"runAsNonRoot": True},
                "containers": [{"name": "a", "securityContext": {"runAsNonRoot": False}}, {"name": "b"}],
            },
            "runAsNonRoot != true",
            'container "a" must not set securityContext.runAsNonRoot=false',
        ),
        (
            checks.run_as_user,
            {},
            {
                "securityContext": {"runAsUser": 0},
                "containers": [
                    {"name": "a", "securityContext": {"runAsUser": 0}},
                    {"name": "b", "securityContext": {"runAsUser": 1000}},
                ],
            },
            "runAsUser=0",
            'pod and container "a" must not set runAsUser=0',
        ),
        (
            checks.restricted_volumes,
            {},
            {
                "volumes": [
                    {"name": "a", "emptyDir": {}},
                    {"name": "b", "nfs": {"server": "x", "path": "/"}},
                    {"name": "c", "hostPath": {"path": "/"}},
                ]
            },
            "restricted volume types",
            'volumes "b", "c" use restricted volume types "hostPath", "nfs"',
        ),
        (
            checks.windows_host_process,
            {},
            {
                "securityContext": {"windowsOptions": {"hostProcess": True}},
                "containers": [{"name": "a", "securityContext": {"windowsOptions": {"hostProcess": True}}}],
            },
            "hostProcess",
            'pod and container "a" must not set securityContext.windowsOptions.hostProcess=true',
        ),
        (
            checks.sysctls(checks._SYSCTLS_1_32),
            {},
            {"securityContext": {"sysctls": [{"name": "a"}, {"name": "net.ipv4.tcp_rmem"}, {"name": "b"}]}},
            "forbidden sysctls",
            "a, b",
        ),
    ],
)
def test_each_check_words_its_violation_as_upstream(fn, meta, spec, reason, detail) -> None:  # type: ignore[no-untyped-def]
    assert fn(meta, spec) == (reason, detail)


def test_pinned_versions_run_the_checks_of_their_time() -> None:
    spec = {"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem"}]}, "containers": [{"name": "c"}]}
    assert forbidden_reason(evaluate(LevelVersion(BASELINE, Version(31)), {}, spec)) == "forbidden sysctls"
    assert evaluate(LevelVersion(BASELINE, Version(32)), {}, spec) == []
    assert evaluate(LevelVersion(BASELINE, Version(40)), {}, spec) == []  # newer than any check: as latest
    bare = {"containers": [{"name": "c"}]}
    # runAsUser came with 1.23, capabilities with 1.22, seccomp with 1.19, allowPrivilegeEscalation with 1.8.
    assert (
        forbidden_reason(evaluate(LevelVersion(RESTRICTED, Version(7)), {}, bare)) == "runAsNonRoot != true"
    )
    assert forbidden_reason(evaluate(LevelVersion(RESTRICTED, Version(21)), {}, bare)) == (
        "allowPrivilegeEscalation != false, runAsNonRoot != true, seccompProfile"
    )
    root = {"securityContext": {"runAsUser": 0}, "containers": [GOOD_CONTAINER]}
    assert evaluate(LevelVersion(RESTRICTED, Version(22)), {}, root) == []
    assert forbidden_reason(evaluate(LevelVersion(RESTRICTED, Version(23)), {}, root)) == "runAsUser=0"


def test_windows_pods_skip_the_linux_only_restricted_checks_from_1_25() -> None:
    spec = {
        "os": {"name": "windows"},
        "securityContext": {"runAsNonRoot": True},
        "containers": [{"name": "c"}],
    }
    assert evaluate(LevelVersion(RESTRICTED, Version(25)), {}, spec) == []
    assert forbidden_reason(evaluate(LevelVersion(RESTRICTED, Version(24)), {}, spec)) == (
        "allowPrivilegeEscalation != false, unrestricted capabilities, seccompProfile"
    )


def test_labels_give_the_policy_and_upstreams_field_errors() -> None:
    policy, errs = policy_from_labels(
        {"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/warn-version": "v1.30"}
    )
    assert (str(policy.enforce), str(policy.audit), str(policy.warn)) == (
        "baseline:latest",
        "privileged:latest",
        "privileged:v1.30",
    )
    assert errs == []
    policy, errs = policy_from_labels(
        {
            "pod-security.kubernetes.io/enforce": "strict",
            "pod-security.kubernetes.io/audit": "nope",
            "pod-security.kubernetes.io/enforce-version": "1.30",
        }
    )
    assert str(policy.enforce) == "restricted:latest"  # fails closed
    assert policy.audit.level == "privileged"  # fails open
    assert [(e.field, e.detail) for e in errs] == [
        (
            "metadata.labels[pod-security.kubernetes.io/enforce]",
            'Invalid value: "strict": must be one of privileged, baseline, restricted',
        ),
        (
            "metadata.labels[pod-security.kubernetes.io/enforce-version]",
            'Invalid value: "1.30": must be "latest" or "v1.x"',
        ),
        (
            "metadata.labels[pod-security.kubernetes.io/audit]",
            'Invalid value: "nope": must be one of privileged, baseline, restricted',
        ),
    ]
    assert policy_from_labels({}) == (DEFAULT_POLICY, [])


def test_configuration_inline_and_by_path(tmp_path: Path) -> None:
    (tmp_path / "psa.yaml").write_text(
        "apiVersion: pod-security.admission.config.k8s.io/v1\nkind: PodSecurityConfiguration\n"
        "defaults: {enforce: baseline, warn: restricted, warn-version: v1.31}\n"
        "exemptions: {usernames: [alice], runtimeClasses: [kata], namespaces: [kube-system]}\n"
    )
    path = tmp_path / "admission.yaml"
    path.write_text(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\n"
        "plugins:\n- name: PodSecurity\n  path: psa.yaml\n"
    )
    config = load(path)
    assert str(config.defaults.enforce) == "baseline:latest"
    assert str(config.defaults.warn) == "restricted:v1.31"
    assert str(config.defaults.audit) == "privileged:latest"
    assert (config.usernames, config.runtime_classes, config.namespaces) == (
        {"alice"},
        {"kata"},
        {"kube-system"},
    )


def test_a_bad_configuration_names_the_field() -> None:
    doc = {
        "apiVersion": "pod-security.admission.config.k8s.io/v1",
        "kind": "PodSecurityConfiguration",
        "defaults": {"enforce": "strict", "audit-version": "latest1"},
        "exemptions": {"namespaces": ["ok", "Bad_Name", "ok"], "usernames": [""]},
    }
    with pytest.raises(ConfigError) as err:
        parse_pod_security(doc)
    text = str(err.value)
    assert (
        'defaults.enforce: Invalid value: "strict": must be one of privileged, baseline, restricted' in text
    )
    assert 'defaults.audit-version: Invalid value: "latest1": must be "latest" or "v1.x"' in text
    assert 'exemptions.namespaces[1]: Invalid value: "Bad_Name"' in text
    assert 'exemptions.namespaces[2]: Duplicate value: "ok"' in text
    assert 'exemptions.usernames[0]: Invalid value: "": username must not be empty' in text


def test_the_server_refuses_to_start_on_a_bad_file(tmp_path: Path) -> None:
    from controlplane.cli import _pod_security

    path = tmp_path / "admission.yaml"
    path.write_text(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n"
        "  configuration:\n    apiVersion: pod-security.admission.config.k8s.io/v1\n"
        "    kind: PodSecurityConfiguration\n    defaults: {warn: loud}\n"
    )
    with pytest.raises(SystemExit) as err:
        _pod_security(path)
    assert str(err.value) == (
        f"pykubelet server: --admission-control-config-file: {path}: plugins[0] (PodSecurity): "
        'defaults.warn: Invalid value: "loud": must be one of privileged, baseline, restricted'
    )
    assert _pod_security(None).defaults == DEFAULT_POLICY
