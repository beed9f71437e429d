"""The project's Kubernetes API server: HTTP(S) front end, request chain and REST semantics.

Request path (one direction): authentication (authn.py) -> authorization hook (authz.py) ->
REST handler (handlers.py) -> admission (defaulting, validation; admission.py) -> registry
(registry.py: object lifecycle rules) -> watch cache and store (controlplane.storage).
"""
