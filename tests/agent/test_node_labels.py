"""`--node-labels` read and checked as upstream's kubelet does (cmd/kubelet's ValidateKubeletFlags and
component-base's MapStringString): the reserved kubernetes.io / k8s.io keys only from the kubelet's set,
keys and values in label syntax, pairs with '='; the agent refuses to start otherwise. The texts are
upstream's (TestValidateKubeletFlags' for the reserved-label case)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.nodelabels import NodeLabelError, parse_node_labels, validate_node_labels
from kubeclient.kubeletlabels import is_kubelet_label

ALLOWED = (
    "(kubelet.kubernetes.io, node.kubernetes.io) or be in the specifically allowed set (beta.kubernetes.io/arch, "
    "beta.kubernetes.io/instance-type, beta.kubernetes.io/os, failure-domain.beta.kubernetes.io/region, "
    "failure-domain.beta.kubernetes.io/zone, kubernetes.io/arch, kubernetes.io/hostname, kubernetes.io/os, "
    "node.kubernetes.io/instance-type, topology.kubernetes.io/region, topology.kubernetes.io/zone)"
)


def refusal(labels: dict[str, str]) -> str:
    with pytest.raises(NodeLabelError) as err:
        validate_node_labels(labels)
    return str(err.value)


def test_a_reserved_label_outside_the_kubelets_set_is_refused_with_upstreams_text() -> None:
    assert refusal({"beta.kubernetes.io/metadata-proxy-ready": "true"}) == (
        "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: "
        "[beta.kubernetes.io/metadata-proxy-ready]\n"
        f"--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix {ALLOWED}"
    )
    # every one named, sorted; a role is the administrator's to give, never the node's own
    assert refusal({"node-role.kubernetes.io/worker": "", "example.k8s.io/x": "1", "team": "a"}).startswith(
        "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: "
        "[example.k8s.io/x node-role.kubernetes.io/worker]\n"
    )


def test_the_kubelets_own_labels_and_namespaces_and_any_other_domain_pass() -> None:
    validate_node_labels(
        {
            "topology.kubernetes.io/zone": "zone-a",
            "topology.kubernetes.io/region": "r1",
            "node.kubernetes.io/instance-type": "m5",
            "pool.node.kubernetes.io/tier": "gold",  # a subdomain of an allowed namespace
            "kubelet.kubernetes.io/x": "y",
            "cloud.google.com/metadata-proxy-ready": "true",
            "team": "",
        }
    )
    assert is_kubelet_label("topology.kubernetes.io/zone")
    assert not is_kubelet_label("node-role.kubernetes.io/control-plane")
    assert not is_kubelet_label("kubernetes.io/role")


def test_keys_and_values_must_be_label_syntax() -> None:
    assert refusal({"bad key": "v"}) == (
        "invalid node labels: 'bad key' - name part must consist of alphanumeric characters, '-', '_' or '.', "
        "and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', "
        "regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    )
    assert refusal({"pool": "-blue"}) == (
        "invalid node labels: '-blue' - a valid label must be an empty string or consist of alphanumeric "
        "characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  "
        "or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
    )


def test_the_flag_is_key_value_pairs() -> None:
    assert parse_node_labels(" a = b ,, node-role.kubernetes.io/worker=,c=d=e") == {
        "a": "b",
        "node-role.kubernetes.io/worker": "",
        "c": "d=e",
    }
    with pytest.raises(NodeLabelError) as err:
        parse_node_labels("a=b,lonely")
    assert str(err.value) == (
        'invalid argument "a=b,lonely" for "--node-labels" flag: malformed pair, expect string=string'
    )


def test_the_agent_refuses_to_start_with_a_label_it_may_not_set(tmp_path: Path) -> None:
    root = tmp_path / "root"
    done = subprocess.run(
        [sys.executable, "-m", "pykubelet", "agent", "--root-dir", str(root),
         "--node-labels", "topology.kubernetes.io/zone=zone-a,node-role.kubernetes.io/worker="],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(
        "pykubelet agent: failed to validate kubelet flags: unknown 'kubernetes.io' or 'k8s.io' labels "
        "specified with --node-labels: [node-role.kubernetes.io/worker]\n"
    ), done.stderr
    assert not root.exists()  # nothing started, nothing written
    malformed = subprocess.run(
        [sys.executable, "-m", "pykubelet", "agent", "--root-dir", str(root), "--node-labels", "zone"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert malformed.returncode == 2 and "malformed pair, expect string=string" in malformed.stderr
