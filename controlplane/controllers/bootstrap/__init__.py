"""The bootstrap-token loops kubeadm turns on (upstream's pkg/controller/bootstrap): `tokencleaner`
deletes expired token Secrets, `bootstrapsigner` signs kube-public/cluster-info with each signing token."""
