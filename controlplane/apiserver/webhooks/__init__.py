"""Admission webhooks (upstream's k8s.io/apiserver/pkg/admission/plugin/webhook): the
MutatingWebhookConfiguration and ValidatingWebhookConfiguration kinds (kinds/webhookconfiguration.py, as every kind; their validation in
validation.py), which requests a webhook sees (rules.py), the configurations kept in memory from the
watch cache (source.py), the AdmissionReview exchange over HTTPS (review.py, client.py) and the two
admission plugins that drive them (plugins.py). The request's dry-run flag and the warnings webhooks
return travel in a per-request context (context.py), because the admission chain sees no HTTP request.
"""
