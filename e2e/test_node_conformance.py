"""What upstream's node conformance suite checks of every kubelet, through the API only: sysctls (the
safe set applied, an unsafe one refused at admission), fsGroup with supplementalGroups and the file
modes of volumes, allowPrivilegeEscalation, memory-backed emptyDir as a sized tmpfs, and configMap and
downwardAPI volumes that follow their sources in a running pod. Each pod checks its own view with a
shell test and exits 0 only if it holds, so Succeeded is the proof.
"""

from __future__ import annotations

import subprocess

import pytest
from kubernetes import client

from e2e.waiting import finished, wait_for

pytestmark = pytest.mark.integration

# Upstream's kubelet rewrites such volumes on its periodic sync (1 min) plus the cache TTL; its
# conformance tests allow minutes. This bound is what a genuine node meets with room to spare.
REFRESH_TIMEOUT = 150.0


def pod_of(
    name, node, image, script, volumes=None, mounts=None, security=None, container_security=None, **spec
):
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "conformance"}),
        spec=client.V1PodSpec(
            node_name=node,
            restart_policy="Never",
            termination_grace_period_seconds=1,
            security_context=security,
            volumes=volumes,
            containers=[
                client.V1Container(
                    name="main",
                    image=image,
                    command=["sh", "-c", script],
                    volume_mounts=mounts,
                    security_context=container_security,
                )
            ],
            **spec,
        ),
    )


def succeeded(kube, ns, pod) -> None:
    kube.create_namespaced_pod(ns, pod)
    done = finished(kube, ns, pod.metadata.name)
    statuses = done.status.container_statuses or []
    term = statuses[0].state.terminated if statuses else None
    detail = f"exit {term.exit_code}" if term else f"{done.status.reason}: {done.status.message}"
    assert done.status.phase == "Succeeded", f"{pod.metadata.name}: {detail}"


def test_safe_sysctl_is_set_and_an_unsafe_one_is_forbidden(kube, namespace, node_name, image):
    safe = client.V1PodSecurityContext(sysctls=[client.V1Sysctl(name="kernel.shm_rmid_forced", value="1")])
    succeeded(
        kube,
        namespace,
        pod_of(
            "safe-sysctl",
            node_name,
            image,
            'test "$(cat /proc/sys/kernel/shm_rmid_forced)" = 1',
            security=safe,
        ),
    )
    unsafe = client.V1PodSecurityContext(sysctls=[client.V1Sysctl(name="kernel.msgmax", value="10000000")])
    kube.create_namespaced_pod(namespace, pod_of("unsafe-sysctl", node_name, image, "true", security=unsafe))
    pod = finished(kube, namespace, "unsafe-sysctl")
    assert (pod.status.phase, pod.status.reason) == ("Failed", "SysctlForbidden")
    assert pod.status.message == 'Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted'


def test_fs_group_owns_volumes_and_joins_the_groups(kube, namespace, node_name, image):
    kube.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cfg"), data={"k": "v"})
    )
    volumes = [
        client.V1Volume(name="scratch", empty_dir=client.V1EmptyDirVolumeSource()),
        client.V1Volume(
            name="cfg", config_map=client.V1ConfigMapVolumeSource(name="cfg", default_mode=0o440)
        ),
    ]
    mounts = [
        client.V1VolumeMount(name="scratch", mount_path="/scratch"),
        client.V1VolumeMount(name="cfg", mount_path="/cfg"),
    ]
    security = client.V1PodSecurityContext(
        run_as_user=1001, run_as_group=1002, fs_group=2000, supplemental_groups=[3000]
    )
    script = (
        'test "$(id -u)" = 1001 && test "$(id -g)" = 1002 && id -G | grep -qw 2000 && id -G | grep -qw 3000 '
        '&& test "$(stat -c %g /scratch)" = 2000 && stat -c %A /scratch | grep -q "^drwxrwsrwx" '
        '&& echo x > /scratch/new && test "$(stat -c %g /scratch/new)" = 2000 '
        '&& test "$(stat -L -c %a:%g /cfg/k)" = 440:2000 && cat /cfg/k'
    )
    succeeded(kube, namespace, pod_of("fsgroup", node_name, image, script, volumes, mounts, security))


def test_file_modes_without_fs_group(kube, namespace, node_name, image):
    kube.create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="sec"), string_data={"a": "1", "b": "2"})
    )
    items = [client.V1KeyToPath(key="a", path="a"), client.V1KeyToPath(key="b", path="b", mode=0o440)]
    volumes = [
        client.V1Volume(
            name="sec", secret=client.V1SecretVolumeSource(secret_name="sec", default_mode=0o400, items=items)
        )
    ]
    mounts = [client.V1VolumeMount(name="sec", mount_path="/sec")]
    script = 'test "$(stat -L -c %A /sec/a)" = -r-------- && test "$(stat -L -c %A /sec/b)" = -r--r----- && test "$(stat -L -c %g /sec/a)" = 0'
    succeeded(kube, namespace, pod_of("modes", node_name, image, script, volumes, mounts))


def test_allow_privilege_escalation_false_sets_no_new_privs(kube, namespace, node_name, image):
    no_escalation = client.V1SecurityContext(allow_privilege_escalation=False)
    script = "grep -q '^NoNewPrivs:[[:space:]]*1' /proc/self/status"
    succeeded(kube, namespace, pod_of("nnp", node_name, image, script, container_security=no_escalation))
    succeeded(
        kube,
        namespace,
        pod_of("nnp-default", node_name, image, "grep -q '^NoNewPrivs:[[:space:]]*0' /proc/self/status"),
    )


def test_memory_emptydir_is_a_tmpfs_of_its_size_limit(kube, namespace, node_name, image):
    volumes = [
        client.V1Volume(
            name="mem", empty_dir=client.V1EmptyDirVolumeSource(medium="Memory", size_limit="16Mi")
        )
    ]
    mounts = [client.V1VolumeMount(name="mem", mount_path="/mem")]
    script = "grep -q ' /mem tmpfs ' /proc/mounts && test \"$(df -k /mem | awk 'NR==2 {print $2}')\" = 16384 && echo x > /mem/f"
    succeeded(kube, namespace, pod_of("tmpfs", node_name, image, script, volumes, mounts))


def _log_has(kube, ns, name, text):
    def check():
        try:
            return text in kube.read_namespaced_pod_log(name, ns, container="main", tail_lines=5)
        except client.ApiException:
            return False

    return check


def test_config_map_and_labels_reach_a_running_pod_but_not_a_sub_path(kube, namespace, node_name, image):
    kube.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="live"), data={"value": "one"})
    )
    volumes = [
        client.V1Volume(name="live", config_map=client.V1ConfigMapVolumeSource(name="live")),
        client.V1Volume(
            name="info",
            downward_api=client.V1DownwardAPIVolumeSource(
                items=[
                    client.V1DownwardAPIVolumeFile(
                        path="labels", field_ref=client.V1ObjectFieldSelector(field_path="metadata.labels")
                    )
                ]
            ),
        ),
    ]
    mounts = [
        client.V1VolumeMount(name="live", mount_path="/live"),
        client.V1VolumeMount(name="live", mount_path="/pinned", sub_path="value"),
        client.V1VolumeMount(name="info", mount_path="/info"),
    ]
    script = "while true; do echo \"live=$(cat /live/value) pinned=$(cat /pinned) $(cat /info/labels | tr '\\n' ' ')\"; sleep 1; done"
    pod = pod_of("refresh", node_name, image, script, volumes, mounts)
    pod.spec.restart_policy = "Always"
    kube.create_namespaced_pod(namespace, pod)
    wait_for(
        _log_has(kube, namespace, "refresh", "live=one pinned=one"), timeout=60, what="the first content"
    )
    # The ConfigMap alone: nothing about the pod changes, so only the node's periodic sync carries it.
    kube.patch_namespaced_config_map("live", namespace, {"data": {"value": "two"}})
    wait_for(
        _log_has(kube, namespace, "refresh", "live=two pinned=one"),
        timeout=REFRESH_TIMEOUT,
        what="the new ConfigMap value",
    )
    kube.patch_namespaced_pod("refresh", namespace, {"metadata": {"labels": {"stage": "later"}}})
    wait_for(
        _log_has(kube, namespace, "refresh", 'stage="later"'), timeout=REFRESH_TIMEOUT, what="the new label"
    )


def _env(name, value=None, field=None):
    if field:
        return client.V1EnvVar(
            name=name,
            value_from=client.V1EnvVarSource(field_ref=client.V1ObjectFieldSelector(field_path=field)),
        )
    return client.V1EnvVar(name=name, value=value)


def test_sub_path_expr_expands_the_container_env(kube, namespace, node_name, image):
    volumes = [client.V1Volume(name="logs", empty_dir=client.V1EmptyDirVolumeSource())]
    mounts = [
        client.V1VolumeMount(name="logs", mount_path="/all"),
        client.V1VolumeMount(name="logs", mount_path="/mine", sub_path_expr="pods/$(POD_NAME)"),
    ]
    pod = pod_of(
        "subexpr",
        node_name,
        image,
        'echo hi > /mine/f && test "$(cat /all/pods/subexpr/f)" = hi',
        volumes,
        mounts,
    )
    pod.spec.containers[0].env = [_env("POD_NAME", field="metadata.name")]
    succeeded(kube, namespace, pod)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("/abs/x", "error SubPath `/abs/x` must not be an absolute path"),
        ("a/..", "unable to provision SubPath `a/..`: must not contain '..'"),
    ],
)
def test_a_sub_path_leaving_the_volume_is_a_config_error(kube, namespace, node_name, image, value, message):
    volumes = [client.V1Volume(name="scratch", empty_dir=client.V1EmptyDirVolumeSource())]
    mounts = [client.V1VolumeMount(name="scratch", mount_path="/x", sub_path_expr="$(WHERE)")]
    pod = pod_of("badsub", node_name, image, "true", volumes, mounts)
    pod.spec.containers[0].env = [_env("WHERE", value)]
    kube.create_namespaced_pod(namespace, pod)

    def config_error():
        statuses = kube.read_namespaced_pod("badsub", namespace).status.container_statuses or []
        waiting = statuses[0].state.waiting if statuses else None
        return waiting if waiting and waiting.reason == "CreateContainerConfigError" else None

    assert wait_for(config_error, what="CreateContainerConfigError").message == message


def test_service_environment_variables_and_enable_service_links(kube, namespace, node_name, image):
    svc = client.V1Service(
        metadata=client.V1ObjectMeta(name="fooservice"),
        spec=client.V1ServiceSpec(
            selector={"app": "none"}, ports=[client.V1ServicePort(name="web", port=8765, target_port=8080)]
        ),
    )
    ip = kube.create_namespaced_service(namespace, svc).spec.cluster_ip
    linked = (
        f'test "$FOOSERVICE_SERVICE_HOST" = {ip} && test "$FOOSERVICE_SERVICE_PORT" = 8765 '
        f'&& test "$FOOSERVICE_SERVICE_PORT_WEB" = 8765 && test "$FOOSERVICE_PORT" = tcp://{ip}:8765 '
        f'&& test "$FOOSERVICE_PORT_8765_TCP_ADDR" = {ip} && test "$FOOSERVICE_PORT_8765_TCP_PROTO" = tcp '
        '&& test -n "$KUBERNETES_SERVICE_HOST" && test "$FROM_SERVICE" = "port-8765"'
    )
    pod = pod_of("linked", node_name, image, linked)
    pod.spec.containers[0].env = [_env("FROM_SERVICE", "port-$(FOOSERVICE_SERVICE_PORT)")]
    succeeded(kube, namespace, pod)
    unlinked = pod_of(
        "unlinked",
        node_name,
        image,
        'test -z "$FOOSERVICE_SERVICE_HOST" && test -n "$KUBERNETES_SERVICE_HOST"',
    )
    unlinked.spec.enable_service_links = False
    succeeded(kube, namespace, unlinked)


def test_set_hostname_as_fqdn(kube, namespace, node_name, image):
    fqdn = f"db-0.db.{namespace}.svc.cluster.local"
    pod = pod_of(
        "fqdn",
        node_name,
        image,
        f'test "$(hostname)" = {fqdn} && grep -q "{fqdn}" /etc/hosts',
        hostname="db-0",
        subdomain="db",
        set_hostname_as_fqdn=True,
    )
    succeeded(kube, namespace, pod)


def test_kubectl_debug_runs_an_ephemeral_container_once(kube, kubeconfig, namespace, node_name, image):
    pod = pod_of("debugged", node_name, image, "sleep 3600")
    kube.create_namespaced_pod(namespace, pod)
    wait_for(
        lambda: kube.read_namespaced_pod("debugged", namespace).status.phase == "Running",
        what="the pod Running",
    )
    subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            namespace,
            "debug",
            "debugged",
            f"--image={image}",
            "--container=dbg",
            "--",
            "sh",
            "-c",
            "echo from-dbg; exit 3",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )

    def ended():
        statuses = kube.read_namespaced_pod("debugged", namespace).status.ephemeral_container_statuses or []
        term = statuses[0].state.terminated if statuses else None
        return term

    term = wait_for(ended, what="the ephemeral container to finish")
    assert term.exit_code == 3
    after = kube.read_namespaced_pod("debugged", namespace)
    assert after.status.phase == "Running" and after.status.container_statuses[0].restart_count == 0
    assert [c.name for c in after.status.container_statuses] == ["main"]
    logs = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, "logs", "debugged", "-c", "dbg"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (logs.returncode, logs.stdout) == (0, "from-dbg\n"), logs.stderr


def test_an_empty_dir_over_its_size_limit_evicts_the_pod(kube, namespace, node_name, image):
    volumes = [client.V1Volume(name="scratch", empty_dir=client.V1EmptyDirVolumeSource(size_limit="1Mi"))]
    mounts = [client.V1VolumeMount(name="scratch", mount_path="/scratch")]
    script = "dd if=/dev/urandom of=/scratch/fill bs=1048576 count=4 2>/dev/null; sleep 3600"
    kube.create_namespaced_pod(namespace, pod_of("filler", node_name, image, script, volumes, mounts))
    pod = finished(kube, namespace, "filler", timeout=180)
    assert (pod.status.phase, pod.status.reason) == ("Failed", "Evicted")
    assert pod.status.message == 'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". '
