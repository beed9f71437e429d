"""kubeadm's token discovery (`kubeadm join --token --discovery-token-ca-cert-hash`), for `pykubelet join`:
how a host that knows only an address, a bootstrap token and a CA pin comes to trust the API server.

1. kube-public/cluster-info is fetched anonymously over TLS without checking the server's certificate
   (nothing is trusted yet);
2. its `jws-kubeconfig-<token id>` must be a valid detached JWS of the kubeconfig in it, keyed with the
   token secret: only someone holding the token could have signed it, so the CA in it is the cluster's;
3. that CA's public key must hash to one of the pins given (kubeadm's `sha256:<hex of the SPKI>`), which
   also rules out a server that merely knows the token;
4. cluster-info is fetched again, this time verifying the server with that CA, and must say the same.

Every step is bounded in time (a connect and read timeout, default 10 s) and every refusal names what
was refused; nothing here writes anything, so a refusal changes nothing on the host.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import yaml

from kubeclient import bootstraptoken as bt
from kubeclient.tlsverify import go_compatible

CLUSTER_INFO_PATH = f"/api/v1/namespaces/{bt.CLUSTER_INFO_NAMESPACE}/configmaps/{bt.CLUSTER_INFO}"
DEFAULT_TIMEOUT = 10.0
SIGNATURE_RETRY = 1.0  # seconds between asks while the token's signature is missing


class DiscoveryError(Exception):
    """Discovery refused to trust the server, or could not reach it; the message says why."""


class MissingSignature(DiscoveryError):
    """cluster-info holds no JWS for the token (yet: the signer may not have seen it)."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"https://{self.address}"


@dataclass(frozen=True)
class ClusterInfo:
    """What discovery established: the server to use (cluster-info's, as kubeadm takes it) and its CA."""

    server: str
    ca_pem: bytes
    ca_hash: str


def parse_endpoint(text: str) -> Endpoint:
    """`https://HOST:PORT` or kubeadm's bare `HOST:PORT`."""
    parsed = urlsplit(text if "://" in text else f"https://{text}")
    if parsed.scheme != "https" or not parsed.hostname or parsed.path not in ("", "/"):
        raise DiscoveryError(f"invalid API server endpoint {text!r}: want https://HOST:PORT or HOST:PORT")
    try:
        port = parsed.port or 6443
    except ValueError:
        raise DiscoveryError(f"invalid API server endpoint {text!r}: bad port") from None
    return Endpoint(parsed.hostname, port)


def parse_token(token: str) -> tuple[str, str]:
    match = bt.TOKEN_RE.match(token)
    if match is None:
        raise DiscoveryError(
            f'the bootstrap token "{token[:6]}..." was not of the form "{bt.TOKEN_RE.pattern[2:-2]}"'
        )
    return match.group(1), match.group(2)


def parse_pins(pins: list[str]) -> list[str]:
    """kubeadm's pubkeypin format: `sha256:` and 64 hex digits; at least one."""
    if not pins:
        raise DiscoveryError(
            "using token-based discovery without --discovery-token-ca-cert-hash is not supported: "
            "give the CA's hash (pykubelet token create --print-join-command prints it)"
        )
    out = []
    for pin in pins:
        kind, _, digest = pin.partition(":")
        digest = digest.lower()
        if kind != "sha256" or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise DiscoveryError(f'invalid hash "{pin}", expected "sha256:" and 64 hex digits')
        out.append(f"sha256:{digest}")
    return out


def _context(ca_pem: bytes | None) -> ssl.SSLContext:
    if ca_pem is None:
        context = go_compatible(ssl.create_default_context())
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return go_compatible(ssl.create_default_context(cadata=ca_pem.decode()))


def fetch_cluster_info(endpoint: Endpoint, ca_pem: bytes | None, timeout: float = DEFAULT_TIMEOUT) -> dict:
    """GET cluster-info anonymously; without `ca_pem` the server's certificate is not checked."""
    conn = http.client.HTTPSConnection(
        endpoint.host, endpoint.port, timeout=timeout, context=_context(ca_pem)
    )
    what = f"failed to request the cluster-info ConfigMap from {endpoint.address}"
    try:
        conn.request("GET", CLUSTER_INFO_PATH, headers={"Accept": "application/json"})
        response = conn.getresponse()
        body = response.read()
    except ssl.SSLCertVerificationError as err:
        raise DiscoveryError(
            f"{what}: the server's certificate is not signed by the pinned CA: {err.verify_message}"
        ) from None
    except TimeoutError:
        raise DiscoveryError(f"{what}: no answer within {timeout:g} s") from None
    except (OSError, http.client.HTTPException) as err:
        raise DiscoveryError(
            f"{what}: {err.strerror or err}" if isinstance(err, OSError) else f"{what}: {err}"
        ) from None
    finally:
        conn.close()
    if response.status != 200:
        raise DiscoveryError(f"{what}: HTTP {response.status}: {body[:200].decode(errors='replace')}")
    try:
        return json.loads(body)
    except ValueError:
        raise DiscoveryError(f"{what}: the answer is not JSON") from None


def _kubeconfig_cluster(kubeconfig: str) -> tuple[str, bytes]:
    try:
        doc = yaml.safe_load(kubeconfig) or {}
        cluster = (doc.get("clusters") or [{}])[0].get("cluster") or {}
        server = str(cluster["server"])
        ca = base64.b64decode(cluster["certificate-authority-data"])
    except (yaml.YAMLError, KeyError, IndexError, TypeError, AttributeError, ValueError):
        raise DiscoveryError(
            "the cluster-info ConfigMap holds no kubeconfig with a server and a CA"
        ) from None
    return server, ca


def verify_signed(config_map: dict, token_id: str, token_secret: str) -> str:
    """The kubeconfig of cluster-info once its JWS for this token checks out (kubeadm's texts)."""
    data = config_map.get("data") or {}
    kubeconfig = data.get(bt.KUBECONFIG_KEY)
    if not kubeconfig:
        raise DiscoveryError(f"there is no {bt.KUBECONFIG_KEY} key in the {bt.CLUSTER_INFO} ConfigMap")
    signature = data.get(bt.JWS_PREFIX + token_id)
    if not signature:
        raise MissingSignature(
            f'could not find a JWS signature in the cluster-info ConfigMap for token ID "{token_id}": '
            f'token id "{token_id}" is invalid for this cluster or it has expired. Use '
            '"pykubelet token create" on the control-plane node to create a new valid token'
        )
    if not bt.verify_detached_signature(kubeconfig, signature, token_id, token_secret):
        raise DiscoveryError(
            "failed to verify JWS signature of received cluster info object, can't trust this API Server"
        )
    return kubeconfig


def discover(
    endpoint_text: str, token: str, pins: list[str], timeout: float = DEFAULT_TIMEOUT
) -> ClusterInfo:
    """Steps 1-4 above: the server and CA a bootstrap kubeconfig may trust, or DiscoveryError."""
    endpoint = parse_endpoint(endpoint_text)
    token_id, token_secret = parse_token(token)
    wanted = parse_pins(pins)
    # A token created a moment ago is signed by the controller manager's bootstrapsigner shortly after:
    # as kubeadm, keep asking (every second here, within the same bound) while the signature is missing.
    deadline = time.monotonic() + timeout
    while True:
        insecure = fetch_cluster_info(endpoint, None, timeout)
        try:
            kubeconfig = verify_signed(insecure, token_id, token_secret)
            break
        except MissingSignature:
            if time.monotonic() + SIGNATURE_RETRY > deadline:
                raise
            time.sleep(SIGNATURE_RETRY)
    server, ca_pem = _kubeconfig_cluster(kubeconfig)
    try:
        actual = bt.ca_cert_hash(ca_pem)
    except ValueError:
        raise DiscoveryError("the CA in the cluster-info ConfigMap is not a PEM certificate") from None
    if actual not in wanted:
        raise DiscoveryError(
            f'cluster CA found in cluster-info ConfigMap is invalid: none of the public keys "{actual}" '
            f"are pinned (--discovery-token-ca-cert-hash {', '.join(wanted)}); nothing was changed on this host"
        )
    secure = fetch_cluster_info(endpoint, ca_pem, timeout)
    if (secure.get("data") or {}).get(bt.KUBECONFIG_KEY) != kubeconfig:
        raise DiscoveryError(
            "failed to validate the cluster-info ConfigMap: it changed between the insecure and the "
            "secure request, can't trust this API Server"
        )
    return ClusterInfo(server=server, ca_pem=ca_pem, ca_hash=actual)
