"""The project's Kubernetes API server: HTTP(S) front end, request chain and REST semantics.

Request path (one direction): authentication (authn.py) -> authorization hook (authz.py) -> REST
handler (handlers.py) -> body decoding (decoding.py: formats; typed.py: types) -> registry (registry.py,
the generic store) running the kind's strategy (kinds/<kind>.py) and admission (admission.py) -> watch
cache and store (controlplane.storage). Everything kind-specific lives in kinds/, one module per kind.
"""
