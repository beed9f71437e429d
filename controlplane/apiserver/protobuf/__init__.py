"""Kubernetes' protobuf encoding of built-in kinds: the wire format (`wire`), the message table derived
from upstream's fixtures (`tables`, made by `derive`; `extensiontables` for the CRD and APIService
kinds the fixtures lack) and the codec between JSON objects and messages
with the `k8s\\0` envelope (`codec`). It knows no HTTP handler, registry or server: the API server's
content negotiation (`controlplane.apiserver.protobufhttp`) uses it, and clients may later.
"""
