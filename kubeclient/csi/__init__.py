"""CSI v1 and the kubelet's plugin registration API on the wire: the generated modules (`pb/`, from
protos/csi/v1/csi.proto and protos/pluginregistration/v1/registration.proto by `python -m agent.cri.regen`) and an
asyncio client (client.py). The node agent and the control plane's CSI sidecars both speak to drivers,
so it lives in the client library they share."""
