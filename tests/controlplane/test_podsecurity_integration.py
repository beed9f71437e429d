"""PodSecurity admission on the real API server through the real kubectl: the 403 and the warning kubectl
prints, workload objects warned only, the AdmissionConfiguration's exemptions, the 422 of a bad label, the
dry run of a namespace relabel, and the audit annotations in the audit log."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.waiting import wait_for
from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.conftest import KUBECTL, Kubectl

pytestmark = pytest.mark.integration

ADMISSION = """apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults: {enforce: privileged, audit: privileged, warn: privileged}
    exemptions:
      usernames: [exempt-user]
      runtimeClasses: [exempt-rc]
      namespaces: [exempt-ns]
"""
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: Metadata
  resources: [{group: "", resources: [pods]}, {group: apps, resources: [deployments]}]
- level: None
"""
ENFORCE = "pod-security.kubernetes.io/enforce"
WARN = "pod-security.kubernetes.io/warn"
AUDIT = "pod-security.kubernetes.io/audit"

PRIVILEGED_POD = """apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers:
  - name: c
    image: busybox
    securityContext: {privileged: true}
  volumes:
  - name: host
    hostPath: {path: /etc}
"""
BARE_POD = """apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  %s
  containers:
  - {name: c, image: busybox}
"""
DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: c, image: busybox}
"""
RESTRICTED_BARE = (
    'allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), '
    'unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), '
    'runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), '
    'seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or '
    '"Localhost")'
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    d = tmp_path_factory.mktemp("podsecurity")
    (d / "admission.yaml").write_text(ADMISSION)
    (d / "audit.yaml").write_text(AUDIT_POLICY)
    api = ApiServer(
        d / "server",
        extra_args=[
            "--admission-control-config-file",
            str(d / "admission.yaml"),
            "--audit-policy-file",
            str(d / "audit.yaml"),
            "--audit-log-path",
            str(d / "audit.log"),
        ],
    )
    api.start()
    yield api
    api.stop()
    assert not api.running


@pytest.fixture(scope="module")
def kubectl(server: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    return Kubectl(server.kubeconfig, tmp_path_factory.mktemp("kubectl-home"))


def new_namespace(kubectl: Kubectl, **labels: str) -> str:
    name = f"psa-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    if labels:
        kubectl("label", "namespace", name, *(f"{k}={v}" for k, v in labels.items()))
    return name


def audit_event(
    server: ApiServer, match: Callable[[dict[str, Any]], bool], timeout: float = 15.0
) -> dict[str, Any]:
    """The first ResponseComplete event of the audit log `match` accepts (the writer is asynchronous)."""
    path = server.data_dir.parent / "audit.log"

    def found() -> dict[str, Any] | None:
        lines = path.read_text().splitlines() if path.exists() else []
        events = (json.loads(line) for line in lines)
        return next((ev for ev in events if ev.get("stage") == "ResponseComplete" and match(ev)), None)

    return wait_for(found, timeout, 0.05, f"a matching audit event in {path}")


def _ref(ev: dict[str, Any], namespace: str, name: str) -> bool:
    ref = ev.get("objectRef") or {}
    return ref.get("namespace") == namespace and ref.get("name") == name and ev.get("verb") == "create"


def test_enforce_refuses_with_upstreams_403(kubectl: Kubectl, server: ApiServer) -> None:
    ns = new_namespace(kubectl, **{ENFORCE: "baseline"})
    proc = kubectl.run("-n", ns, "apply", "-f", "-", input=PRIVILEGED_POD % "p", check=False)
    assert proc.returncode == 1
    assert (
        'pods "p" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes (volume "host"), '
        'privileged (container "c" must not set securityContext.privileged=true)'
    ) in proc.stderr
    assert "Error from server (Forbidden)" in proc.stderr
    assert kubectl.run("-n", ns, "get", "pod", "p", check=False).returncode == 1
    ev = audit_event(server, lambda e: _ref(e, ns, "p"))
    assert ev["responseStatus"]["code"] == 403
    assert ev["annotations"]["pod-security.kubernetes.io/enforce-policy"] == "baseline:latest"


def test_warn_admits_with_the_warning_kubectl_prints(kubectl: Kubectl, server: ApiServer) -> None:
    ns = new_namespace(kubectl, **{WARN: "restricted", AUDIT: "restricted", ENFORCE: "baseline"})
    proc = kubectl.run("-n", ns, "apply", "-f", "-", input=BARE_POD % ("w", ""))
    assert f'Warning: would violate PodSecurity "restricted:latest": {RESTRICTED_BARE}' in proc.stderr
    assert "pod/w created" in proc.stdout
    ev = audit_event(server, lambda e: _ref(e, ns, "w"))
    assert ev["annotations"]["pod-security.kubernetes.io/enforce-policy"] == "baseline:latest"
    assert ev["annotations"]["pod-security.kubernetes.io/audit-violations"] == (
        f'would violate PodSecurity "restricted:latest": {RESTRICTED_BARE}'
    )


def test_pinned_version_is_named_and_judged_at_that_version(kubectl: Kubectl) -> None:
    ns = new_namespace(
        kubectl, **{ENFORCE: "restricted", "pod-security.kubernetes.io/enforce-version": "v1.22"}
    )
    # runAsUser=0 is a violation only from 1.23: a pod that is otherwise restricted passes at v1.22.
    root = """apiVersion: v1
kind: Pod
metadata: {name: root}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 0, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: c
    image: busybox
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
"""
    kubectl("-n", ns, "apply", "-f", "-", input=root)
    proc = kubectl.run("-n", ns, "apply", "-f", "-", input=BARE_POD % ("bare", ""), check=False)
    assert (
        'pods "bare" is forbidden: violates PodSecurity "restricted:v1.22": allowPrivilegeEscalation'
        in proc.stderr
    )


def test_workloads_are_warned_never_refused(kubectl: Kubectl, server: ApiServer) -> None:
    ns = new_namespace(kubectl, **{ENFORCE: "restricted", WARN: "restricted"})
    proc = kubectl.run("-n", ns, "apply", "-f", "-", input=DEPLOYMENT)
    assert "deployment.apps/web created" in proc.stdout
    assert f'Warning: would violate PodSecurity "restricted:latest": {RESTRICTED_BARE}' in proc.stderr
    # enforce alone says nothing about a template: upstream judges templates for warn and audit only.
    quiet = new_namespace(kubectl, **{ENFORCE: "restricted"})
    proc = kubectl.run("-n", quiet, "apply", "-f", "-", input=DEPLOYMENT)
    assert "deployment.apps/web created" in proc.stdout
    assert "PodSecurity" not in proc.stderr


def test_exempt_namespace_user_and_runtime_class(kubectl: Kubectl, server: ApiServer, tmp_path: Path) -> None:
    proc = kubectl.run("create", "namespace", "exempt-ns")
    proc = kubectl.run("label", "namespace", "exempt-ns", f"{ENFORCE}=restricted")
    assert (
        'Warning: namespace "exempt-ns" is exempt from Pod Security, and the policy '
        "(enforce=restricted:latest) will be ignored"
    ) in proc.stderr
    kubectl("-n", "exempt-ns", "apply", "-f", "-", input=PRIVILEGED_POD % "free")

    ns = new_namespace(kubectl, **{ENFORCE: "restricted"})
    exempt = Kubectl(
        server.client_kubeconfig("exempt-user", ("system:masters",), tmp_path / "exempt.kubeconfig"), tmp_path
    )
    exempt("-n", ns, "apply", "-f", "-", input=PRIVILEGED_POD % "by-exempt-user")
    ev = audit_event(server, lambda e: _ref(e, ns, "by-exempt-user"))
    assert ev["annotations"]["pod-security.kubernetes.io/exempt"] == "user"

    kubectl(
        "apply",
        "-f",
        "-",
        input="apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: exempt-rc}\nhandler: runc\n",
    )
    kubectl("-n", ns, "apply", "-f", "-", input=BARE_POD % ("in-rc", "runtimeClassName: exempt-rc"))
    proc = kubectl.run("-n", ns, "apply", "-f", "-", input=BARE_POD % ("not-exempt", ""), check=False)
    assert 'pods "not-exempt" is forbidden: violates PodSecurity "restricted:latest"' in proc.stderr


def test_a_bad_label_is_refused_with_upstreams_422(kubectl: Kubectl) -> None:
    ns = new_namespace(kubectl)
    proc = kubectl.run("label", "namespace", ns, f"{ENFORCE}=strict", check=False)
    assert proc.returncode == 1
    assert (
        f'Namespace "{ns}" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: '
        'Invalid value: "strict": must be one of privileged, baseline, restricted'
    ) in proc.stderr
    proc = kubectl.run("label", "namespace", ns, "pod-security.kubernetes.io/warn-version=1.30", check=False)
    assert 'Invalid value: "1.30": must be "latest" or "v1.x"' in proc.stderr


def test_relabel_lists_the_existing_pods_that_would_violate(kubectl: Kubectl) -> None:
    ns = new_namespace(kubectl)
    for name in ("b-pod", "a-pod"):
        kubectl("-n", ns, "apply", "-f", "-", input=BARE_POD % (name, ""))
    kubectl("-n", ns, "apply", "-f", "-", input=PRIVILEGED_POD % "priv")
    proc = kubectl.run("label", "namespace", ns, f"{ENFORCE}=restricted")
    assert f"namespace/{ns} labeled" in proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("Warning: ")]
    assert warnings == [
        f'Warning: existing pods in namespace "{ns}" violate the new PodSecurity enforce level "restricted:latest"',
        "Warning: a-pod (and 1 other pod): allowPrivilegeEscalation != false, unrestricted capabilities, "
        "runAsNonRoot != true, seccompProfile",
        "Warning: priv: privileged, allowPrivilegeEscalation != false, unrestricted capabilities, "
        "restricted volume types, runAsNonRoot != true, seccompProfile",
    ]
    # relaxing the level tries nothing
    proc = kubectl.run("label", "--overwrite", "namespace", ns, f"{ENFORCE}=baseline")
    assert "Warning" not in proc.stderr
