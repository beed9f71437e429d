"""Pure translations from pod specs to CRI configs: DNS, env, QoS/cgroups, resources, images, backoff."""

from __future__ import annotations

import base64
import json

import pytest

from agent.config import AgentConfig
from agent.cri import pb
from agent.pods import labels as L
from agent.pods.backoff import BackoffTable, format_go_duration
from agent.pods.container import container_config, linux_resources
from agent.pods.dns import DNS, parse_resolv_conf, pod_dns
from agent.pods.env import ConfigError, expand, resolve_env
from agent.pods.images import auth_from_secrets, default_pull_policy, registry_host, valid_reference
from agent.pods.qos import cgroup_parent, qos_class
from agent.pods.sandbox import sandbox_config


def make_pod(**spec):
    return {
        "metadata": {
            "name": "web",
            "namespace": "prod",
            "uid": "1234-5678",
            "labels": {"app": "web"},
            "annotations": {"a": "b"},
        },
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


HOST = DNS(["192.0.2.53"], ["corp.example"], ["edns0"])


def test_dns_cluster_first():
    dns = pod_dns(make_pod(), HOST, ["10.96.0.10"], "cluster.local")
    assert dns.servers == ["10.96.0.10"]
    assert dns.searches == ["prod.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"]
    assert dns.options == ["ndots:5"]


def test_dns_cluster_first_without_cluster_dns_falls_back_to_host():
    assert pod_dns(make_pod(), HOST, [], "cluster.local").servers == ["192.0.2.53"]


def test_dns_host_network_and_with_host_net():
    assert pod_dns(make_pod(hostNetwork=True), HOST, ["10.96.0.10"], "cluster.local").servers == [
        "192.0.2.53"
    ]
    p = make_pod(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    assert pod_dns(p, HOST, ["10.96.0.10"], "cluster.local").servers == ["10.96.0.10"]


def test_dns_none_with_config_merge():
    p = make_pod(
        dnsPolicy="None",
        dnsConfig={
            "nameservers": ["1.2.3.4"],
            "searches": ["x.y"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "rotate"}],
        },
    )
    dns = pod_dns(p, HOST, ["10.96.0.10"], "cluster.local")
    assert (dns.servers, dns.searches, dns.options) == (["1.2.3.4"], ["x.y"], ["ndots:2", "rotate"])


def test_parse_resolv_conf():
    dns = parse_resolv_conf(
        "# c\nnameserver 1.1.1.1\nsearch a b\noptions ndots:2 edns0\nnameserver 8.8.8.8\n"
    )
    assert dns == DNS(["1.1.1.1", "8.8.8.8"], ["a", "b"], ["ndots:2", "edns0"])


def test_expand():
    env = {"A": "x", "B": "y"}
    assert expand("$(A)-$(B)-$(C)-$$(A)", env) == "x-y-$(C)-$(A)"


async def test_resolve_env_sources():
    secret = {"data": {"pw": base64.b64encode(b"s3cret").decode()}}
    cm = {"data": {"k": "v", "other": "o"}}

    async def fetch(kind, ns, name):
        assert ns == "prod"
        return {"ConfigMap": {"cm": cm}, "Secret": {"sec": secret}}[kind].get(name)

    c = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "A", "value": "one"},
            {"name": "B", "value": "$(A)-two"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "LBL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "pw"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "x", "optional": True}}},
        ],
    }
    env = dict(await resolve_env(make_pod(), c, fetch, "192.0.2.1", "10.0.0.7"))
    assert env == {
        "CM_k": "v",
        "CM_other": "o",
        "A": "one",
        "B": "one-two",
        "POD": "web",
        "LBL": "web",
        "PW": "s3cret",
        "IP": "10.0.0.7",
    }
    with pytest.raises(ConfigError, match='configmap "gone" not found'):
        await resolve_env(
            make_pod(),
            {
                "name": "c",
                "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "x"}}}],
            },
            fetch,
        )


@pytest.mark.parametrize(
    ("resource", "divisor", "resources", "expected"),
    [
        ("limits.cpu", None, {"limits": {"cpu": "1250m"}}, "2"),  # rounded up, never toward zero
        ("limits.cpu", "1m", {"limits": {"cpu": "1250m"}}, "1250"),
        ("requests.cpu", None, {"requests": {"cpu": "250m"}}, "1"),
        ("requests.cpu", "1m", {"requests": {"cpu": "0.1m"}}, "1"),  # millicores, rounded up first
        ("limits.memory", "1Mi", {"limits": {"memory": "100Mi"}}, "100"),
        ("limits.memory", "1Mi", {"limits": {"memory": "1.5Mi"}}, "2"),
        ("limits.memory", None, {"limits": {"memory": "1G"}}, "1000000000"),
        ("requests.memory", "1k", {}, "0"),  # no request: 0, as upstream
        ("limits.cpu", None, {}, "3"),  # no limit: the node's allocatable 2500m, rounded up
        ("limits.cpu", "1m", {"limits": {"cpu": "0"}}, "2500"),  # a zero limit too
        ("limits.memory", "1Ki", {}, "4096"),
        ("limits.ephemeral-storage", "1Gi", {}, "10"),
        ("limits.hugepages-2Mi", "1Mi", {"limits": {"hugepages-2Mi": "4Mi"}}, "4"),
        ("limits.hugepages-2Mi", None, {}, "0"),  # hugepages are never defaulted from the node
    ],
)
async def test_resource_field_ref_values(resource, divisor, resources, expected):
    alloc = {"cpu": "2500m", "memory": "4Mi", "ephemeral-storage": "10Gi", "pods": "110"}
    ref = {"resource": resource, **({"divisor": divisor} if divisor else {})}
    c = {"name": "c", "resources": resources, "env": [{"name": "V", "valueFrom": {"resourceFieldRef": ref}}]}
    assert await resolve_env(make_pod(containers=[c]), c, None, node_alloc=alloc) == [("V", expected)]


async def test_resource_field_ref_of_another_container_and_errors():
    other = {"name": "side", "resources": {"limits": {"cpu": "3"}}}
    c = {
        "name": "c",
        "env": [
            {
                "name": "V",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "containerName": "side"}},
            }
        ],
    }
    assert await resolve_env(make_pod(containers=[c, other]), c, None) == [("V", "3")]
    for ref, message in [
        ({"resource": "limits.cpu", "containerName": "gone"}, "container gone not found"),
        ({"resource": "limits.pods"}, "unsupported container resource : limits.pods"),
        ({"resource": "limits.cpu", "divisor": "lots"}, "invalid quantity for limits.cpu"),
    ]:
        bad = {"name": "c", "env": [{"name": "V", "valueFrom": {"resourceFieldRef": ref}}]}
        with pytest.raises(ConfigError, match=message):
            await resolve_env(make_pod(containers=[bad]), bad, None)


def test_own_etc_hosts_mount_replaces_the_managed_one():
    own = pb.Mount(container_path="/etc/hosts", host_path="/volumes/hosts")
    c = {"name": "c", "volumeMounts": [{"name": "h", "mountPath": "/etc/hosts", "subPath": "hosts"}]}
    cfg = container_config(
        make_pod(containers=[c]), c, "app", 0, "img", [], 2**30, "/t/log", "/pod/hosts", [own]
    )
    assert [(m.container_path, m.host_path) for m in cfg.mounts] == [
        ("/etc/hosts", "/volumes/hosts"),
        ("/dev/termination-log", "/t/log"),
    ]
    plain = {"name": "c"}
    cfg = container_config(
        make_pod(containers=[plain]), plain, "app", 0, "img", [], 2**30, "/t/log", "/pod/hosts"
    )
    assert [(m.container_path, m.host_path) for m in cfg.mounts] == [
        ("/etc/hosts", "/pod/hosts"),
        ("/dev/termination-log", "/t/log"),
    ]


def res(requests=None, limits=None):
    return {"resources": {"requests": requests or {}, "limits": limits or {}}}


def test_qos_and_cgroup_parent():
    best = make_pod()
    guaranteed = make_pod(
        containers=[{"name": "c", **res({"cpu": "500m", "memory": "64Mi"}, {"cpu": "0.5", "memory": "64Mi"})}]
    )
    burst = make_pod(containers=[{"name": "c", **res({"cpu": "100m"})}])
    assert [qos_class(p) for p in (best, guaranteed, burst)] == ["BestEffort", "Guaranteed", "Burstable"]
    assert cgroup_parent(best) == "/kubepods/besteffort/pod1234-5678"
    assert cgroup_parent(guaranteed) == "/kubepods/pod1234-5678"
    assert cgroup_parent(burst, "/test-root") == "/test-root/kubepods/burstable/pod1234-5678"
    assert cgroup_parent(burst, driver="systemd") == "kubepods-burstable-pod1234_5678.slice"


def test_linux_resources():
    c = {"name": "c", **res({"cpu": "250m", "memory": "32Mi"}, {"cpu": "1", "memory": "64Mi"})}
    r = linux_resources(make_pod(containers=[c]), c, node_memory=2**30)
    assert (r.cpu_shares, r.cpu_quota, r.cpu_period, r.memory_limit_in_bytes) == (
        256,
        100000,
        100000,
        64 * 2**20,
    )
    assert r.oom_score_adj == 1000 - (1000 * 32 * 2**20) // 2**30
    be = linux_resources(make_pod(), {"name": "c"}, 2**30)
    assert (be.cpu_shares, be.cpu_quota, be.oom_score_adj) == (2, 0, 1000)


def test_container_config_identity_and_security():
    c = {
        "name": "c",
        "image": "busybox:1.35.0",
        "command": ["sh", "-c"],
        "args": ["echo $(GREETING)"],
        "workingDir": "/tmp",
        "ports": [{"containerPort": 80}],
        "securityContext": {
            "runAsUser": 1000,
            "runAsGroup": 2000,
            "readOnlyRootFilesystem": True,
            "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
        },
    }
    p = make_pod(containers=[c])
    cfg = container_config(p, c, "app", 3, "sha256:img", [("GREETING", "hi")], 2**30)
    assert list(cfg.args) == ["echo hi"] and cfg.working_dir == "/tmp"
    assert cfg.metadata.attempt == 3 and cfg.log_path == "c/3.log"
    assert cfg.image.image == "sha256:img" and cfg.image.user_specified_image == "busybox:1.35.0"
    assert cfg.labels[L.POD_UID] == "1234-5678" and cfg.labels[L.CONTAINER_NAME] == "c"
    assert cfg.annotations[L.RESTART_COUNT] == "3" and cfg.annotations[L.CONTAINER_HASH] == L.container_hash(
        c
    )
    assert json.loads(cfg.annotations[L.CONTAINER_PORTS]) == [{"containerPort": 80}]
    sec = cfg.linux.security_context
    assert (sec.run_as_user.value, sec.run_as_group.value, sec.readonly_rootfs) == (1000, 2000, True)
    assert list(sec.capabilities.add_capabilities) == ["NET_ADMIN"]


def test_container_hash_ignores_resources_only():
    a = {"name": "c", "image": "x:1", **res({"cpu": "1"})}
    assert L.container_hash(a) == L.container_hash({**a, **res({"cpu": "2"})})
    assert L.container_hash(a) != L.container_hash({**a, "image": "x:2"})


def test_sandbox_config():
    cfg = AgentConfig(
        node_name="n1", pod_logs_dir="/logs", cluster_domain="cluster.local", cluster_dns=["10.96.0.10"]
    )
    p = make_pod(
        hostname="h",
        hostPID=True,
        containers=[
            {
                "name": "c",
                "image": "b",
                "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 53, "protocol": "UDP"}],
            }
        ],
    )
    sb = sandbox_config(cfg, p, 2, HOST, "node-host")
    assert (sb.metadata.name, sb.metadata.namespace, sb.metadata.uid, sb.metadata.attempt) == (
        "web",
        "prod",
        "1234-5678",
        2,
    )
    assert sb.hostname == "h" and sb.log_directory == "/logs/prod_web_1234-5678"
    assert sb.labels["app"] == "web" and sb.labels[L.POD_NAME] == "web" and sb.annotations["a"] == "b"
    assert [(m.container_port, m.host_port, m.protocol) for m in sb.port_mappings] == [(80, 8080, pb.TCP)]
    ns = sb.linux.security_context.namespace_options
    assert (ns.network, ns.pid, ns.ipc) == (pb.POD, pb.NODE, pb.POD)
    assert sb.linux.cgroup_parent == "/kubepods/besteffort/pod1234-5678"
    assert list(sb.dns_config.servers) == ["10.96.0.10"]
    host_net = sandbox_config(cfg, make_pod(hostNetwork=True), 0, HOST, "node-host")
    assert host_net.hostname == "" and host_net.linux.security_context.namespace_options.network == pb.NODE


def test_image_reference_and_policy():
    assert valid_reference("127.0.0.1:5000/library/busybox:latest")
    assert not valid_reference("BusyBox") and not valid_reference("a b")
    assert default_pull_policy("busybox") == "Always"
    assert default_pull_policy("busybox:latest") == "Always"
    assert default_pull_policy("busybox:1.35") == "IfNotPresent"
    assert default_pull_policy("reg:5000/busybox") == "Always"
    assert registry_host("busybox") == "docker.io" and registry_host("reg.io:5000/a/b") == "reg.io:5000"


def test_auth_from_dockerconfigjson():
    doc = {
        "auths": {
            "reg.io:5000": {"auth": base64.b64encode(b"alice:pw").decode()},
            "other.io": {"username": "bob", "password": "x"},
        }
    }
    secret = {
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(doc).encode()).decode()},
    }
    auths = auth_from_secrets([secret], "reg.io:5000/team/app:1")
    assert [(a.username, a.password, a.server_address) for a in auths] == [("alice", "pw", "reg.io:5000")]
    assert auth_from_secrets([secret], "busybox") == []


def test_backoff_table_doubles_caps_and_resets():
    now = [0.0]
    table = BackoffTable(10, 300, clock=lambda: now[0])
    key = ("u", "c")
    assert table.remaining(key) == 0
    delays = []
    for _ in range(7):
        delays.append(table.next(key))
        now[0] += table.remaining(key)
    assert delays == [10, 20, 40, 80, 160, 300, 300]
    now[0] += 601  # ten minutes of clean running
    assert table.remaining(key) == 0 and table.next(key) == 10
    assert [format_go_duration(s) for s in (10, 80, 300)] == ["10s", "1m20s", "5m0s"]


def test_hosts_file_with_subdomain_and_aliases():
    from agent.pods.sandbox import hosts_file

    p = make_pod(
        hostname="db-0", subdomain="db", hostAliases=[{"ip": "192.0.2.9", "hostnames": ["a.test", "b.test"]}]
    )
    text = hosts_file(p, "10.0.0.8", "cluster.local")
    assert "10.0.0.8\tdb-0.db.prod.svc.cluster.local\tdb-0\n" in text
    assert text.startswith("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n")
    assert "192.0.2.9\ta.test\tb.test\n" in text
    assert "10.0.0.8\tweb\n" in hosts_file(make_pod(), "10.0.0.8", "cluster.local")


def test_upstream_text_formats():
    import grpc

    from agent.cri import ImagePullError
    from agent.pods.images import go_duration, grpc_error_text

    err = ImagePullError("x", grpc.StatusCode.NOT_FOUND, 'failed to pull and unpack image "x": not found')
    assert (
        grpc_error_text(err)
        == 'rpc error: code = NotFound desc = failed to pull and unpack image "x": not found'
    )
    # Pulled durations are truncated to the millisecond before printing, as upstream's image manager does.
    assert [go_duration(s) for s in (0.0514, 1.5, 0.0000025, 62.5009, 0.9999)] == [
        "51ms",
        "1.5s",
        "0s",
        "1m2.5s",
        "999ms",
    ]
    err = ImagePullError("x", grpc.StatusCode.UNKNOWN, "boom")
    assert grpc_error_text(err) == "rpc error: code = Unknown desc = boom"


def test_zero_cpu_request_leaves_a_pod_best_effort():
    """upstream's GetPodQOS counts only positive quantities, summed over the pod's containers."""
    zero = make_pod(containers=[{"name": "c", **res({"cpu": "0"})}])
    assert qos_class(zero) == "BestEffort"
    summed = make_pod(
        containers=[
            {"name": "a", **res({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"})},
            {"name": "b", **res({"cpu": "1", "memory": "1Gi"}, {"cpu": "0", "memory": "1Gi"})},
        ]
    )
    assert qos_class(summed) == "Burstable"  # b limits no cpu


def test_oom_score_adj_tiers_and_the_burstable_floor():
    from agent.pods.qos import oom_score_adj

    node = 2**30
    big = {"name": "c", **res({"memory": "2Gi"})}  # requests more than the node has
    burst = make_pod(containers=[big])
    assert oom_score_adj(burst, big, node) == 3  # never at or below a Guaranteed container's score
    tiny = {"name": "c", **res({"cpu": "10m"})}
    assert oom_score_adj(make_pod(containers=[tiny]), tiny, node) == 999  # always above BestEffort
    side = {"name": "side", "restartPolicy": "Always", **res({"cpu": "10m"})}
    app = {"name": "app", **res({"memory": "512Mi"})}
    with_sidecar = make_pod(containers=[app], initContainers=[side])
    assert oom_score_adj(with_sidecar, side, node) == oom_score_adj(with_sidecar, app, node) == 500


def test_memory_oom_group_on_cgroup_v2_only():
    """upstream 1.32 (singleProcessOOMKill false): on cgroup v2 an OOM kills the whole container."""
    c = {"name": "c", **res(limits={"memory": "64Mi"})}
    assert dict(linux_resources(make_pod(containers=[c]), c, 2**30, cgroup2=True).unified) == {
        "memory.oom.group": "1"
    }
    assert dict(linux_resources(make_pod(containers=[c]), c, 2**30, cgroup2=False).unified) == {}


def test_restart_count_from_the_log_folder(tmp_path):
    from agent.pods.cri_runtime import restart_count_from_logs

    assert restart_count_from_logs(str(tmp_path / "missing")) == 0
    for name in ("0.log", "3.log.20260101-000000.gz", "2.log", "notes.txt", "7x.log"):
        (tmp_path / name).write_text("")
    (tmp_path / "9.log").mkdir()
    assert restart_count_from_logs(str(tmp_path)) == 4


def test_crash_backoff_counts_from_the_event_and_expires_after_ten_minutes_of_running():
    now = [1000.0]
    table = BackoffTable(10, 300, clock=lambda: now[0])
    key = ("u", "c")
    table.next(key, 995.0)  # the first restart, after an exit at 995
    now[0] = 1030.0  # it ran 30 s and exited just now
    assert table.in_backoff_since(key, 1030.0) and table.remaining_since(key, 1030.0) == 10
    now[0] = 1040.0
    assert not table.in_backoff_since(key, 1030.0)
    assert table.next(key, 1030.0) == 20
    # An exit more than 10 minutes after the last restart starts over.
    assert not table.in_backoff_since(key, 1040.0 + 601)
    now[0] = 1040.0 + 601
    assert table.next(key, now[0]) == 10


def test_security_context_groups_masks_and_privilege_escalation():
    c = {"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "runAsGroup": 7}}
    p = make_pod(
        containers=[c], securityContext={"runAsUser": 5, "fsGroup": 2000, "supplementalGroups": [3000, 2000]}
    )
    sec = container_config(p, c, "app", 0, "img", [], 2**30).linux.security_context
    assert (sec.run_as_user.value, sec.run_as_group.value, sec.no_new_privs) == (5, 7, True)
    assert list(sec.supplemental_groups) == [2000, 3000]  # fsGroup first, as upstream
    assert "/proc/kcore" in sec.masked_paths and "/proc/sys" in sec.readonly_paths
    unmasked = {"name": "c", "securityContext": {"procMount": "Unmasked"}}
    sec = container_config(
        make_pod(containers=[unmasked]), unmasked, "app", 0, "img", [], 2**30
    ).linux.security_context
    assert list(sec.masked_paths) == [] and list(sec.readonly_paths) == []
    sb = sandbox_config(AgentConfig(node_name="n1"), p, 0, DNS(), "n1").linux.security_context
    assert list(sb.supplemental_groups) == [2000, 3000]
