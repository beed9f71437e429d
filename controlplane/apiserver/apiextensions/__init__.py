"""CustomResourceDefinitions (apiextensions.k8s.io/v1), as upstream's apiextensions-apiserver serves them.

- `crd.py`: the CustomResourceDefinition kind (its validation, the cleanup finalizer, its status);
- `structural.py`: upstream's structural-schema check of a CRD's openAPIV3Schema;
- `schema.py`: what a structural schema does to a custom object (defaulting, pruning, validation);
- `rules.py`: `x-kubernetes-validations` CEL rules (through controlplane/apiserver/cel.py);
- `resource.py`: the Kind a served CRD version becomes (status and scale subresources, printer columns,
  None conversion between versions), added to and removed from the kinds list at runtime;
- `conversion.py`: conversion webhooks (strategy Webhook), through the admission webhooks' HTTPS client;
- `controller.py`: each API server's watcher of the CRD resource: names acceptance, Established,
  serving what is established, and deleting a CRD's objects before the CRD goes.
"""
