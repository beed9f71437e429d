"""The API server's quota and limit-range admission (upstream's plugin/pkg/admission/resourcequota and
plugin/pkg/admission/limitranger): `check.py` decides what a write costs against the namespace's
quotas (pure), `admission.py` charges it by writing the quotas' status with optimistic concurrency,
`limitranger.py` defaults and bounds containers, pods and claims from the LimitRanges. The usage rules
themselves are `controlplane/quota/`, shared with the resource-quota controller."""
