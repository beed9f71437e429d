"""Who wrote it: a managedFields manager or an event's reporter, mapped to the component a person knows.

The API server records the client's User-Agent product (before the "/") as the field manager unless the
client names one: kube-controller-manager, kube-scheduler, kubelet, kubectl-client-side-apply,
kubectl-create, kubectl-edit... Events name their reporter (reportingController, or source.component on
core/v1 events): deployment-controller, default-scheduler, kubelet. Everything a person typed lands in
one lane, "user", with the manager kept for the detail.
"""

from __future__ import annotations

CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
KUBELET = "kubelet"
USER = "user"
API_SERVER = "kube-apiserver"

_EXACT = {
    "kube-controller-manager": CONTROLLER_MANAGER,
    "kube-scheduler": SCHEDULER,
    "default-scheduler": SCHEDULER,
    "kubelet": KUBELET,
    "kube-apiserver": API_SERVER,
    "before-first-apply": USER,
    "OpenAPI-Generator": USER,  # the official Python client's default User-Agent
    "python-requests": USER,
    "kubernetes-python-client": USER,
    "curl": USER,
}


def component(manager: str) -> str:
    """The lane for a field manager or an event reporter (`replicaset-controller` -> the controller
    manager, `kubectl-client-side-apply` -> the user)."""
    name = (manager or "").strip()
    if not name:
        return "unknown"
    if name in _EXACT:
        return _EXACT[name]
    if name.startswith("kubectl") or name == "helm" or name.startswith("pykubelet-user"):
        return USER
    if name.endswith("-controller") or name.startswith("system:serviceaccount:kube-system:"):
        return CONTROLLER_MANAGER
    if name.endswith("-scheduler"):
        return SCHEDULER
    if name.startswith("system:node:"):
        return KUBELET
    return name


def event_reporter(event: dict) -> str:
    """The controller an Event names (reportingController, else source.component)."""
    return str(
        event.get("reportingController")
        or event.get("reportingComponent")
        or (event.get("source") or {}).get("component")
        or ""
    )


_SYSTEM_USERS = {
    "system:kube-scheduler": SCHEDULER,
    "system:kube-controller-manager": CONTROLLER_MANAGER,
    "system:apiserver": API_SERVER,
}


def of_user(username: str) -> str:
    """The lane for an authenticated user (the audit log's writer): a component's own identity
    (`system:kube-scheduler`, `system:node:n1`, a kube-system controller's service account), else the
    person or program, in the user lane."""
    if username in _SYSTEM_USERS:
        return _SYSTEM_USERS[username]
    if username.startswith("system:node:"):
        return KUBELET
    if username.startswith("system:serviceaccount:kube-system:"):
        return CONTROLLER_MANAGER
    return USER if username else "unknown"
