"""A host-path CSI driver for tests and for the rig: `python -m pykubelet.csidriver`.

It serves the CSI v1 Identity, Controller and Node services on a unix socket and, as upstream's
node-driver-registrar does beside a driver, the kubelet's plugin registration service on a socket in
the kubelet's plugins_registry folder. Its volumes are folders under its state folder, staged and
published by bind mounts; attach (ControllerPublish), topology, the node's volume limit and simulated
storage pools (GetCapacity, `--capacity`) are switched by flags, so each of the kubelet's and the
sidecars' paths can be driven. It lives in pykubelet (the rig) because the rig starts it as a node
would run a driver; tests start it the same way.
"""
