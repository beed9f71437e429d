"""pykubelet: the stack that ties the node agent and the control plane together.

The `agent` and `controlplane` packages must not import each other (they talk only through the
Kubernetes API); this package is the one place allowed to know both, so it holds the command line
dispatcher and the rig that installs and starts the real parts (containerd, registry, servers).
"""

from kubeclient.version import KUBERNETES_VERSION

__version__ = "0.1.0"
__all__ = ["KUBERNETES_VERSION", "__version__"]
