"""The CSR loops (upstream's pkg/controller/certificates): `csrapproving` approves kubelets' client
CSRs after a SubjectAccessReview, `csrsigning` signs approved CSRs of the kubernetes.io signers with the
cluster CA, `csrcleaner` deletes CSRs past upstream's deadlines. All three act as
kube-system/certificate-controller, as upstream's do."""
