"""pykubelet's own CNI plugin (bridge + host-local IPAM + portmap + loopback in one), on pyroute2.

How the pieces fit (see README.md beside this file):
  containerd --exec--> pykubelet-cni (C shim, or Python forwarder) --unix socket--> NetworkService
  (hosted by the agent, or `pykubelet-cni serve`) --> plugin.handle() --> datapath/ipam/nat.
  With no service listening, the shim runs `python -m agent.cni.standalone` instead.

Entry points for other packages: `install.install_plugins`, `conflist.write_conflist`,
`service.NetworkService` (and `service.BackgroundService` for callers without an event loop).
This package must not import agent.pods or controlplane.
"""
