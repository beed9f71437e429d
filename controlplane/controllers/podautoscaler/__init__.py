"""The horizontal pod autoscaler (upstream's pkg/controller/podautoscaler).

| module | what |
| --- | --- |
| `replicas.py` | the replica calculation from pod metrics and requests (replica_calculator.go): tolerance, missing metrics, unready pods; the usage-ratio and per-pod counts of Object and External metrics |
| `behavior.py` | stabilization windows and scaling policies (horizontal.go's normalizeDesiredReplicas*) |
| `metrics.py` | the pod metrics from metrics.k8s.io (the resource metrics client) |
| `custommetrics.py` | Pods and Object metrics from custom.metrics.k8s.io, External from external.metrics.k8s.io (the REST metrics clients) |
| `status.py` | conditions and metric statuses as upstream writes them |
| `controller.py` | the loop: read the target's scale, compute, write /scale, status and events |
"""

from controlplane.controllers.podautoscaler.controller import HorizontalPodAutoscalerController

__all__ = ["HorizontalPodAutoscalerController"]
