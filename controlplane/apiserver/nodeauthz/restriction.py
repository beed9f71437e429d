"""The NodeRestriction admission plugin (upstream's plugin/pkg/admission/noderestriction): what a node may
write, once the Node authorizer has let the request through. A node may change only its own Node
(without configSource, without touching its taints, and without labels of the kubernetes.io / k8s.io
namespaces outside the kubelet's set, nor any under node-restriction.kubernetes.io/), only its own
Lease, only the status of pods bound to it (not their labels), create only mirror pods bound to
itself that reference nothing, delete only its pods, and request tokens only bound to its pods.

Requests from anyone but a node pass untouched. Deletes come through `admit_delete` (the REST
handler asks before the DELETE path runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors
from controlplane.apiserver.nodeauthz.authorizer import NODE_LEASE_NAMESPACE, node_identity
from controlplane.apiserver.nodeauthz.graph import pod_refs
from kubeclient.kubeletlabels import in_domain, is_kubelet_label, is_kubernetes_label, label_namespace

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import AdmissionRequest

Obj = dict[str, Any]
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
NODE_RESTRICTION_LABELS = "node-restriction.kubernetes.io"


def forbidden_labels(new: dict[str, str] | None, old: dict[str, str] | None) -> list[str]:
    """getForbiddenLabels of getModifiedLabels: the changed labels a node may not set, sorted."""
    new, old = new or {}, old or {}
    modified = {k for k in set(new) | set(old) if new.get(k) != old.get(k) or (k in new) != (k in old)}
    out = set()
    for label in modified:
        if in_domain(label_namespace(label), NODE_RESTRICTION_LABELS):
            out.add(label)
        if is_kubernetes_label(label) and not is_kubelet_label(label):
            out.add(label)
    return sorted(out)


def _meta(obj: Obj | None) -> Obj:
    return (obj or {}).get("metadata") or {}


class NodeRestriction:
    def admit(self, request: AdmissionRequest) -> None:
        node, is_node = node_identity(request.user)
        if not is_node:
            return
        if not node:
            assert request.user is not None
            raise self._forbidden(request, f'could not determine node from user "{request.user.name}"')
        check = self._checks().get((request.kind.group, request.kind.plural))
        if check is not None:
            check(self, node, request)

    def admit_delete(self, request: AdmissionRequest) -> None:
        """A node deletes only pods bound to itself."""
        node, is_node = node_identity(request.user)
        if not is_node or (request.kind.group, request.kind.plural) != ("", "pods") or request.subresource:
            return
        if ((request.old or {}).get("spec") or {}).get("nodeName") != node:
            raise self._forbidden(
                request, f'node "{node}" can only delete pods with spec.nodeName set to itself'
            )

    @staticmethod
    def _checks() -> dict[tuple[str, str], Any]:
        return {
            ("", "pods"): NodeRestriction._pod,
            ("", "nodes"): NodeRestriction._node,
            ("coordination.k8s.io", "leases"): NodeRestriction._lease,
            ("", "serviceaccounts"): NodeRestriction._service_account,
        }

    @staticmethod
    def _forbidden(request: AdmissionRequest, message: str) -> errors.ApiError:
        kind = request.kind
        name = request.name or _meta(request.obj).get("name", "")
        subject = f'{kind.resource} "{name}"' if name else kind.resource
        return errors.forbidden_request(f"{subject} is forbidden: {message}", kind.plural, kind.group, name)

    # --- pods ----------------------------------------------------------------------------------------

    def _pod(self, node: str, request: AdmissionRequest) -> None:
        if request.subresource == "status":
            self._pod_status(node, request)
        elif request.subresource == "eviction":
            self._pod_eviction(node, request)
        elif request.subresource:
            raise self._forbidden(
                request,
                f"unexpected pod subresource \"{request.subresource}\", only 'status' and "
                "'eviction' are allowed",
            )
        elif request.operation == "CREATE":
            self._mirror_pod(node, request)
        else:
            raise self._forbidden(
                request,
                f'unexpected operation "{request.operation}", node "{node}" can only create '
                "and delete mirror pods",
            )

    def _pod_eviction(self, node: str, request: AdmissionRequest) -> None:
        """admitPodEviction: a node evicts only pods bound to itself."""
        if request.operation != "CREATE":
            raise self._forbidden(request, f"unexpected operation {request.operation}")
        name = request.name or _meta(request.obj).get("name", "")
        if not name:
            raise self._forbidden(request, "could not determine pod from request data")
        cached = request.registry.cache.get(request.kind.key(request.namespace, name))
        if cached is None:
            raise errors.not_found(request.kind.plural, request.kind.group, name)
        if (cached.obj.get("spec") or {}).get("nodeName") != node:
            raise self._forbidden(
                request, f"node {node} can only evict pods with spec.nodeName set to itself"
            )

    def _pod_status(self, node: str, request: AdmissionRequest) -> None:
        if request.operation != "UPDATE":
            raise self._forbidden(request, f'unexpected operation "{request.operation}"')
        if ((request.old or {}).get("spec") or {}).get("nodeName") != node:
            raise self._forbidden(
                request, f'node "{node}" can only update pod status for pods with spec.nodeName set to itself'
            )
        if (_meta(request.old).get("labels") or {}) != (_meta(request.obj).get("labels") or {}):
            raise self._forbidden(request, f'node "{node}" cannot update labels through pod status')

    def _mirror_pod(self, node: str, request: AdmissionRequest) -> None:
        """admitPodCreate: a mirror pod of its own, owned by its Node, referencing no other object."""
        pod, meta = request.obj, _meta(request.obj)
        spec = pod.get("spec") or {}
        if MIRROR_POD_ANNOTATION not in (meta.get("annotations") or {}):
            raise self._forbidden(
                request,
                f'pod does not have "{MIRROR_POD_ANNOTATION}" annotation, node "{node}" '
                "can only create mirror pods",
            )
        if spec.get("nodeName") != node:
            raise self._forbidden(
                request, f'node "{node}" can only create pods with spec.nodeName set to itself'
            )
        owners = meta.get("ownerReferences") or []
        if len(owners) > 1:
            raise self._forbidden(
                request, f'node "{node}" can only create pods with a single owner reference set to itself'
            )
        if not owners:
            raise self._forbidden(
                request, f'node "{node}" can only create pods with an owner reference set to itself'
            )
        owner = owners[0]
        if owner.get("apiVersion") != "v1" or owner.get("kind") != "Node" or owner.get("name") != node:
            raise self._forbidden(
                request, f'node "{node}" can only create pods with an owner reference set to itself'
            )
        if not owner.get("controller"):
            raise self._forbidden(
                request, f'node "{node}" can only create pods with a controller owner reference set to itself'
            )
        if owner.get("blockOwnerDeletion"):
            raise self._forbidden(
                request, f'node "{node}" must not set blockOwnerDeletion on an owner reference'
            )
        from controlplane.apiserver.kinds.node import KIND as NODE

        registered = request.registry.cache.get(NODE.key("", node))
        if registered is None:
            raise errors.not_found("nodes", "", node)
        uid = _meta(registered.obj).get("uid")
        if owner.get("uid") != uid:
            raise self._forbidden(request, f"node {node} UID mismatch: expected {owner.get('uid')} got {uid}")
        refs = pod_refs(pod)
        if spec.get("serviceAccountName"):
            raise self._forbidden(
                request, f'node "{node}" can not create pods that reference a service account'
            )
        if refs is not None and refs.secrets:
            raise self._forbidden(request, f'node "{node}" can not create pods that reference secrets')
        if refs is not None and refs.configmaps:
            raise self._forbidden(request, f'node "{node}" can not create pods that reference configmaps')
        if any(isinstance(v, dict) and "persistentVolumeClaim" in v for v in spec.get("volumes") or []):
            raise self._forbidden(
                request, f'node "{node}" can not create pods that reference persistentvolumeclaims'
            )

    # --- nodes, leases, tokens -----------------------------------------------------------------------------

    def _node(self, node: str, request: AdmissionRequest) -> None:
        name = request.name or _meta(request.obj).get("name", "")
        if name != node:
            raise self._forbidden(request, f'node "{node}" is not allowed to modify node "{name}"')
        spec, old_spec = request.obj.get("spec") or {}, (request.old or {}).get("spec") or {}
        labels = _meta(request.obj).get("labels")
        if request.operation == "CREATE":
            if spec.get("configSource") is not None:
                raise self._forbidden(
                    request, f'node "{node}" is not allowed to create pods with a non-nil configSource'
                )
            refused = forbidden_labels(labels, None)
            if refused:
                raise self._forbidden(
                    request, f'node "{node}" is not allowed to set the following labels: {", ".join(refused)}'
                )
            return
        if spec.get("configSource") is not None and spec.get("configSource") != old_spec.get("configSource"):
            raise self._forbidden(
                request, f'node "{node}" is not allowed to update configSource to a new non-nil configSource'
            )
        if (spec.get("taints") or []) != (old_spec.get("taints") or []):
            raise self._forbidden(request, f'node "{node}" is not allowed to modify taints')
        refused = forbidden_labels(labels, _meta(request.old).get("labels"))
        if refused:
            raise self._forbidden(request, f"is not allowed to modify labels: {', '.join(refused)}")

    def _lease(self, node: str, request: AdmissionRequest) -> None:
        if request.namespace != NODE_LEASE_NAMESPACE:
            raise self._forbidden(
                request, f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace'
            )
        name = _meta(request.obj).get("name", "") if request.operation == "CREATE" else request.name
        if name != node:
            raise self._forbidden(
                request, "can only access node lease with the same name as the requesting node"
            )

    def _service_account(self, node: str, request: AdmissionRequest) -> None:
        """admitServiceAccount: a node's TokenRequest must be bound to a pod scheduled on it."""
        if request.operation != "CREATE" or request.subresource != "token":
            return
        ref = (request.obj.get("spec") or {}).get("boundObjectRef") or {}
        if ref.get("apiVersion") != "v1" or ref.get("kind") != "Pod" or not ref.get("name"):
            raise self._forbidden(request, "node requested token not bound to a pod")
        if not ref.get("uid"):
            raise self._forbidden(request, "node requested token with a pod binding without a uid")
        from controlplane.apiserver.kinds.pod import KIND as POD

        cached = request.registry.cache.get(POD.key(request.namespace, ref["name"]))
        if cached is None:
            raise errors.not_found("pods", "", ref["name"])
        pod = cached.obj
        if ref["uid"] != _meta(pod).get("uid"):
            raise self._forbidden(
                request,
                f"the UID in the bound object reference ({ref['uid']}) does not match the UID "
                "in record. The object might have been deleted and then recreated",
            )
        if (pod.get("spec") or {}).get("nodeName") != node:
            raise self._forbidden(
                request, "node requested token bound to a pod scheduled on a different node"
            )


__all__ = ["NodeRestriction", "forbidden_labels"]
