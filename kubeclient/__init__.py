"""kubeclient: the one Kubernetes client library every pykubelet component stands on.

The agent, the API server, the scheduler and the controllers to come import it; it imports none of
them (an import-linter contract says so). It holds what client-go holds for Go components: the async
REST client and kubeconfig loading, informers with indexers, the work queue, the event recorder, leader
election, label and field selectors, quantities, upstream's name rules and the Kubernetes version.
"""
