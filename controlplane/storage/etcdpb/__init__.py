"""Generated from protos/etcd/etcdserverpb/rpc.proto by `python -m controlplane.storage.etcdregen`."""
