"""The agent's own API glue, on the shared client library (`kubeclient`): the informer of the pods
bound to this node, and reads of the ConfigMaps and Secrets its pods name (each watched on its own,
`objectwatch.py`).

Everything generic (the REST client, kubeconfig, informers, backoff, events) lives in `kubeclient`; what
is here is what only a node does, scoped as the Node authorizer scopes a kubelet.
"""
