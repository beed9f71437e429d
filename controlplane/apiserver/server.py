"""Assembles the API server: store, watch cache, registry, request chain, routes, TLS; runs it.

Debugging latency: PYKUBELET_LOOP_STALL_MS=50 (PYKUBELET_LOOP_STALL_FILE=PATH) makes a serving server log its
event loop's lag, every stretch of the loop longer than 50 ms with the code it ran, and its GC passes
(loopstall.py); off by default, and nothing runs for it then."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import json
import logging
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from prometheus_client.core import GaugeMetricFamily, Metric

from controlplane import legacytoken
from controlplane.apiserver import (
    admissionmetrics,
    audit,
    authnreload,
    discovery,
    health,
    kindparts,
    loopstall,
    metricsbody,
    oidc,
    openapi,
    openapiproto,
    protobufhttp,
)
from controlplane.apiserver.aggregator import authconfig, autoregister
from controlplane.apiserver.aggregator.handler import Aggregator
from controlplane.apiserver.audit import AuditOptions, build_auditor
from controlplane.apiserver.authmodes import DEFAULT_MODES, Authorization
from controlplane.apiserver.authn import ANONYMOUS, USER_KEY, Authenticator, UserInfo, load_token_file
from controlplane.apiserver.authnconfig import AuthenticationConfig
from controlplane.apiserver.authz import Attributes, forbidden
from controlplane.apiserver.bootstrap import ensure_kubernetes_service
from controlplane.apiserver.bootstraptoken import BootstrapTokenAuthenticator
from controlplane.apiserver.bootstraptoken_cluster import ensure_join_objects
from controlplane.apiserver.certs import (
    CONTROLLER_MANAGER_USER,
    FRONT_PROXY_CLIENT,
    SCHEDULER_USER,
    Pki,
    ensure_pki,
    write_kubeconfig,
)
from controlplane.apiserver.encryptionconfig import EncryptionConfig
from controlplane.apiserver.endpointreconciler import DEFAULT_INTERVAL, DEFAULT_TTL, LeaseEndpointReconciler
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.etcdlayout import relayout_store
from controlplane.apiserver.fieldselect import slim_view
from controlplane.apiserver.flowcontrol.dispatcher import DUMP_PATH, Dispatcher
from controlplane.apiserver.handlers import RestHandler, json_response
from controlplane.apiserver.impersonation import impersonate
from controlplane.apiserver.jwtauthn import JwtAuthenticator
from controlplane.apiserver.kubeletproxy import KubeletClient
from controlplane.apiserver.metrics import ApiServerMetrics, storage_gauges
from controlplane.apiserver.podsecurity import PodSecurityConfig
from controlplane.apiserver.registry import Registry
from controlplane.apiserver.request import MAX_BODY
from controlplane.apiserver.requestheader import RequestHeaderAuthenticator
from controlplane.apiserver.sakeys import (
    SigningKey,
    VerificationKey,
    ensure_signing_key,
    load_signing_key,
    load_verification_keys,
)
from controlplane.apiserver.satokens import DEFAULT_ISSUER, Obj, TokenIssuer, TokenValidator, today
from controlplane.apiserver.serviceranges import ServiceRanges
from controlplane.apiserver.storemetrics import MeasuredStore
from controlplane.apiserver.tokenwebhook import TokenWebhook
from controlplane.apiserver.webhooks import context as admission_context
from controlplane.storage import StoreError, StoreRefusedError, StoreUnavailableError
from controlplane.storage.cache import CachedObject, TooLargeResourceVersionError, WatchCache, encode
from controlplane.storage.encryption import TransformingStore
from controlplane.storage.etcd import EtcdConfig, EtcdStore
from controlplane.storage.sqlite import SQLiteStore
from kubeclient.config import load_kubeconfig
from kubeclient.exposition import CONTENT_TYPE
from kubeclient.hostaddr import default_route_ip
from kubeclient.tlsverify import go_compatible

log = logging.getLogger("controlplane.apiserver")

# Reachable without credentials, as upstream's system:public-info-viewer role allows.
INSECURE_USER = UserInfo("system:admin", groups=("system:masters", "system:authenticated"))
PUBLIC_PATHS = {"/healthz", "/livez", "/readyz", "/version"}
# TLS 1.2 suites: forward-secret AEAD only. Security level 0 lets a client that sends no
# signature_algorithms (busybox's wget, in many a pod) get the SHA-1 handshake signature TLS 1.2 then
# prescribes, as Go's TLS server (and so kube-apiserver 1.32) grants it; every other client negotiates
# SHA-256 or better, and TLS 1.3 is untouched.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:@SECLEVEL=0"
SCHEDULER_KUBECONFIG = "scheduler.conf"
CONTROLLER_MANAGER_KUBECONFIG = "controller-manager.conf"
GC_THRESHOLDS = (20_000, 2, 500)  # set after the startup freeze (see ApiServer.start)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _presents_token(request: web.Request) -> bool:
    return request.headers.get("Authorization", "")[:7].lower() == "bearer "


@dataclass
class ServerConfig:
    data_dir: Path
    port: int = 6443
    bind: str = "127.0.0.1"
    advertise: str = ""  # host written into admin.kubeconfig; defaults to bind (or 127.0.0.1)
    token_file: Path | None = None
    insecure_http: bool = False  # tests of the TLS-less path and benchmarks only
    watch_window: int = 10_000
    watch_windows: dict[str, int] = field(default_factory=dict)  # --watch-cache-sizes, by resource[.group]
    compact_interval: float = 300.0  # --etcd-compaction-interval
    event_ttl: float = 3600.0
    # --tls-cert-file / --tls-private-key-file: serve with these instead of DIR/pki/apiserver.crt;
    # --client-ca-file: client certificates it signed authenticate too; --tls-cipher-suites (OpenSSL's
    # string, "" for the default).
    tls_cert_file: Path | None = None
    tls_private_key_file: Path | None = None
    client_ca_file: Path | None = None
    tls_ciphers: str = ""
    # kubeadm's set: --kubelet-client-certificate/--kubelet-client-key, --kubelet-preferred-address-types,
    # --proxy-client-cert-file/--proxy-client-key-file (the aggregator's), --requestheader-client-ca-file
    # and --requestheader-allowed-names (published for extension servers, and front-proxy authentication
    # here: requestheader.py), --service-account-signing-key-file.
    kubelet_client_cert: tuple[Path, Path] | None = None
    kubelet_address_types: tuple[str, ...] = ("InternalIP", "Hostname", "ExternalIP")
    proxy_client_cert: tuple[Path, Path] | None = None
    requestheader_client_ca: Path | None = None
    requestheader_allowed_names: tuple[str, ...] = ()
    service_account_signing_key: Path | None = None
    # --service-account-key-file (repeatable): the keys that verify tokens and that the JWKS lists; none
    # given: the signing key's own. Rotation keeps a retired key here until its tokens have expired.
    service_account_key_files: tuple[Path, ...] = ()
    # --service-cluster-ip-range and --service-node-port-range.
    service_ranges: ServiceRanges = field(default_factory=ServiceRanges)
    extra_sans: list[str] = field(default_factory=list)
    # Service-account tokens (upstream's --service-account-issuer, --api-audiences (default: the issuers),
    # --service-account-max-token-expiration (0: none), --service-account-extend-token-expiration,
    # --service-account-jwks-uri); the signing key pair is DIR/pki/sa.key, made on first start.
    service_account_issuers: list[str] = field(default_factory=lambda: [DEFAULT_ISSUER])
    api_audiences: list[str] = field(default_factory=list)
    max_token_expiration: int = 0
    extend_token_expiration: bool = True
    jwks_uri: str = ""
    disable_admission_plugins: list[str] = field(default_factory=list)
    # --admission-control-config-file's PodSecurity configuration (defaults and exemptions).
    pod_security: PodSecurityConfig = field(default_factory=PodSecurityConfig)
    encryption: EncryptionConfig | None = None  # --encryption-provider-config
    authentication: AuthenticationConfig | None = None  # --authentication-config (JWT authenticators)
    authentication_file: Path | None = None  # the file, watched and reloaded when it changes
    # --authentication-token-webhook-config-file (a kubeconfig), its --...-cache-ttl and --...-version.
    token_webhook: Path | None = None
    token_webhook_cache_ttl: float = 120.0
    token_webhook_version: str = "v1"
    authorization_modes: tuple[str, ...] = DEFAULT_MODES  # --authorization-mode (authmodes.py)
    anonymous_auth: bool = True  # --anonymous-auth: a request without credentials is system:anonymous
    # --enable-bootstrap-token-auth: bootstrap-token Secrets authenticate (bootstraptoken.py), and the server
    # keeps kube-public/cluster-info and the RBAC kubeadm creates for joining (bootstraptoken_cluster.py).
    enable_bootstrap_token_auth: bool = False
    # --kubelet-certificate-authority: verify the kubelets' serving certificates with this CA (kubeletproxy.py).
    kubelet_certificate_authority: str = ""
    etcd: EtcdConfig | None = None  # --etcd-servers and its TLS files; None: SQLite in DIR/state.db
    # --endpoint-reconciler-type: "lease" (upstream's default: every live server in the `kubernetes`
    # Endpoints, on a store with expiring keys; on SQLite the one server writes itself at start) or "none".
    endpoint_reconciler: str = "lease"
    master_lease_ttl: int = DEFAULT_TTL
    endpoint_interval: float = DEFAULT_INTERVAL
    # API priority and fairness (flowcontrol/): the seats its levels share are upstream's
    # --max-requests-inflight + --max-mutating-requests-inflight; --enable-priority-and-fairness.
    max_requests_inflight: int = 400
    max_mutating_requests_inflight: int = 200
    enable_priority_and_fairness: bool = True
    audit: AuditOptions = field(default_factory=AuditOptions)  # --audit-policy-file, --audit-log-* (audit/)


class ApiServer:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.metrics = ApiServerMetrics(self._state_gauges)
        # The kinds this server serves (built-in ones, then custom resources as CRDs come).
        self.kinds = kindparts.builtin_table()
        backend = (
            EtcdStore(config.etcd, self.kinds.etcd_layout())
            if config.etcd
            else SQLiteStore(config.data_dir / "state.db")
        )
        self.backend = backend  # the store itself, below the metrics and encryption wrappers
        self.store = MeasuredStore(backend, self.metrics.registry)
        if config.encryption is not None:  # --encryption-provider-config: values encrypted at rest
            self.store = TransformingStore(self.store, config.encryption.transformer_for_key())
        self.cache = WatchCache(
            self.store, window=config.watch_window, viewer=slim_view, windows=config.watch_windows
        )
        self.registry = Registry(
            self.cache, self.kinds.admission_chain(config.disable_admission_plugins), self.kinds
        )
        self.registry.service_ranges = config.service_ranges
        self.registry.pod_security = config.pod_security
        # In-process loops the kinds need (the namespace finalizer, event expiry).
        self.controllers = self.kinds.controllers(self.registry, config)
        tokens = load_token_file(config.token_file) if config.token_file else {}
        self.api_audiences = tuple(config.api_audiences or config.service_account_issuers)
        self.authenticator = Authenticator(tokens, api_audiences=self.api_audiences)
        if config.enable_bootstrap_token_auth:
            self.authenticator.bootstrap_tokens = BootstrapTokenAuthenticator(self._secret)
        self.authorization = Authorization(config.authorization_modes)
        self.authorizer = self.authorization.chain
        self.registry.authorization = self.authorization
        self.rest = RestHandler(self.registry, self.authorizer)
        self.rest.authenticator = self.authenticator
        # The aggregation layer: group/versions another server serves (APIServices), proxied.
        self.aggregator = Aggregator(self.registry, self.authorizer, {g for g, _ in self.kinds.groups()})
        self.signing_key: SigningKey | None = None
        self.verification_keys: list[VerificationKey] = []
        self._marking: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._authn_watch: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.ready = False
        self.steps = health.Steps()
        self.health = health.HealthHandler(health.standard_checks(backend, self.steps))
        self.pki: Pki | None = None
        self._runner: web.AppRunner | None = None
        self._compactor: asyncio.Task[None] | None = None
        self._stall_watch = loopstall.from_environment()  # None unless PYKUBELET_LOOP_STALL_MS is set
        self.endpoints: LeaseEndpointReconciler | None = None
        self.port = config.port
        self.flowcontrol = Dispatcher(
            self.cache,
            config.max_requests_inflight + config.max_mutating_requests_inflight,
            self.metrics.registry,
            enabled=config.enable_priority_and_fairness,
        )
        self.audit = build_auditor(config.audit)
        self._openapi_v3 = openapi.v3_index(self.kinds)
        self._openapi_v2 = openapi.v2_document(self.kinds)
        self._openapi_at = self.kinds.generation()  # kinds come and go at runtime (custom resources)

    # --- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.store.start()
        if isinstance(self.backend, EtcdStore):
            await relayout_store(self.backend, self.kinds)  # an older pykubelet's layout, moved once
        await self.cache.start()
        self.steps.done.add(health.INFORMER_SYNC)
        self.authorization.start(self.cache)
        await self.registry.bootstrap()
        self.steps.done.add(health.BOOTSTRAP_ROLES)
        self.flowcontrol.start()
        for controller in self.controllers:
            controller.start()
        await self._start_service_account_tokens()
        if self.config.token_webhook is not None:
            self.authenticator.webhook = TokenWebhook(
                load_kubeconfig(self.config.token_webhook),
                self.config.token_webhook_cache_ttl,
                self.config.token_webhook_version,
            )
        if self.config.authentication is not None:
            self._apply_authentication(self.config.authentication)
        if self.config.authentication_file is not None:
            self._authn_watch = asyncio.create_task(
                authnreload.watch(self.config.authentication_file, self._apply_authentication),
                name="authentication-config-watch",
            )
        ssl_context = None
        if not self.config.insecure_http:
            sans = [*self.config.extra_sans, self.config.service_ranges.kubernetes_service_ip]
            if self.config.bind in ("0.0.0.0", "::") and not self.config.advertise and default_route_ip():
                sans.append(default_route_ip())  # the address the `kubernetes` Endpoints will name
            self.pki = ensure_pki(self.config.data_dir, sans)
            kubelet_cert, kubelet_key = self.config.kubelet_client_cert or (
                self.pki.kubelet_client_cert,
                self.pki.kubelet_client_key,
            )
            self.rest.kubelet = KubeletClient(
                kubelet_cert,
                kubelet_key,
                Path(self.config.kubelet_certificate_authority)
                if self.config.kubelet_certificate_authority
                else None,
                self.config.kubelet_address_types,
            )
            ssl_context = go_compatible(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH))
            if self.config.tls_cert_file is not None and self.config.tls_private_key_file is not None:
                ssl_context.load_cert_chain(self.config.tls_cert_file, self.config.tls_private_key_file)
            else:
                ssl_context.load_cert_chain(self.pki.serving_cert, self.pki.serving_key)
            ssl_context.load_verify_locations(self.pki.ca_cert)
            if self.config.client_ca_file is not None:
                ssl_context.load_verify_locations(self.config.client_ca_file)
            # Front proxies (an aggregator in front of this server) present certificates of this CA.
            front_proxy_ca = self.config.requestheader_client_ca or self.pki.front_proxy_ca_cert
            if front_proxy_ca is not None:
                ssl_context.load_verify_locations(front_proxy_ca)
                client_cas = (
                    self.pki.ca_cert,
                    *((self.config.client_ca_file,) if self.config.client_ca_file else ()),
                )
                self.authenticator.requestheader = RequestHeaderAuthenticator.from_files(
                    front_proxy_ca,
                    self.config.requestheader_allowed_names or (FRONT_PROXY_CLIENT,),
                    client_cas,
                )
            ssl_context.verify_mode = ssl.CERT_OPTIONAL
            ssl_context.options |= ssl.OP_NO_RENEGOTIATION
            ssl_context.set_ciphers(
                f"{self.config.tls_ciphers}:@SECLEVEL=0" if self.config.tls_ciphers else TLS12_CIPHERS
            )
            await authconfig.publish(
                self.registry,
                self.pki,
                self.config.client_ca_file,
                self.config.requestheader_client_ca,
                self.config.requestheader_allowed_names,
            )
        pki = self.pki
        proxy_cert, proxy_key = self.config.proxy_client_cert or (
            (pki.front_proxy_client_cert, pki.front_proxy_client_key) if pki else (None, None)
        )
        self.aggregator.start(proxy_cert, proxy_key)
        await self.audit.start()
        # Local APIServices for every built-in group/version (kube-aggregator's autoregister).
        await autoregister.sync(self.registry, [("", "v1"), *self.kinds.groups()])
        self.steps.done |= {health.AUTOREGISTRATION, health.AUTOREGISTER_COMPLETION}
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, self.config.bind, self.config.port, ssl_context=ssl_context, backlog=2048
        )
        await site.start()
        server = site._server
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        host = self.config.advertise or (
            "127.0.0.1" if self.config.bind in ("0.0.0.0", "::") else self.config.bind
        )
        # What in-cluster clients reach through the `kubernetes` Service: the advertised address, or
        # with the wildcard bind upstream's default (the default route's interface address), never
        # loopback, which a pod would take for its own.
        member = self.config.advertise or (
            (default_route_ip() or "127.0.0.1") if self.config.bind in ("0.0.0.0", "::") else self.config.bind
        )
        leases = self.config.endpoint_reconciler == "lease" and hasattr(self.store, "put_with_ttl")
        await ensure_kubernetes_service(
            self.registry,
            member,
            self.port,
            endpoints=self.config.endpoint_reconciler != "none" and not leases,
        )
        if leases and _is_ip(member):
            self.endpoints = LeaseEndpointReconciler(
                self.registry, member, self.port, self.config.master_lease_ttl, self.config.endpoint_interval
            )
            try:
                await self.endpoints.reconcile()  # listed before we answer /readyz
            except (StoreError, ApiError) as err:  # etcd electing a leader, say: the loop's next round
                log.warning("event=endpoint-reconcile-failed cause=%s", err)
            self.endpoints.start()
        if self.config.enable_bootstrap_token_auth:
            if self.pki is not None:
                await ensure_join_objects(
                    self.registry, f"https://{host}:{self.port}", self.pki.ca_cert.read_bytes()
                )
        if self.pki is not None:
            url, pki, data = f"https://{host}:{self.port}", self.pki, self.config.data_dir
            # --client-ca-file is trusted too: kubeadm's ca.crt signs the serving certificate it passes
            extra = self.config.client_ca_file.read_bytes() if self.config.client_ca_file else b""
            write_kubeconfig(
                data / "admin.kubeconfig", url, pki, pki.admin_cert, pki.admin_key, extra_ca=extra
            )
            # The supervised components' own identities, as kubeadm writes scheduler.conf and controller-manager.conf.
            write_kubeconfig(
                data / SCHEDULER_KUBECONFIG,
                url,
                pki,
                pki.scheduler_cert,
                pki.scheduler_key,
                SCHEDULER_USER,
                extra,
            )
            write_kubeconfig(
                data / CONTROLLER_MANAGER_KUBECONFIG,
                url,
                pki,
                pki.controller_manager_cert,
                pki.controller_manager_key,
                CONTROLLER_MANAGER_USER,
                extra,
            )
        self._compactor = asyncio.create_task(self._compact_loop(), name="compactor")
        # The cache holds every object as nested dicts, which the cyclic GC would keep traversing (tens of
        # ms with 10 000 pods) although they hold no cycles: move what exists now out of its sight. A pass
        # walks what survived since the last pass of its generation and holds the loop meanwhile: gen0 every
        # 20 000 net allocations (every 2 000 made 50 times the passes and 4 times the GC wall time in the
        # density bench: more requests' objects caught in flight), gen1 every 2 gen0 passes instead of 20
        # (density bench, 200 nodes, two runs side by side, the loop-stall watch: a gen1 pass held the loop
        # up to 166 ms of CPU, now up to 68 ms; GC 2.1 % and 2.2 % of the loop's CPU); a full pass after as
        # many allocations as before (20 000 x 2 x 500).
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        if self._stall_watch is not None:
            if hasattr(self.store, "current_revision"):
                self._stall_watch.probe = self._consistent_read_probe
            self._stall_watch.start()
        # The kubernetes Service, its endpoints and the kubeconfigs are all in place: ready.
        self.steps.done.add(health.BOOTSTRAP_CONTROLLER)
        self.ready = True
        log.info(
            "event=serving port=%d tls=%s data_dir=%s",
            self.port,
            ssl_context is not None,
            self.config.data_dir,
        )

    async def _consistent_read_probe(self) -> dict[str, float]:
        """What a consistent read (a GET without resourceVersion) waits for now besides the loop: etcd's
        current revision, then the watch cache reaching it (the loop-stall watch's probe)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        target = await self.store.current_revision()  # type: ignore[attr-defined]
        asked = loop.time()
        behind = max(0, target - self.cache.revision)
        with contextlib.suppress(TooLargeResourceVersionError):
            await self.cache.wait_for(target, patience=10.0)
        return {
            "revision_ms": round((asked - started) * 1000, 1),
            "catch_up_ms": round((loop.time() - asked) * 1000, 1),
            "behind": behind,
        }

    async def _start_service_account_tokens(self) -> None:
        config = self.config
        if config.service_account_signing_key is not None:
            self.signing_key = key = await asyncio.to_thread(
                load_signing_key, config.service_account_signing_key
            )
        else:
            self.signing_key = key = await asyncio.to_thread(ensure_signing_key, config.data_dir / "pki")
        self.rest.token_issuer = TokenIssuer(
            key,
            config.service_account_issuers[0],
            self.api_audiences,
            config.max_token_expiration,
            config.extend_token_expiration,
        )
        self.verification_keys = await asyncio.to_thread(self._verification_keys, key)
        self.authenticator.service_accounts = TokenValidator(
            self.verification_keys,
            config.service_account_issuers,
            self.api_audiences,
            self._bound_object,
            secrets=self._secret,  # legacy tokens (kubernetes.io/service-account-token Secrets)
            legacy_used=self._legacy_token_used,
        )

    def _verification_keys(self, signing: SigningKey) -> list[VerificationKey]:
        if not self.config.service_account_key_files:
            return [signing.verification()]
        keys: dict[str, VerificationKey] = {}
        for path in self.config.service_account_key_files:
            for found in load_verification_keys(path):
                keys.setdefault(found.kid, found)
        if signing.kid not in keys:
            log.warning(
                "event=signing_key_not_verified kid=%s reason=%r",
                signing.kid,
                "no --service-account-key-file holds the signing key's public half: new tokens will not verify",
            )
        return list(keys.values())

    def _apply_authentication(self, config: AuthenticationConfig) -> None:
        """The JWT authenticators of `config` in place of the current ones (whose key tasks stop)."""
        old = self.authenticator.jwt
        fresh = []
        for jwt_config in config.jwt:
            external = JwtAuthenticator(jwt_config)  # keys fetched in the background
            external.start()
            fresh.append(external)
        self.authenticator.replace_jwt(fresh)
        for external in old:
            self._background.add(task := asyncio.create_task(external.stop()))
            task.add_done_callback(self._background.discard)

    def _legacy_token_used(self, namespace: str, name: str) -> None:
        """Upstream's legacy-token tracking: the Secret gets today's kubernetes.io/legacy-token-last-used
        label, written off the request path (once per Secret at a time)."""
        if (namespace, name) in self._marking:
            return
        task = asyncio.get_running_loop().create_task(self._mark_legacy_used(namespace, name))
        self._marking[(namespace, name)] = task
        task.add_done_callback(lambda _: self._marking.pop((namespace, name), None))

    async def _mark_legacy_used(self, namespace: str, name: str) -> None:
        day = today(time.time())
        kind = self.kinds.by_path("", "v1", "secrets")

        def label(obj: Obj) -> Obj:
            obj["metadata"].setdefault("labels", {})[legacytoken.LAST_USED_LABEL] = day
            return obj

        try:
            assert kind is not None
            await self.registry.guaranteed_update(kind, namespace, name, label, validate=False)
        except ApiError as err:  # gone meanwhile: nothing to mark
            log.info(
                "event=legacy_token_label_failed namespace=%s name=%s code=%d", namespace, name, err.code
            )

    def _cached(self, resource: str, namespace: str, name: str) -> CachedObject | None:
        kind = self.kinds.by_path("", "v1", resource)
        return self.cache.get(kind.key(namespace, name)) if kind is not None else None

    def _bound_object(self, resource: str, namespace: str, name: str) -> Obj | None:
        """A core object's cached view (its metadata: name, uid, deletionTimestamp), for the checks of
        bound tokens, made on every request: nothing is decoded."""
        cached = self._cached(resource, namespace, name)
        return cached.view if cached is not None else None

    def _secret(self, namespace: str, name: str) -> Obj | None:
        cached = self._cached("secrets", namespace, name)
        return cached.obj if cached is not None else None

    async def stop(self) -> None:
        self.ready = False
        if self._stall_watch is not None:
            self._stall_watch.stop()
        self.steps.shutting_down = True
        if self.endpoints is not None:
            await self.endpoints.stop()
        if self._authn_watch is not None:
            self._authn_watch.cancel()
            await asyncio.gather(self._authn_watch, return_exceptions=True)
        for external in self.authenticator.jwt:
            await external.stop()
        if self.authenticator.webhook is not None:
            await self.authenticator.webhook.close()
        if self._compactor:
            self._compactor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._compactor
        for controller in self.controllers:
            await controller.stop()
        await self.aggregator.stop()
        if self.rest.kubelet is not None:
            await self.rest.kubelet.close()
        await self.cache.stop()
        if self._runner:
            await self._runner.cleanup()
        await self.audit.stop()  # every buffered event written
        await self.store.close()

    async def _compact_loop(self) -> None:
        """Keep history bounded like etcd's periodic compaction, leaving a window for watchers and
        paginated lists to catch up."""
        last = self.store.revision
        while True:
            await asyncio.sleep(self.config.compact_interval)
            target = last
            last = self.store.revision
            if target > self.store.compacted_revision:
                try:
                    await self.store.compact(target)
                except StoreError as err:  # etcd away: the next round compacts further
                    log.warning("event=compaction-failed revision=%d cause=%s", target, err)

    # --- HTTP ----------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(
            middlewares=[
                admission_context.middleware,
                self.metrics.middleware,
                self.audit.middleware,
                protobufhttp.middleware,
                self._middleware,
                self.flowcontrol.middleware,
            ],
            client_max_size=MAX_BODY,
        )
        app.on_response_prepare.append(self.audit.on_prepare)
        app.on_response_prepare.append(self.flowcontrol.on_prepare)
        r = app.router
        r.add_get(DUMP_PATH, self.flowcontrol.dump)
        for endpoint in health.ENDPOINTS:
            r.add_get(f"/{endpoint}", self.health.root)
            r.add_get(f"/{endpoint}/{{check:.*}}", self.health.single)
        r.add_get("/metrics", self._metrics)
        # Discovery answers with and without a trailing slash, as upstream's go-restful routes (which trim
        # it) and its /apis mux entries do: kr8s asks for /version/, the Python client's ApisApi for /apis/.
        for path, handler in (
            ("/version", self._version),
            ("/api", self._api),
            ("/apis", self._apis),
            ("/api/v1", self._core_resources),
            ("/apis/{group}", self._group),
        ):
            r.add_get(path, handler)
            r.add_get(path + "/", handler)
        r.add_route("*", "/apis/{group}/{version}", self._group_resources)
        r.add_route("*", "/apis/{group}/{version}/", self._group_resources)
        r.add_get("/openapi/v2", self._openapi_v2_handler)
        r.add_get("/openapi/v3", self._openapi_v3_root)
        r.add_get("/openapi/v3/{path:.+}", self._openapi_v3_doc)
        r.add_get(oidc.CONFIG_PATH, self._openid_configuration)
        r.add_get(oidc.JWKS_PATH, self._jwks)
        r.add_route("*", "/api/v1/{tail:.+}", self.rest.core)
        r.add_route("*", "/apis/{group}/{version}/{tail:.+}", self._grouped)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler):  # type: ignore[no-untyped-def]
        try:
            user = await self.authenticator.authenticate_request(request)
            if user is None and self.config.insecure_http:
                # Like upstream's old insecure port: no TLS means no identity; everyone is admin.
                user = INSECURE_USER
            if user is None:
                if _presents_token(request):
                    # A credential that failed is a 401 whatever the path, as upstream's fail-on-error
                    # union of authenticators answers it.
                    raise ApiError(401, "Unauthorized", "Unauthorized")
                if self.config.anonymous_auth:
                    # No credentials at all: upstream's anonymous user, whom authorization then judges
                    # (RBAC's system:public-info-viewer lets it read health and version, nothing else).
                    user = ANONYMOUS
                elif request.path in PUBLIC_PATHS or request.path.startswith(
                    ("/healthz/", "/livez/", "/readyz/")
                ):
                    return await handler(request)
                else:
                    raise ApiError(401, "Unauthorized", "Unauthorized")
            audit.authenticated(request, user)
            user = impersonate(request.headers, user, self.authorizer)
            audit.impersonated(request, user)
            request[USER_KEY] = user
            path = request.path.rstrip("/")  # /apis/apps/v1/ is discovery, as /apis/apps/v1
            if not (path.startswith("/api/v1/") or (path.startswith("/apis/") and path.count("/") >= 4)):
                # Non-resource paths (discovery, OpenAPI, health) are authorized by path, as upstream;
                # resource requests are authorized in the REST handler once the path is parsed.
                verb = {
                    "GET": "get",
                    "HEAD": "get",
                    "POST": "post",
                    "PUT": "put",
                    "PATCH": "patch",
                    "DELETE": "delete",
                }.get(request.method, request.method.lower())
                attrs = Attributes(user, verb, path=request.path, resource_request=False)
                decision = self.authorizer.authorize(attrs)
                audit.authorized(request, decision)
                if not decision.allowed:
                    raise forbidden(attrs, decision.reason)
            return await handler(request)
        except ApiError as err:
            response = json_response(err.status(), err.code)
            retry_after = (err.details or {}).get("retryAfterSeconds")
            if retry_after:  # upstream's ErrorNegotiated: a Status asking for a retry says when
                response.headers["Retry-After"] = str(retry_after)
            return response
        except web.HTTPException as exc:
            if exc.status == 404:
                return json_response(
                    ApiError(
                        404, "NotFound", "the server could not find the requested resource", {}
                    ).status(),
                    404,
                )
            if exc.status == 405:
                return json_response(
                    ApiError(
                        405,
                        "MethodNotAllowed",
                        "the server does not allow this method on the requested resource",
                    ).status(),
                    405,
                )
            if exc.status == 413:
                return json_response(
                    ApiError(
                        413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY}"
                    ).status(),
                    413,
                )
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except StoreUnavailableError as exc:
            # Upstream's answer to an unreachable or timing-out etcd (storage.IsUnreachable): a retryable
            # ServerTimeout. Writes are single transactions, so nothing was half applied.
            log.warning("path=%s method=%s store=unavailable cause=%s", request.path, request.method, exc)
            if exc.backend_message:
                # etcd answered with an error of its own (no quorum: `etcdserver: request timed out`):
                # upstream's ErrorToAPIStatus passes it through, a 500 with no reason (kubectl prints
                # `Error from server: etcdserver: request timed out`).
                # StatusReasonUnknown is "", left out of upstream's JSON.
                return json_response(ApiError(500, "", exc.backend_message).status(), 500)
            message = "The operation could not be completed at this time, please try again."
            return json_response(
                ApiError(500, "ServerTimeout", message, {"retryAfterSeconds": 2}).status(), 500
            )
        except StoreRefusedError as exc:
            # etcd refused the write (over --max-request-bytes, or --quota-backend-bytes reached); the SQLite
            # store holds the first limit too. Upstream translates neither: its ErrorToAPIStatus answers
            # 500 with no reason and etcd's words (kubectl: `Error from server: etcdserver: request is too
            # large`). Nothing was written.
            log.warning("path=%s method=%s store=refused cause=%s", request.path, request.method, exc)
            return json_response(ApiError(500, "", exc.backend_message).status(), 500)
        except Exception as exc:
            log.exception("path=%s method=%s", request.path, request.method)
            audit.panicked(request, exc)
            return json_response(
                ApiError(
                    500, "InternalError", f"Internal error occurred: {type(exc).__name__}: {exc}"
                ).status(),
                500,
            )

    async def _metrics(self, request: web.Request) -> web.Response:
        """Prometheus text with upstream's names (controlplane/apiserver/metrics.py), built in slices of
        the loop (metricsbody.py): at once it held the loop for 150-180 ms per scrape under load."""
        body = await metricsbody.body([self.metrics.registry, admissionmetrics.REGISTRY])
        response = web.Response(body=body)
        response.headers["Content-Type"] = CONTENT_TYPE
        return response

    def _state_gauges(self) -> list[Metric]:
        revision = GaugeMetricFamily(
            "pykube_storage_revision", "Newest committed store revision.", value=self.store.revision
        )
        return [
            *storage_gauges(self.cache.object_counts(), self.cache.watcher_count()),
            revision,
            *self.audit.metrics(),
        ]

    async def _version(self, request: web.Request) -> web.Response:
        # Upstream writes version.Info with WriteRawJSON: indented two spaces, no closing newline.
        body = json.dumps(discovery.version_info(), indent=2).encode()
        return web.Response(body=body, content_type="application/json")

    def _address(self, request: web.Request) -> str:
        return request.host or f"127.0.0.1:{self.port}"

    async def _api(self, request: web.Request) -> web.Response:
        if discovery.wants_aggregated(request.headers.get("Accept", "")):
            return self._aggregated(True)
        return json_response(discovery.api_versions(self._address(request)))

    async def _apis(self, request: web.Request) -> web.Response:
        if discovery.wants_aggregated(request.headers.get("Accept", "")):
            return self._aggregated(False)
        doc = discovery.api_group_list(self.kinds)
        doc["groups"] += self.aggregator.group_list_additions()
        return json_response(doc)

    def _aggregated(self, core: bool) -> web.Response:
        doc = discovery.aggregated(self.kinds, core)
        if not core:
            doc["items"] += self.aggregator.aggregated_additions()
        response = web.Response(body=encode(doc) + b"\n")  # through the serializer, as the rest of discovery
        response.headers["Content-Type"] = discovery.AGGREGATED_CONTENT_TYPE
        return response

    async def _core_resources(self, request: web.Request) -> web.Response:
        doc = discovery.resource_list(self.kinds, "", "v1")
        assert doc is not None
        return json_response(doc)

    async def _group(self, request: web.Request) -> web.Response:
        doc = discovery.api_group(self.kinds, request.match_info["group"]) or self.aggregator.group(
            request.match_info["group"]
        )
        if doc is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        return json_response(doc)

    async def _grouped(self, request: web.Request) -> web.StreamResponse:
        m = request.match_info
        remote = self.aggregator.remote(m["group"], m["version"])
        if remote is not None:
            return await self.aggregator.serve(request, remote, m["tail"])
        return await self.rest.grouped(request)

    async def _group_resources(self, request: web.Request) -> web.StreamResponse:
        remote = self.aggregator.remote(request.match_info["group"], request.match_info["version"])
        if remote is not None:
            return await self.aggregator.serve(request, remote, "")
        if request.method not in ("GET", "HEAD"):
            raise web.HTTPMethodNotAllowed(request.method, ["GET"])
        doc = discovery.resource_list(self.kinds, request.match_info["group"], request.match_info["version"])
        if doc is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        return json_response(doc)

    def _refresh_openapi(self) -> None:
        if self._openapi_at != self.kinds.generation():
            self._openapi_at = self.kinds.generation()
            self._openapi_v3 = openapi.v3_index(self.kinds)
            self._openapi_v2 = openapi.v2_document(self.kinds)

    async def _openapi_v2_handler(self, request: web.Request) -> web.Response:
        self._refresh_openapi()
        doc = self.aggregator.openapi_v2(self._openapi_v2)
        accept = request.headers.get("Accept", "")
        if any(wanted in accept for wanted in openapiproto.ACCEPTED):
            # kubectl's first choice, as upstream serves it (kube-openapi's handler).
            body = await asyncio.to_thread(openapiproto.document, doc)
            return web.Response(body=body, content_type=openapiproto.CONTENT_TYPE)
        return web.Response(body=encode(doc), content_type="application/json")

    async def _openid_configuration(self, request: web.Request) -> web.Response:
        return oidc.configuration_response(self.config.service_account_issuers[0], self.config.jwks_uri)

    async def _jwks(self, request: web.Request) -> web.Response:
        return oidc.jwks_response(self.verification_keys)

    async def _openapi_v3_root(self, request: web.Request) -> web.Response:
        self._refresh_openapi()
        # kube-openapi writes its documents as marshalled, without the serializer's newline.
        return web.Response(
            body=encode(self.aggregator.openapi_v3_root(self._openapi_v3[0])), content_type="application/json"
        )

    async def _openapi_v3_doc(self, request: web.Request) -> web.Response:
        self._refresh_openapi()
        entry = self._openapi_v3[1].get(request.match_info["path"])
        if entry is None:
            aggregated = await self.aggregator.openapi_v3_document(request.match_info["path"])
            if aggregated is not None:
                return web.Response(body=aggregated, content_type="application/json")
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        return web.Response(body=encode(entry[0]), content_type="application/json")
