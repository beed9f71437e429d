"""The scheduler: puts pods without spec.nodeName onto nodes.

It is a plain API client (watch pods and nodes, POST pods/binding), so it runs against any API server.
The pipeline mirrors upstream kube-scheduler's framework in miniature: a queue of pending pods, a cache
of what each node has committed, filter plugins that say *why* a node cannot take a pod, score plugins
that rank the rest, and an asynchronous bind with the pod assumed in the cache until the watch confirms.

Entry points: `controlplane.scheduler.runner.run_scheduler(kubeconfig, config, stop)` for embedding and
`pykubelet scheduler` (controlplane.scheduler.cli). Nothing is imported here, so the pure parts (filters,
scores) load without aiohttp.
"""
