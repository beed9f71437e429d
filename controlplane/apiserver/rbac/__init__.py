"""RBAC (rbac.authorization.k8s.io/v1): rule matching and coverage, the resolver and authorizer over the
stored roles and bindings, escalation prevention, validation, and the bootstrap policy the server
creates and reconciles at every start."""
