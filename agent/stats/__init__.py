"""Resource usage of the node, its pods and containers, as upstream's kubelet reports it: the Summary
API (/stats/summary), the resource metrics metrics-server scrapes (/metrics/resource) and cadvisor's core
series (/metrics/cadvisor). The figures come from CRI (ListContainerStats, ListPodSandbox,
ListContainers) and from the cgroups and network namespaces the runtime made, read as cadvisor reads them.
"""
