"""The Deployment controller, one module per concern as upstream's pkg/controller/deployment splits it:
`controller` (informers, who to wake, the sync's dispatch), `sync` (new ReplicaSet and revisions,
scaling, proportional scaling, history, status), `rolling`, `recreate`, `progress` (status during a
rollout, the progress deadline), `rollback`, `util` (the pure rollout arithmetic), `conditions`,
`hashing` (pod-template-hash), `context` (one sync's working copy and its writes).
"""

from controlplane.controllers.deployment.controller import DeploymentController

__all__ = ["DeploymentController"]
