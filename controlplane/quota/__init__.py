"""Quota arithmetic and usage evaluators shared by the API server's ResourceQuota admission and the
controller manager's resource-quota controller (upstream's k8s.io/apiserver/pkg/quota/v1 and
pkg/quota/v1/evaluator/core, which both kube-apiserver and kube-controller-manager import).

It sits beside storage: pure functions over JSON objects, no I/O, importing no component, so the two
processes count usage with one rule and the admission charge and the controller's recount agree.
"""
