"""CRI configs for test pods made directly through CRI (no agent): labelled as the kubelet labels its
sandboxes, so the agent's adoption and clean-up logic treats them as it would real pods."""

from __future__ import annotations

import uuid
from pathlib import Path

from agent.cri import pb


def pod_sandbox_config(
    name: str, namespace: str, log_dir: Path, ports: list[pb.PortMapping] | None = None
) -> pb.PodSandboxConfig:
    uid = str(uuid.uuid4())
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
        hostname=name,
        log_directory=str(log_dir),
        labels={
            "io.kubernetes.pod.name": name,
            "io.kubernetes.pod.namespace": namespace,
            "io.kubernetes.pod.uid": uid,
        },
        port_mappings=ports or [],
    )
