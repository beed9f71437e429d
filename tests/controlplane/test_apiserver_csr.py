"""certificates.k8s.io/v1 CertificateSigningRequests against the real API server: the requester comes
from the request's identity and cannot be forged or changed, upstream's 422s, the approval and status
subresources each change only their part, approving needs `approve` on the signer, signing needs
`sign`, `kubectl certificate approve|deny` and `kubectl get csr` as on a genuine cluster."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeclient import bootstraptoken as bt
from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.conftest import KUBECTL, Kubectl
from tests.controlplane.joinutil import (
    CLIENT,
    CLIENT_KUBELET,
    CSR_PATH,
    SERVING,
    admin,
    approve,
    csr_body,
    make_csr,
    put_token,
    raw,
)

pytestmark = pytest.mark.integration  # real servers, etcd or processes


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("csr-api"), extra_args=["--enable-bootstrap-token-auth"]) as s:
        yield s


@pytest.fixture(scope="module")
def kctl(server: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    return Kubectl(server.kubeconfig, tmp_path_factory.mktemp("kubectl-home"))


def _name() -> str:
    return f"csr-{uuid.uuid4().hex[:8]}"


def _create(server: ApiServer, body: dict, token: str | None = None) -> tuple[int, dict]:
    if token is None:
        return admin(server, "POST", CSR_PATH, body)
    return raw(server, "POST", CSR_PATH, token, body)


def test_requester_is_set_from_the_bootstrap_identity(server: ApiServer) -> None:
    token = bt.generate()
    put_token(server, token)
    pem, _ = make_csr("system:node:n1")
    body = csr_body(_name(), pem)
    body["spec"].update(username="kubernetes-admin", groups=["system:masters"], uid="forged")
    body["status"] = {"conditions": [{"type": "Approved", "status": "True"}]}
    status, csr = _create(server, body, token)
    assert status == 201, csr
    spec = csr["spec"]
    assert spec["username"] == f"system:bootstrap:{token[:6]}"
    assert "uid" not in spec
    assert spec["groups"] == ["system:bootstrappers", bt.KUBEADM_DEFAULT_GROUP, "system:authenticated"]
    assert not (csr.get("status") or {}).get("conditions")
    # An update of the main resource keeps spec and status.
    csr["spec"]["username"] = "someone-else"
    csr["metadata"]["labels"] = {"a": "b"}
    status, updated = admin(server, "PUT", f"{CSR_PATH}/{csr['metadata']['name']}", csr)
    assert status == 200, updated
    assert updated["spec"]["username"] == f"system:bootstrap:{token[:6]}"
    assert updated["metadata"]["labels"] == {"a": "b"}


def _causes(body: dict) -> dict[str, str]:
    return {c["field"]: c["message"] for c in body["details"]["causes"]}


def test_validation_422s(server: ApiServer) -> None:
    pem, _ = make_csr("system:node:n1")
    bad = csr_body(_name(), b"not a csr", signer="example")
    bad["spec"]["usages"] = ["client auth", "client auth", "flying"]
    bad["spec"]["expirationSeconds"] = 599
    status, body = _create(server, bad)
    assert status == 422, body
    causes = _causes(body)
    assert causes["spec.request"].endswith(": PEM block type must be CERTIFICATE REQUEST")
    assert causes["spec.request"].startswith("Invalid value: []byte{0x6e, 0x6f, 0x74")
    assert causes["spec.usages[1]"] == 'Duplicate value: "client auth"'
    assert causes["spec.usages[2]"].startswith('Unsupported value: "flying": supported values: "any", ')
    assert causes["spec.signerName"] == (
        "Invalid value: \"example\": must be a fully qualified domain and path of the form 'example.com/signer-name'"
    )
    assert causes["spec.expirationSeconds"] == (
        "Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)"
    )
    missing = csr_body(_name(), pem, signer="")
    missing["spec"]["usages"] = []
    status, body = _create(server, missing)
    assert status == 422
    assert _causes(body) == {"spec.usages": "Required value", "spec.signerName": "Required value"}
    legacy = csr_body(_name(), pem, signer="kubernetes.io/legacy-unknown")
    status, body = _create(server, legacy)
    assert _causes(body)["spec.signerName"].endswith(
        "the legacy signerName is not allowed via this API version"
    )
    single = csr_body(_name(), pem, signer="localhost/x")
    assert _causes(_create(server, single)[1])["spec.signerName"] == (
        'Invalid value: "localhost": should be a domain with at least two segments separated by dots'
    )


def test_usages_default_and_expiration_600_is_accepted(server: ApiServer) -> None:
    pem, _ = make_csr("someone", orgs=())
    body = csr_body(_name(), pem, signer="example.com/custom", expiration=600)
    del body["spec"]["usages"]
    status, csr = _create(server, body)
    assert status == 201, csr
    assert csr["spec"]["usages"] == ["digital signature", "key encipherment"]
    assert csr["spec"]["expirationSeconds"] == 600


def test_approval_and_status_subresources_own_their_parts(server: ApiServer) -> None:
    pem, _ = make_csr("system:node:n1")
    name = _name()
    assert _create(server, csr_body(name, pem))[0] == 201
    # The main resource cannot approve.
    status, csr = admin(server, "GET", f"{CSR_PATH}/{name}")
    csr["status"] = {"conditions": [{"type": "Approved", "status": "True"}]}
    status, after = admin(server, "PUT", f"{CSR_PATH}/{name}", csr)
    assert status == 200 and not (after.get("status") or {}).get("conditions")
    # /status cannot add Approved.
    status, csr = admin(server, "GET", f"{CSR_PATH}/{name}")
    csr["status"] = {"conditions": [{"type": "Approved", "status": "True"}]}
    status, after = admin(server, "PUT", f"{CSR_PATH}/{name}/status", csr)
    assert status == 200 and not (after.get("status") or {}).get("conditions")
    # /approval: Approved with upstream's timestamps; Approved=False is refused.
    status, csr = admin(server, "GET", f"{CSR_PATH}/{name}")
    csr["status"] = {"conditions": [{"type": "Approved", "status": "False"}]}
    status, body = admin(server, "PUT", f"{CSR_PATH}/{name}/approval", csr)
    assert status == 422
    assert (
        _causes(body)["status.conditions[0].status"] == 'Unsupported value: "False": supported values: "True"'
    )
    status, approved = approve(server, name)
    assert status == 200, approved
    (cond,) = approved["status"]["conditions"]
    assert cond["type"] == "Approved" and cond["lastUpdateTime"] and cond["lastTransitionTime"]
    # Denied besides Approved, and removing Approved, are refused.
    status, body = approve(server, name, "Denied")
    assert status == 422
    assert _causes(body)["status.conditions[1].type"] == (
        'Invalid value: "Denied": Approved and Denied conditions are mutually exclusive'
    )
    approved["status"]["conditions"] = []
    status, body = admin(server, "PUT", f"{CSR_PATH}/{name}/approval", approved)
    assert status == 422
    assert (
        _causes(body)["status.conditions"]
        == 'Forbidden: updates may not remove a condition of type "Approved"'
    )
    # /status sets the certificate once; a bad one is refused; /approval cannot touch it.
    status, csr = admin(server, "GET", f"{CSR_PATH}/{name}")
    csr["status"]["certificate"] = base64.b64encode(b"junk").decode()
    status, body = admin(server, "PUT", f"{CSR_PATH}/{name}/status", csr)
    assert status == 422
    assert _causes(body)["status.certificate"] == (
        'Invalid value: "<certificate data>": must contain at least one CERTIFICATE PEM block'
    )
    cert = server.ca_cert.read_bytes()
    csr["status"]["certificate"] = base64.b64encode(cert).decode()
    status, signed = admin(server, "PUT", f"{CSR_PATH}/{name}/status", csr)
    assert status == 200, signed
    assert base64.b64decode(signed["status"]["certificate"]) == cert
    assert [c["type"] for c in signed["status"]["conditions"]] == ["Approved"]


def test_approving_needs_approve_on_the_signer(server: ApiServer, tmp_path: Path) -> None:
    pem, _ = make_csr("system:node:n1")
    name = _name()
    assert _create(server, csr_body(name, pem))[0] == 201
    kubeconfig = server.client_kubeconfig("approver", (), tmp_path / "approver.kubeconfig")
    cert = (str(tmp_path / "approver.crt"), str(tmp_path / "approver.key"))
    rules = [
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["certificatesigningrequests", "certificatesigningrequests/approval"],
            "verbs": ["get", "update"],
        }
    ]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "approver"},
    }
    assert (
        admin(server, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", {**role, "rules": rules})[0]
        == 201
    )
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "approver"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "approver"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "approver"}],
    }
    assert admin(server, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)[0] == 201
    status, csr = raw(server, "GET", f"{CSR_PATH}/{name}", cert=cert)
    assert status == 200, csr
    csr["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "R"}]}
    status, body = raw(server, "PUT", f"{CSR_PATH}/{name}/approval", body=csr, cert=cert)
    assert status == 403, body
    assert body["message"] == (
        f'certificatesigningrequests.certificates.k8s.io "{name}" is forbidden: user not permitted to approve '
        f'requests with signerName "{CLIENT_KUBELET}"'
    )
    rules.append(
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["signers"],
            "resourceNames": ["kubernetes.io/*"],
            "verbs": ["approve"],
        }
    )
    status, _ = admin(
        server, "PUT", "/apis/rbac.authorization.k8s.io/v1/clusterroles/approver", {**role, "rules": rules}
    )
    assert status == 200
    status, body = raw(server, "PUT", f"{CSR_PATH}/{name}/approval", body=csr, cert=cert)
    assert status == 200, body
    assert kubeconfig.exists()


def test_kube_apiserver_client_signer_refuses_system_masters(server: ApiServer) -> None:
    pem, _ = make_csr("root", orgs=("system:masters",))
    status, body = _create(server, csr_body(_name(), pem, signer=CLIENT))
    assert status == 403, body
    assert body["message"].endswith(
        "is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"
    )


def test_kubectl_get_approve_deny(server: ApiServer, kctl: Kubectl) -> None:
    pem, _ = make_csr("system:node:n1")
    first, second = _name(), _name()
    assert _create(server, csr_body(first, pem, expiration=3600))[0] == 201
    assert (
        _create(server, csr_body(second, pem, signer=SERVING, usages=("digital signature", "server auth")))[0]
        == 201
    )
    table = kctl("get", "csr", first, second)
    header, row1, row2 = table.splitlines()
    assert header.split() == ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"]
    assert row1.split()[2:] == [CLIENT_KUBELET, "kubernetes-admin", "60m", "Pending"]
    assert row2.split()[2:] == [SERVING, "kubernetes-admin", "<none>", "Pending"]
    out = kctl("certificate", "approve", first)
    assert out.strip() == f"certificatesigningrequest.certificates.k8s.io/{first} approved"
    out = kctl("certificate", "deny", second)
    assert out.strip() == f"certificatesigningrequest.certificates.k8s.io/{second} denied"
    one = json.loads(kctl("get", "csr", first, "-o", "json"))
    (cond,) = one["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Approved", "True", "KubectlApprove")
    assert cond["message"] == "This CSR was approved by kubectl certificate approve."
    two = json.loads(kctl("get", "csr", second, "-o", "json"))
    assert [(c["type"], c["reason"]) for c in two["status"]["conditions"]] == [("Denied", "KubectlDeny")]
    assert kctl("get", "csr", first, second, "--no-headers").split()[5::6] == ["Approved", "Denied"]
    # A denied CSR cannot be approved (kubectl says so without --force).
    proc = kctl.run("certificate", "approve", second, check=False)
    assert proc.returncode != 0


def test_the_requester_step_cannot_be_disabled() -> None:
    from controlplane.apiserver.kindparts import builtin_table

    table = builtin_table()
    name = "CertificateSigningRequestRequester"
    assert name not in table.known_plugins()
    assert "CertificateApproval" in table.known_plugins()
    chain = table.admission_chain([name, "CertificateApproval"])
    names = [type(p).__name__ for p in chain.mutating + chain.validating]
    assert "CertificateSigningRequestStrategy" in names and "CertificateApproval" not in names
