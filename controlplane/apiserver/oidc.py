"""Service-account issuer discovery (upstream's pkg/serviceaccount/openidmetadata.go): the OpenID
configuration at /.well-known/openid-configuration and the public signing keys at /openid/v1/jwks, so
a party outside the cluster can verify the tokens this server issues. Who may read them is the
authorizer's decision (upstream binds system:service-account-issuer-discovery to every account)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from aiohttp import web

from controlplane.apiserver.sakeys import ALGORITHM, SigningKey, VerificationKey

CONFIG_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/openid/v1/jwks"
CACHE_CONTROL = "public, max-age=3600"


def configuration(issuer: str, jwks_uri: str = "") -> dict[str, object]:
    return {
        "issuer": issuer,
        "jwks_uri": jwks_uri or issuer.rstrip("/") + JWKS_PATH,
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": [ALGORITHM],
    }


def jwks(keys: Sequence[SigningKey | VerificationKey]) -> dict[str, object]:
    return {"keys": [k.jwk() for k in keys]}


def _response(doc: dict[str, object], content_type: str) -> web.Response:
    response = web.Response(body=json.dumps(doc).encode(), headers={"Cache-Control": CACHE_CONTROL})
    response.content_type = content_type
    return response


def configuration_response(issuer: str, jwks_uri: str = "") -> web.Response:
    return _response(configuration(issuer, jwks_uri), "application/json")


def jwks_response(keys: Sequence[SigningKey | VerificationKey]) -> web.Response:
    return _response(jwks(keys), "application/jwk-set+json")


__all__ = ["CONFIG_PATH", "JWKS_PATH", "configuration", "configuration_response", "jwks", "jwks_response"]
