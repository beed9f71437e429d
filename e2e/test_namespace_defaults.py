"""What every namespace of a genuine cluster holds without being asked: a `default` ServiceAccount and
the `kube-root-ca.crt` ConfigMap with the cluster CA, both put back when deleted (the controller
manager's serviceaccount and root-ca-cert-publisher loops)."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from e2e.waiting import wait_for


def _maybe(read):  # type: ignore[no-untyped-def]
    try:
        return read()
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def test_new_namespace_gets_default_service_account_and_root_ca(kube, namespace):
    sa = wait_for(
        lambda: _maybe(lambda: kube.read_namespaced_service_account("default", namespace)),
        timeout=30,
        what="the default ServiceAccount",
    )
    cm = wait_for(
        lambda: _maybe(lambda: kube.read_namespaced_config_map("kube-root-ca.crt", namespace)),
        timeout=30,
        what="the kube-root-ca.crt ConfigMap",
    )
    assert list(cm.data) == ["ca.crt"]
    assert cm.data["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")

    kube.delete_namespaced_service_account("default", namespace)
    kube.delete_namespaced_config_map("kube-root-ca.crt", namespace)
    again = wait_for(
        lambda: _maybe(lambda: kube.read_namespaced_service_account("default", namespace)),
        timeout=30,
        what="the default ServiceAccount to come back",
    )
    assert again.metadata.uid != sa.metadata.uid
    back = wait_for(
        lambda: _maybe(lambda: kube.read_namespaced_config_map("kube-root-ca.crt", namespace)),
        timeout=30,
        what="kube-root-ca.crt to come back",
    )
    assert back.data == cm.data
