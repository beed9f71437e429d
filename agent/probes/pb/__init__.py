"""Generated from protos/grpc/health/v1/health.proto by `python -m agent.cri.regen`."""
