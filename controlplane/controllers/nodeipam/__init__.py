"""Node IPAM: upstream's nodeipam controller with the range allocator (`--allocate-node-cidrs`)."""

from controlplane.controllers.nodeipam.controller import NodeIpamController

__all__ = ["NodeIpamController"]
