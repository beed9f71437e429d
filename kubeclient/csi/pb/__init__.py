"""Generated from protos/csi/v1/csi.proto (csi_pb2) and protos/pluginregistration/v1/registration.proto (registration_pb2)
by `python -m agent.cri.regen`."""
