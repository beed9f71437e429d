"""The service-account token controller (upstream's `serviceaccount-token`, pkg/controller/serviceaccount/
tokens_controller.go): a Secret of type `kubernetes.io/service-account-token` that names its account in
the `kubernetes.io/service-account.name` annotation gets `token` (a legacy token signed with the
service-account key, --service-account-private-key-file), `ca.crt` (the cluster CA) and `namespace`, and
the account's UID in `kubernetes.io/service-account.uid`. A Secret whose account is gone, or was
replaced (another UID), is deleted, as are an account's token Secrets when it goes.

It needs the signing key, so it starts only with --service-account-private-key-file, and it acts with
the manager's own credentials (system:kube-controller-manager), as upstream's runs with the root client.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from controlplane import legacytoken
from controlplane.controllers.base import Controller, ControllerContext
from kubeclient.errors import ApiError
from kubeclient.informer import by_namespace, meta

Obj = dict[str, Any]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def load_private_key(path: Path) -> tuple[rsa.RSAPrivateKey, str]:
    """The signing key and its kid (the API server's: base64url SHA-256 of the public key's DER)."""
    import hashlib

    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError(f"{path}: not an RSA private key")
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    kid = base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode()
    return key, kid


class ServiceAccountTokenController(Controller):
    name = "serviceaccount-token"
    workers = 2
    account = "tokens-controller"  # upstream's name for it; it acts on the root client all the same
    root_credentials = True  # upstream runs it with the manager's root client

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.key: tuple[rsa.RSAPrivateKey, str] | None = ctx.option("service_account_private_key", None)
        ca = ctx.option("root_ca", b"")
        self.ca = ca if isinstance(ca, bytes) else str(ca).encode()
        self.accounts = ctx.informers.get("/api/v1/serviceaccounts")
        self.secrets = ctx.informers.get(
            "/api/v1/secrets",
            field_selector=f"type={legacytoken.SECRET_TYPE}",
            indexers={"namespace": by_namespace},
        )
        self.secrets.add_handler(**self.handlers())
        # An account that goes (or comes back under the same name) decides its Secrets' fate.
        self.accounts.add_handler(
            on_add=self._account_changed,
            on_update=lambda _o, n: self._account_changed(n),
            on_delete=self._account_changed,
        )

    def _account_changed(self, account: Obj) -> None:
        m = meta(account)
        for secret in self.secrets.by_index("namespace", str(m.get("namespace", ""))):
            if (meta(secret).get("annotations") or {}).get(legacytoken.NAME_ANNOTATION) == m.get("name"):
                self.enqueue(secret)

    def token(self, namespace: str, secret: str, account: str, uid: str) -> str:
        assert self.key is not None
        key, kid = self.key
        return jwt.encode(
            legacytoken.claims(namespace, secret, account, uid), key, algorithm="RS256", headers={"kid": kid}
        )

    async def sync(self, key: str) -> None:
        if self.key is None:
            return
        secret = self.secrets.get(key)
        if secret is None or meta(secret).get("deletionTimestamp"):
            return
        m = meta(secret)
        namespace, name = str(m.get("namespace", "")), str(m.get("name", ""))
        annotations = m.get("annotations") or {}
        account_name = annotations.get(legacytoken.NAME_ANNOTATION)
        if not account_name:
            return
        account = self.accounts.get(f"{namespace}/{account_name}")
        path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
        want_uid = annotations.get(legacytoken.UID_ANNOTATION)
        if account is None:
            # The informer may be behind: ask the server before deleting anything.
            try:
                account = await self.client.get(
                    f"/api/v1/namespaces/{namespace}/serviceaccounts/{account_name}"
                )
            except ApiError as err:
                if not err.not_found:
                    raise
        uid = str(meta(account).get("uid", "")) if account is not None else ""
        if account is None or (want_uid and want_uid != uid):
            await self._delete(path, str(m.get("uid", "")))
            return
        data = dict(secret.get("data") or {})
        wanted = {"ca.crt": _b64(self.ca), "namespace": _b64(namespace.encode())}
        if data.get("token") and all(data.get(k) == v for k, v in wanted.items()) and want_uid == uid:
            return
        updated = dict(secret)
        updated["metadata"] = {**m, "annotations": {**annotations, legacytoken.UID_ANNOTATION: uid}}
        data.update(wanted)
        if not data.get("token"):
            data["token"] = _b64(self.token(namespace, name, str(account_name), uid).encode())
        updated["data"] = data
        try:
            await self.client.replace(path, updated)
        except ApiError as err:
            if err.conflict:
                self.queue.add(key)  # changed meanwhile: the informer brings the new version
                return
            if not err.not_found:
                raise

    async def _delete(self, path: str, uid: str) -> None:
        try:
            await self.client.delete(
                path, {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
            )
        except ApiError as err:
            if not (err.not_found or err.conflict):
                raise
