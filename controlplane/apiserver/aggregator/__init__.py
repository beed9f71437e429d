"""The aggregation layer (upstream's kube-aggregator, in front of the API server): APIService objects
name group/versions that another server serves; requests for them are authenticated and authorized
here, then proxied to the APIService's Service with the user in requestheader headers and the
front-proxy client certificate. Generic: it names no aggregated API.

| module | what |
| --- | --- |
| `apis.py` | the APIServices the watch cache holds, by group/version; what discovery adds for them |
| `resolve.py` | Service + Endpoints -> an address to dial (upstream's ResolveEndpoint) |
| `requestinfo.py` | a path under an aggregated group/version -> authorization attributes (RequestInfoFactory) |
| `proxy.py` | the proxying itself: TLS to the backend (caBundle or insecureSkipTLSVerify), X-Remote-* |
| `availability.py` | the Available condition (upstream's AvailableConditionController) |
| `openapimerge.py` | the aggregated servers' OpenAPI: v2 merged into ours, v3 listed and proxied (upstream's openapi controllers) |
| `autoregister.py` | Local APIServices for the built-in group/versions and the CRDs' (upstream's autoregister and crdregistration controllers) |
"""
