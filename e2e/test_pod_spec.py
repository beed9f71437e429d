"""What the spec asks of a container, checked from inside it: each pod runs a shell test of its own
environment and exits 0 only if it holds, so Succeeded (seen through the API) is the proof.

Covers env with $(VAR) expansion, fieldRef, configMap/secret sources, args and workingDir, runAsUser,
readOnlyRootFilesystem, a memory limit, dnsPolicy None with dnsConfig, hostNetwork, the termination
message, CreateContainerConfigError for a missing ConfigMap, and a volume no container uses left alone.
"""

from __future__ import annotations

import math

import pytest
from kubernetes import client

from e2e.waiting import finished, wait_for

pytestmark = pytest.mark.integration


def run(kube, ns, node, image, name, script, **container) -> client.V1Pod:
    pod_fields = {k: container.pop(k) for k in ("host_network", "dns_policy", "dns_config") if k in container}
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "spec-test"}),
        spec=client.V1PodSpec(
            node_name=node,
            restart_policy="Never",
            containers=[
                client.V1Container(name="main", image=image, command=["sh", "-c", script], **container)
            ],
            **pod_fields,
        ),
    )
    kube.create_namespaced_pod(ns, pod)
    return finished(kube, ns, name)


def assert_succeeded(pod: client.V1Pod) -> None:
    term = pod.status.container_statuses[0].state.terminated
    assert pod.status.phase == "Succeeded", f"{pod.metadata.name}: exit {term.exit_code} {term.message or ''}"


def test_env_sources_and_expansion(kube, namespace, node_name, image):
    kube.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm"), data={"color": "blue"})
    )
    kube.create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="sec"), string_data={"pw": "s3cret"})
    )
    env = [
        client.V1EnvVar(name="FIRST", value="one"),
        client.V1EnvVar(name="BOTH", value="$(FIRST)-two-$$(FIRST)"),
        client.V1EnvVar(
            name="POD_NAME",
            value_from=client.V1EnvVarSource(
                field_ref=client.V1ObjectFieldSelector(field_path="metadata.name")
            ),
        ),
        client.V1EnvVar(
            name="POD_NS",
            value_from=client.V1EnvVarSource(
                field_ref=client.V1ObjectFieldSelector(field_path="metadata.namespace")
            ),
        ),
        client.V1EnvVar(
            name="COLOR",
            value_from=client.V1EnvVarSource(
                config_map_key_ref=client.V1ConfigMapKeySelector(name="cm", key="color")
            ),
        ),
        client.V1EnvVar(
            name="PW",
            value_from=client.V1EnvVarSource(secret_key_ref=client.V1SecretKeySelector(name="sec", key="pw")),
        ),
    ]
    # The agent expands $(VAR) in command and args too: $$(FIRST) reaches the shell as a literal $(FIRST)
    # (single-quoted there), and the last $(FIRST) arrives already replaced by "one".
    script = (
        'test "$BOTH" = \'one-two-$$(FIRST)\' && test "$POD_NAME" = env && test "$POD_NS" = "$EXPECT_NS" '
        '&& test "$COLOR" = blue && test "$PW" = s3cret && test "$(pwd)" = /tmp && test "$1" = arg-one '
        "&& test $(FIRST) = one"
    )
    env.append(client.V1EnvVar(name="EXPECT_NS", value=namespace))
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="env"),
        spec=client.V1PodSpec(
            node_name=node_name,
            restart_policy="Never",
            containers=[
                client.V1Container(
                    name="main",
                    image=image,
                    command=["sh", "-c", script, "sh"],
                    args=["arg-$(FIRST)"],
                    working_dir="/tmp",
                    env=env,
                )
            ],
        ),
    )
    # command + args: sh -c SCRIPT sh ARG, so $1 inside the script is the expanded arg.
    kube.create_namespaced_pod(namespace, pod)
    assert_succeeded(finished(kube, namespace, "env"))


def test_security_context(kube, namespace, node_name, image):
    sc = client.V1SecurityContext(run_as_user=1000, run_as_group=3000, read_only_root_filesystem=True)
    pod = run(
        kube,
        namespace,
        node_name,
        image,
        "secctx",
        'test "$(id -u)" = 1000 && test "$(id -g)" = 3000 && ! touch /probe 2>/dev/null',
        security_context=sc,
    )
    assert_succeeded(pod)


def test_memory_limit_applied(kube, namespace, node_name, image):
    limits = client.V1ResourceRequirements(
        limits={"memory": "64Mi", "cpu": "500m"}, requests={"memory": "64Mi", "cpu": "500m"}
    )
    script = 'v=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max); test "$v" = 67108864'
    pod = run(kube, namespace, node_name, image, "limits", script, resources=limits)
    assert_succeeded(pod)
    assert pod.status.qos_class == "Guaranteed"


def test_dns_none_with_config(kube, namespace, node_name, image):
    cfg = client.V1PodDNSConfig(
        nameservers=["192.0.2.53"],
        searches=["example.test"],
        options=[client.V1PodDNSConfigOption(name="ndots", value="2")],
    )
    script = "grep -q 'nameserver 192.0.2.53' /etc/resolv.conf && grep -q 'search example.test' /etc/resolv.conf && grep -q 'ndots:2' /etc/resolv.conf"
    assert_succeeded(run(kube, namespace, node_name, image, "dns", script, dns_policy="None", dns_config=cfg))


def test_hostname_subdomain_and_host_aliases(kube, namespace, node_name, image):
    script = (
        f'test "$(hostname)" = db-0 && grep -q "db-0.db.{namespace}.svc.cluster.local" /etc/hosts '
        "&& grep -q '192.0.2.9' /etc/hosts && grep -q 'alias.test' /etc/hosts"
    )
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="named"),
        spec=client.V1PodSpec(
            node_name=node_name,
            restart_policy="Never",
            hostname="db-0",
            subdomain="db",
            host_aliases=[client.V1HostAlias(ip="192.0.2.9", hostnames=["alias.test"])],
            containers=[client.V1Container(name="main", image=image, command=["sh", "-c", script])],
        ),
    )
    kube.create_namespaced_pod(namespace, pod)
    assert_succeeded(finished(kube, namespace, "named"))


def test_host_network_pod_ip_is_host_ip(kube, namespace, node_name, image):
    pod = run(kube, namespace, node_name, image, "hostnet", "true", host_network=True)
    assert_succeeded(pod)
    assert pod.status.pod_ip == pod.status.host_ip


def test_termination_message(kube, namespace, node_name, image):
    pod = run(
        kube, namespace, node_name, image, "lastwords", "printf 'bye now' > /dev/termination-log; exit 4"
    )
    term = pod.status.container_statuses[0].state.terminated
    assert (term.exit_code, term.message) == (4, "bye now")
    pod = run(
        kube,
        namespace,
        node_name,
        image,
        "fallback",
        "echo from-the-log; exit 5",
        termination_message_policy="FallbackToLogsOnError",
    )
    assert pod.status.container_statuses[0].state.terminated.message == "from-the-log\n"


def test_missing_configmap_is_config_error(kube, namespace, node_name, image):
    env = [
        client.V1EnvVar(
            name="X",
            value_from=client.V1EnvVarSource(
                config_map_key_ref=client.V1ConfigMapKeySelector(name="absent", key="k")
            ),
        )
    ]
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="cfgerr"),
        spec=client.V1PodSpec(
            node_name=node_name,
            containers=[client.V1Container(name="main", image=image, command=["true"], env=env)],
        ),
    )
    kube.create_namespaced_pod(namespace, pod)

    def config_error():
        st = kube.read_namespaced_pod("cfgerr", namespace).status.container_statuses
        w = st[0].state.waiting if st else None
        return w if w and w.reason == "CreateContainerConfigError" else None

    waiting = wait_for(config_error, what="CreateContainerConfigError")
    assert "absent" in waiting.message


def test_capabilities_and_privileged(kube, namespace, node_name, image):
    drop = client.V1SecurityContext(capabilities=client.V1Capabilities(drop=["CHOWN"]))
    assert_succeeded(
        run(
            kube,
            namespace,
            node_name,
            image,
            "nochown",
            "touch /tmp/f && ! chown 1:1 /tmp/f 2>/dev/null",
            security_context=drop,
        )
    )
    mount = "mkdir -p /x && mount -t tmpfs none /x"
    assert_succeeded(
        run(
            kube,
            namespace,
            node_name,
            image,
            "priv",
            mount,
            security_context=client.V1SecurityContext(privileged=True),
        )
    )
    assert_succeeded(run(kube, namespace, node_name, image, "unpriv", f"! ( {mount} ) 2>/dev/null"))


def test_volumes_shared_and_projected(kube, namespace, node_name, image):
    kube.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="files"), data={"app.conf": "mode=fast"}),
    )
    kube.create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="creds"), data={"token": "dDBr"})
    )
    volumes = [
        client.V1Volume(name="scratch", empty_dir=client.V1EmptyDirVolumeSource()),
        client.V1Volume(name="conf", config_map=client.V1ConfigMapVolumeSource(name="files")),
        client.V1Volume(name="secret", secret=client.V1SecretVolumeSource(secret_name="creds")),
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
        client.V1VolumeMount(name="scratch", mount_path="/scratch"),
        client.V1VolumeMount(name="conf", mount_path="/etc/app"),
        client.V1VolumeMount(name="secret", mount_path="/run/creds"),
        client.V1VolumeMount(name="info", mount_path="/etc/podinfo"),
    ]
    check = (
        'test "$(cat /scratch/from-init)" = hello && grep -q mode=fast /etc/app/app.conf && test "$(cat /run/creds/token)" = t0k '
        "&& grep -q 'app=\"spec-test\"' /etc/podinfo/labels && ! touch /etc/app/new 2>/dev/null"
    )
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="vols", labels={"app": "spec-test"}),
        spec=client.V1PodSpec(
            node_name=node_name,
            restart_policy="Never",
            volumes=volumes,
            init_containers=[
                client.V1Container(
                    name="writer",
                    image=image,
                    command=["sh", "-c", "echo hello > /scratch/from-init"],
                    volume_mounts=[client.V1VolumeMount(name="scratch", mount_path="/scratch")],
                )
            ],
            containers=[
                client.V1Container(
                    name="main", image=image, command=["sh", "-c", check], volume_mounts=mounts
                )
            ],
        ),
    )
    kube.create_namespaced_pod(namespace, pod)
    assert_succeeded(finished(kube, namespace, "vols"))


def test_missing_configmap_volume_holds_pod(kube, namespace, node_name, image):
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="novol"),
        spec=client.V1PodSpec(
            node_name=node_name,
            volumes=[
                client.V1Volume(name="conf", config_map=client.V1ConfigMapVolumeSource(name="not-there"))
            ],
            containers=[
                client.V1Container(
                    name="main",
                    image=image,
                    command=["sleep", "3600"],
                    volume_mounts=[client.V1VolumeMount(name="conf", mount_path="/etc/app")],
                )
            ],
        ),
    )
    kube.create_namespaced_pod(namespace, pod)

    def failed_mount():
        events = kube.list_namespaced_event(namespace, field_selector="involvedObject.name=novol").items
        return [e for e in events if e.reason == "FailedMount"]

    [event] = wait_for(failed_mount, what="FailedMount event")[:1]
    assert 'configmap "not-there" not found' in event.message
    pod = kube.read_namespaced_pod("novol", namespace)
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    # Once the ConfigMap exists, the pod starts.
    kube.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="not-there"), data={"k": "v"})
    )
    wait_for(
        lambda: kube.read_namespaced_pod("novol", namespace).status.phase == "Running",
        what="Running once mounted",
    )


def test_a_volume_no_container_uses_is_not_waited_for(kube, namespace, node_name, image):
    """A configMap volume of a ConfigMap that does not exist, mounted by no container: the kubelet's
    populator skips the unused volume, so the pod runs (and records no FailedMount for it)."""
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="unused"),
        spec=client.V1PodSpec(
            node_name=node_name,
            restart_policy="Never",
            volumes=[
                client.V1Volume(name="conf", config_map=client.V1ConfigMapVolumeSource(name="not-there")),
                client.V1Volume(name="scratch", empty_dir=client.V1EmptyDirVolumeSource()),
            ],
            containers=[
                client.V1Container(
                    name="main",
                    image=image,
                    command=["sh", "-c", "touch /scratch/ok"],
                    volume_mounts=[client.V1VolumeMount(name="scratch", mount_path="/scratch")],
                )
            ],
        ),
    )
    kube.create_namespaced_pod(namespace, pod)
    assert_succeeded(finished(kube, namespace, "unused"))
    events = kube.list_namespaced_event(namespace, field_selector="involvedObject.name=unused").items
    assert [e.message for e in events if e.reason == "FailedMount"] == []


def test_host_port_reaches_the_pod(kube, namespace, node_name, image):
    import random

    port = random.randint(30500, 32000)
    server = client.V1Pod(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1PodSpec(
            node_name=node_name,
            termination_grace_period_seconds=1,
            containers=[
                client.V1Container(
                    name="main",
                    image=image,
                    command=[
                        "sh",
                        "-c",
                        "mkdir -p /srv && echo served-by-pod > /srv/index.html && exec httpd -f -p 8080 -h /srv",
                    ],
                    ports=[client.V1ContainerPort(container_port=8080, host_port=port)],
                )
            ],
        ),
    )
    kube.create_namespaced_pod(namespace, server)
    wait_for(lambda: kube.read_namespaced_pod("web", namespace).status.phase == "Running", what="web Running")
    host_ip = client.V1EnvVar(
        name="HOST_IP",
        value_from=client.V1EnvVarSource(field_ref=client.V1ObjectFieldSelector(field_path="status.hostIP")),
    )
    # nc, not wget: the test image's static busybox crashes in wget's name lookup.
    request = "printf 'GET / HTTP/1.0\\r\\n\\r\\n'"
    script = f'for i in 1 2 3 4 5 6 7 8 9 10; do {request} | nc -w 2 "$HOST_IP" {port} | grep -q served-by-pod && exit 0; sleep 1; done; exit 1'
    # Another pod reaches the server through the node's IP and the hostPort.
    assert_succeeded(run(kube, namespace, node_name, image, "fetch", script, env=[host_ip]))


def test_termination_message_from_logs_as_written(kube, namespace, node_name, image):
    """FallbackToLogsOnError gives the end of the log as `kubectl logs --tail=80` prints it, cut to its
    last 2048 bytes: a last line without a newline stays without one (issue 22 item 3)."""
    pod = run(
        kube,
        namespace,
        node_name,
        image,
        "nonl",
        "echo started; printf DONE; exit 1",
        termination_message_policy="FallbackToLogsOnError",
    )
    assert pod.status.container_statuses[0].state.terminated.message == "started\nDONE"
    script = "for i in $(seq 1 100); do echo line $i; done; exit 2"
    pod = run(
        kube, namespace, node_name, image, "many", script, termination_message_policy="FallbackToLogsOnError"
    )
    assert pod.status.container_statuses[0].state.terminated.message == "".join(
        f"line {i}\n" for i in range(21, 101)
    )
    pod = run(
        kube,
        namespace,
        node_name,
        image,
        "long",
        "printf 'a%.0s' $(seq 1 3000); echo; exit 3",
        termination_message_policy="FallbackToLogsOnError",
    )
    assert pod.status.container_statuses[0].state.terminated.message == "a" * 2047 + "\n"


def test_resource_field_ref_env(kube, namespace, node_name, image):
    """resourceFieldRef values are divided by the divisor and rounded up; a container without limits
    sees the node's allocatable as its limits (issue 22 item 4)."""
    from kubernetes.utils import parse_quantity

    def ref(resource: str, divisor: str | None = None) -> client.V1EnvVarSource:
        return client.V1EnvVarSource(
            resource_field_ref=client.V1ResourceFieldSelector(resource=resource, divisor=divisor)
        )

    env = [
        client.V1EnvVar(name="CPU_LIMIT", value_from=ref("limits.cpu")),
        client.V1EnvVar(name="CPU_LIMIT_M", value_from=ref("limits.cpu", "1m")),
        client.V1EnvVar(name="CPU_REQUEST", value_from=ref("requests.cpu")),
        client.V1EnvVar(name="MEM_LIMIT_MI", value_from=ref("limits.memory", "1Mi")),
        client.V1EnvVar(name="MEM_LIMIT", value_from=ref("limits.memory")),
    ]
    show = "echo $CPU_LIMIT $CPU_LIMIT_M $CPU_REQUEST $MEM_LIMIT_MI $MEM_LIMIT"
    limited = client.V1ResourceRequirements(
        limits={"cpu": "1250m", "memory": "100Mi"}, requests={"cpu": "250m", "memory": "50Mi"}
    )
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="resenv"),
        spec=client.V1PodSpec(
            node_name=node_name,
            restart_policy="Never",
            containers=[
                client.V1Container(
                    name="limited", image=image, command=["sh", "-c", show], env=env, resources=limited
                ),
                client.V1Container(name="free", image=image, command=["sh", "-c", show], env=env),
            ],
        ),
    )
    kube.create_namespaced_pod(namespace, pod)
    assert_succeeded(finished(kube, namespace, "resenv"))
    log = lambda c: kube.read_namespaced_pod_log("resenv", namespace, container=c).split()  # noqa: E731
    assert log("limited") == ["2", "1250", "1", str(100), str(100 * 2**20)]
    allocatable = kube.read_node(node_name).status.allocatable
    cpu, memory = parse_quantity(allocatable["cpu"]), parse_quantity(allocatable["memory"])
    expected = [math.ceil(cpu), math.ceil(cpu * 1000), 0, math.ceil(memory / 2**20), math.ceil(memory)]
    assert log("free") == [str(v) for v in expected]


def test_resource_field_ref_in_a_downward_api_volume(kube, namespace, node_name, image):
    """downwardAPI volume items with resourceFieldRef hold the same values as the env form: divided by
    the divisor and rounded up, the node's allocatable where the container has no limit."""
    from kubernetes.utils import parse_quantity

    def item(
        path: str, container: str, resource: str, divisor: str | None = None
    ) -> client.V1DownwardAPIVolumeFile:
        return client.V1DownwardAPIVolumeFile(
            path=path,
            resource_field_ref=client.V1ResourceFieldSelector(
                container_name=container, resource=resource, divisor=divisor
            ),
        )

    volume = client.V1Volume(
        name="res",
        downward_api=client.V1DownwardAPIVolumeSource(
            items=[
                item("cpu_limit", "limited", "limits.cpu"),
                item("mem_request_mi", "limited", "requests.memory", "1Mi"),
                item("free_cpu_limit_m", "free", "limits.cpu", "1m"),
            ]
        ),
    )
    show = "cat /res/cpu_limit; echo; cat /res/mem_request_mi; echo; cat /res/free_cpu_limit_m"
    mount = [client.V1VolumeMount(name="res", mount_path="/res")]
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="resvol"),
        spec=client.V1PodSpec(
            node_name=node_name,
            restart_policy="Never",
            volumes=[volume],
            containers=[
                client.V1Container(
                    name="limited",
                    image=image,
                    command=["sh", "-c", show],
                    volume_mounts=mount,
                    resources=client.V1ResourceRequirements(
                        limits={"cpu": "1250m", "memory": "100Mi"}, requests={"memory": "50Mi"}
                    ),
                ),
                client.V1Container(name="free", image=image, command=["true"]),
            ],
        ),
    )
    kube.create_namespaced_pod(namespace, pod)
    assert_succeeded(finished(kube, namespace, "resvol"))
    cpu = parse_quantity(kube.read_node(node_name).status.allocatable["cpu"])
    lines = kube.read_namespaced_pod_log("resvol", namespace, container="limited").split()
    assert lines == ["2", "50", str(math.ceil(cpu * 1000))]


def test_container_mount_at_etc_hosts_is_left_alone(kube, namespace, node_name, image):
    """A container mounting its own /etc/hosts gets that file, not the kubelet-managed one (issue 22
    item 5); its sibling without such a mount still gets the managed file."""
    hosts = "192.0.2.77 mine.test\n"
    kube.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="hosts"), data={"hosts": hosts})
    )
    mount = client.V1VolumeMount(name="hosts", mount_path="/etc/hosts", sub_path="hosts")
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="ownhosts"),
        spec=client.V1PodSpec(
            node_name=node_name,
            restart_policy="Never",
            volumes=[client.V1Volume(name="hosts", config_map=client.V1ConfigMapVolumeSource(name="hosts"))],
            containers=[
                client.V1Container(
                    name="own", image=image, command=["cat", "/etc/hosts"], volume_mounts=[mount]
                ),
                client.V1Container(name="managed", image=image, command=["cat", "/etc/hosts"]),
            ],
        ),
    )
    kube.create_namespaced_pod(namespace, pod)
    assert_succeeded(finished(kube, namespace, "ownhosts"))
    assert kube.read_namespaced_pod_log("ownhosts", namespace, container="own") == hosts
    managed = kube.read_namespaced_pod_log("ownhosts", namespace, container="managed")
    assert "ownhosts" in managed and "mine.test" not in managed
