"""Kubernetes API access for the agent: kubeconfig and in-cluster config, an asyncio REST client with a
client-side rate limit and retries, and an informer (list + watch) that keeps a local cache.

Everything here is non-blocking: the agent's one event loop also drives CRI, so an HTTP call must never
hold it up. Objects are plain JSON dicts, as the API serves them.
"""

from agent.kube.client import ApiError, KubeClient
from agent.kube.config import ClusterConfig, load_config

__all__ = ["ApiError", "ClusterConfig", "KubeClient", "load_config"]
