"""Generated from protos/runtime/v1/api.proto by `python -m agent.cri.regen`."""
