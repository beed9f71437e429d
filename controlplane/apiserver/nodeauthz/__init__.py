"""Node authorization: the Node authorizer (a node reads only what its pods use) and the NodeRestriction
admission plugin (a node writes only its own Node, Lease and pods)."""
