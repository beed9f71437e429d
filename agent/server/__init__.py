"""The kubelet's HTTPS API on this node: /healthz, /pods and /containerLogs (what `kubectl logs` reaches
through the API server), with client-certificate authentication as upstream configures it."""

from agent.server.http import KubeletServer

__all__ = ["KubeletServer"]
