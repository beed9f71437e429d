"""The disruption controller: `controller.py` (informers, the controllers' scale, the status write) and
`logic.py` (expected and healthy pods, disruptions allowed, the disrupted-pods map, conditions: pure)."""

from controlplane.controllers.disruption.controller import DisruptionController

__all__ = ["DisruptionController"]
