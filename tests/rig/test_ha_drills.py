"""The failure drills on the highly available cluster they are about: `pykubelet up --nodes 2 --store etcd
--etcd-members 3 --apiservers 3` with the node IPAM (no --pod-cidr), one stack for the file, real
processes throughout:

- it starts, and both nodes are Ready, each with a pod CIDR the IPAM gave it;
- every API server stops answering (SIGSTOP of each one's process group): a container whose process is
  killed is restarted by its node all the same (nothing of the pod sync waits on the API) and its
  readiness probe runs; once the API servers answer again the Pod in the API shows the restart
  (restartCount 1, the new container's ID) within 10 s;
- the daemons `up` started are supervised: a killed service proxy, API server, etcd member and node
  agent are back within 30 s by themselves, and `pykubelet restart dns` restarts the DNS on purpose;
- every scheduler or every controller manager killed: the work waiting for them (a Pending pod, a new
  ReplicaSet's pod) is done once their API servers have started them again and one is leader;
- a validating webhook that hangs (failurePolicy Fail) blocks the writes it matches through every
  replica with upstream's 500, and nothing else, until its policy is Ignore;
- the ReplicaSet controller's RBAC binding deleted: a new ReplicaSet gets no pod (the controller
  manager's log has the 403), and its pod once the binding is back;
- `pykubelet down` stops the supervisor with the rest and leaves nothing."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from kubernetes import client
from kubernetes import config as kconfig
from kubernetes.client.rest import ApiException

from e2e.waiting import wait_for
from pykubelet.rig.netlease import lease_cluster_network
from pykubelet.rig.process import pid_alive
from pykubelet.rig.stack import StackRecord
from pykubelet.rig.supervisor import load
from tests.concurrentcreates import create_at_once
from tests.rig.stacks import run_pykubelet as _pykubelet
from tests.rig.stacks import up_cluster

pytestmark = pytest.mark.integration
FIRST = "hd"
SECOND = f"{FIRST}-2"
APISERVERS = ("apiserver", "apiserver-1", "apiserver-2")
MARKER = "pykube-drill-crash"


@dataclass
class HaStack:
    state: Path
    core: client.CoreV1Api
    cluster_cidr: str

    def record(self) -> StackRecord:
        record = StackRecord.load(self.state)
        assert record is not None
        return record


@pytest.fixture(scope="module")
def ha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HaStack]:
    state = tmp_path_factory.mktemp("hd") / "s"  # short: containerd's socket paths are limited
    with lease_cluster_network("d") as lease:
        up, scope, _ = up_cluster(
            state, lease, FIRST, 2, "--store", "etcd", "--etcd-members", "3", "--apiservers", "3", timeout=600
        )
        record = StackRecord.load(state)
        try:
            assert up.returncode == 0, up.stderr[-4000:]
            kubeconfig = state / "apiserver" / "admin.kubeconfig"
            core = client.CoreV1Api(kconfig.new_client_from_config(config_file=str(kubeconfig)))
            yield HaStack(state, core, lease.pod_cidr)
        finally:
            for name in APISERVERS:  # a drill that failed half-way must not leave one stopped
                if record is not None and name in record.pids:
                    _signal_group(record.pids[name], signal.SIGCONT)
            record = StackRecord.load(state) or record
            down = _pykubelet("down", "--state-dir", str(state), timeout=300)
        assert down.returncode == 0, down.stderr[-4000:]
        assert record is not None and not [p for p in record.pids.values() if _still_of(p, state)]
        assert scope.leaked() == {}


def _still_of(pid: int, state: Path) -> bool:
    """Whether the recorded `pid` is alive and still one of the stack's processes (its command names
    the state dir): under this load the kernel's pids wrap, and a new process may hold an old number."""
    if not pid_alive(pid):
        return False
    try:
        return str(state) in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def test_two_nodes_three_etcd_members_three_api_servers_start_with_the_node_ipam(ha: HaStack) -> None:
    import ipaddress

    record = ha.record()
    assert {"etcd-m0", "etcd-m1", "etcd-m2", *APISERVERS, "supervisor"} <= set(record.pids)
    cluster = ipaddress.ip_network(ha.cluster_cidr)
    for name in (FIRST, SECOND):
        node = ha.core.read_node(name)
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
        assert ipaddress.ip_network(node.spec.pod_cidr).subnet_of(cluster)


def _crasher(node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "crasher"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:latest",
                    "command": ["sh", "-c", f": {MARKER}; while true; do sleep 5; done"],
                    # Each probe leaves a line in the container: seen from the host, it shows the probes
                    # going on while no API server answers.
                    "readinessProbe": {
                        "exec": {"command": ["sh", "-c", "date +%s >> /tmp/probed"]},
                        "periodSeconds": 1,
                    },
                }
            ],
        },
    }


def _crasher_pids() -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(MARKER in arg for arg in cmdline) and cmdline[:1] == ["sh"]:
            found.append(proc.pid)
    return found


def _container(core: client.CoreV1Api) -> client.V1ContainerStatus | None:
    statuses = core.read_namespaced_pod("crasher", "default").status.container_statuses
    return statuses[0] if statuses else None


def test_a_container_crashing_while_every_api_server_is_stopped_is_restarted_and_reported(
    ha: HaStack,
) -> None:
    core = ha.core
    core.create_namespaced_pod("default", _crasher(SECOND))
    first = wait_for(
        lambda: (s := _container(core)) is not None and s.state.running is not None and s,
        timeout=120,
        interval=0.5,
    )
    (old_pid,) = wait_for(lambda: len(p := _crasher_pids()) == 1 and p, timeout=30)
    record = ha.record()
    for name in APISERVERS:
        _signal_group(record.pids[name], signal.SIGSTOP)
    try:
        os.kill(old_pid, signal.SIGKILL)
        # The node restarts it while no API server answers (the first restart has no back-off).
        (new_pid,) = wait_for(
            lambda: len(p := [q for q in _crasher_pids() if q != old_pid]) == 1 and p,
            timeout=60,
            interval=0.5,
        )
        assert not pid_alive(old_pid)
        # The new container's readiness probe runs, still without the API.
        probed = Path(f"/proc/{new_pid}/root/tmp/probed")
        wait_for(lambda: probed.exists() and len(probed.read_text().split()) >= 3, timeout=30, interval=0.5)
    finally:
        for name in APISERVERS:
            _signal_group(record.pids[name], signal.SIGCONT)
    returned = time.monotonic()

    def reported() -> bool:
        got = _container(core)
        return (
            got is not None
            and got.restart_count == 1
            and got.state.running is not None
            and got.container_id != first.container_id
        )

    wait_for(reported, timeout=60, interval=0.2, retrying=(ApiException,))
    took = time.monotonic() - returned
    assert took <= 10, f"restartCount in the API {took:.1f} s after the API servers returned"
    assert _crasher_pids() == [new_pid]
    core.delete_namespaced_pod("crasher", "default", grace_period_seconds=0)


def _supervised_pid(state: Path, name: str) -> int:
    (daemon,) = [d for d in load(state) if d.name == name]
    return daemon.pid


def _back(state: Path, name: str, old: int) -> int:
    """The daemon's new pid, alive, in the supervisor's file and in the record down reads."""

    def new_pid() -> int | None:
        pid = _supervised_pid(state, name)
        if pid == old or not pid_alive(pid):
            return None
        record_dir = state / "nodes" / name.split("/")[0] if "/" in name else state
        recorded = StackRecord.load(record_dir)
        return pid if recorded is not None and recorded.pids.get(name.rsplit("/", 1)[-1]) == pid else None

    return wait_for(new_pid, timeout=30, interval=0.2, what=f"{name} back")


@pytest.mark.parametrize("name", ["proxy", "apiserver-1", "etcd-m2", f"{SECOND}/agent"])
def test_a_killed_daemon_is_back_within_30_seconds(ha: HaStack, name: str) -> None:
    old = _supervised_pid(ha.state, name)
    os.kill(old, signal.SIGKILL)
    _back(ha.state, name, old)
    if name.startswith("apiserver"):
        url = f"https://127.0.0.2:{_port(ha)}/readyz"
        wait_for(lambda: _readyz(url) == 200, timeout=60, interval=0.5)
    if name.startswith("etcd"):
        wait_for(lambda: _member_healthy(ha.state, name), timeout=60, interval=0.5)
    if name.endswith("agent"):
        wait_for(
            lambda: any(
                c.type == "Ready" and c.status == "True" for c in ha.core.read_node(SECOND).status.conditions
            ),
            timeout=60,
            interval=0.5,
        )


def _member_healthy(state: Path, name: str) -> bool:
    """`etcdctl endpoint health` of the member, with the API server's client certificate."""
    import subprocess

    (daemon,) = [d for d in load(state) if d.name == name]
    url = daemon.argv[daemon.argv.index("--listen-client-urls") + 1]
    pki = state / "etcd" / "pki"
    health = subprocess.run(
        ["etcdctl", "--endpoints", url, "--cacert", str(pki / "ca.crt"), "--cert",
         str(pki / "apiserver-etcd-client.crt"), "--key", str(pki / "apiserver-etcd-client.key"), "endpoint", "health"],
        capture_output=True, text=True, timeout=30, check=False, env={**os.environ, "ETCDCTL_API": "3"},
    )  # fmt: skip
    return health.returncode == 0


def _port(ha: HaStack) -> int:
    return int(ha.core.api_client.configuration.host.rsplit(":", 1)[1])


def _readyz(url: str) -> int:
    import ssl
    import urllib.error
    import urllib.request

    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=context, timeout=3) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def test_restart_restarts_one_daemon_on_purpose(ha: HaStack) -> None:
    old = _supervised_pid(ha.state, "dns")
    restarted = _pykubelet("restart", "dns", "--state-dir", str(ha.state), timeout=120)
    assert restarted.returncode == 0, restarted.stderr
    assert "dns restarted" in restarted.stderr
    _back(ha.state, "dns", old)
    unknown = _pykubelet("restart", "nope", "--state-dir", str(ha.state), timeout=60)
    assert unknown.returncode == 1 and "unknown component 'nope'" in unknown.stderr


def test_fifty_concurrent_creates_through_three_api_servers_never_exceed_a_quota(ha: HaStack) -> None:
    """The quota's charge is a compare-and-swap on the quota's revision in etcd, so replicas that each
    serialise only their own requests still admit exactly what fits: 50 ConfigMaps created at once,
    spread over the three API servers, against count/configmaps 11 (kube-root-ca.crt holds one)."""
    ns = "quota-drill"
    core = ha.core
    core.create_namespace({"metadata": {"name": ns}})
    wait_for(
        lambda: core.read_namespaced_config_map("kube-root-ca.crt", ns), timeout=60, retrying=(ApiException,)
    )
    quota = {"metadata": {"name": "q"}, "spec": {"hard": {"count/configmaps": "11"}}}
    core.create_namespaced_resource_quota(ns, quota)

    def used() -> dict:
        status = core.read_namespaced_resource_quota("q", ns).status
        return dict((status.used if status else None) or {})

    wait_for(lambda: used() == {"count/configmaps": "1"}, timeout=60)
    replicas = [
        ha.state / "apiserver",
        ha.state / "apiserver" / "replica-1",
        ha.state / "apiserver" / "replica-2",
    ]
    codes = create_at_once(
        [
            kconfig.new_client_from_config(config_file=str(replicas[i % 3] / "admin.kubeconfig"))
            for i in range(50)
        ],
        lambda api, i: client.CoreV1Api(api).create_namespaced_config_map(
            ns, {"metadata": {"name": f"c{i}"}}
        ),
        "exceeded quota: q",
    )
    assert codes.count(201) == 10 and codes.count(403) == 40, codes
    assert len(core.list_namespaced_config_map(ns).items) == 11
    assert used() == {"count/configmaps": "11"}
    core.delete_namespace(ns)


def _component_pids(state: Path, component: str) -> list[int]:
    """The `pykubelet <component>` processes every API server of the stack supervises."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline[1:4] == ["-m", "pykubelet", component] and any(str(state) in arg for arg in cmdline):
            found.append(proc.pid)
    return sorted(found)


@pytest.mark.parametrize("component", ["scheduler", "controller-manager"])
def test_killed_schedulers_or_controller_managers_come_back_and_the_work_waiting_for_them_is_done(
    ha: HaStack, component: str
) -> None:
    """The seeds' drill, on all three replicas at once: while no scheduler (controller manager) runs,
    a new pod stays Pending (a new ReplicaSet gets no pod) and everything running runs on; each API
    server detects its child's exit and starts it again (as the kubelet restarts kubeadm's static pods),
    the new ones elect a leader once the dead leader's lease runs out, and the waiting work is done."""
    core = ha.core
    apps = client.AppsV1Api(core.api_client)
    old = _component_pids(ha.state, component)
    assert len(old) == 3, old
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    sleeper = {"name": "c", "image": "busybox:latest", "command": ["sleep", "3600"]}
    name = f"drill-{component}"
    if component == "scheduler":
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": name},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [sleeper]},
            },
        )
    else:
        labels = {"drill": component}
        apps.create_namespaced_replica_set(
            "default",
            {
                "metadata": {"name": name},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"terminationGracePeriodSeconds": 0, "containers": [sleeper]},
                    },
                },
            },
        )
    wait_for(
        lambda: len(new := [p for p in _component_pids(ha.state, component) if p not in old]) == 3 and new,
        timeout=30,
        interval=0.5,
        what=f"three new {component} processes",
    )
    try:
        if component == "scheduler":
            # Leader election: the killed leader's lease (15 s) runs out, a new one schedules.
            wait_for(
                lambda: core.read_namespaced_pod(name, "default").spec.node_name, timeout=60, interval=0.5
            )
        else:
            wait_for(
                lambda: core.list_namespaced_pod("default", label_selector=f"drill={component}").items,
                timeout=60,
                interval=0.5,
            )
    finally:
        if component == "scheduler":
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        else:
            apps.delete_namespaced_replica_set(name, "default", propagation_policy="Background")


class _Silent:
    """A TCP port that accepts connections and never answers: a webhook that hangs."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()


def test_a_hanging_webhook_blocks_through_every_replica_until_its_failure_policy_is_ignore(
    ha: HaStack,
) -> None:
    """The seeds' blocked-webhook drill: a validating webhook whose server accepts and never answers,
    failurePolicy Fail, 1 s timeout. Every replica refuses the writes it matches with upstream's 500
    (`failed calling webhook ...: context deadline exceeded`) and nothing else; the configuration
    changed to Ignore (through one replica) lets them through on all three."""
    core = ha.core
    adm = client.AdmissionregistrationV1Api(core.api_client)
    ns = "webhook-drill"
    core.create_namespace({"metadata": {"name": ns, "labels": {"drill": "webhook"}}})
    silent = _Silent()
    url = f"https://127.0.0.1:{silent.port}/validate"
    hook_name = "blocker.drill.pykubelet.io"
    config = {
        "metadata": {"name": "drill-blocker"},
        "webhooks": [
            {
                "name": hook_name,
                "clientConfig": {"url": url},
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["configmaps"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"drill": "webhook"}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 1,
            }
        ],
    }
    replicas = [
        client.CoreV1Api(kconfig.new_client_from_config(config_file=str(d / "admin.kubeconfig")))
        for d in (
            ha.state / "apiserver",
            ha.state / "apiserver" / "replica-1",
            ha.state / "apiserver" / "replica-2",
        )
    ]
    adm.create_validating_webhook_configuration(config)
    expected = (
        f'Internal error occurred: failed calling webhook "{hook_name}": failed to call webhook: '
        f'Post "{url}?timeout=1s": context deadline exceeded'
    )
    try:
        for i, replica in enumerate(replicas):

            def refused(replica: client.CoreV1Api = replica, i: int = i) -> bool:
                try:
                    replica.create_namespaced_config_map(ns, {"metadata": {"name": f"blocked-{i}"}})
                except ApiException as err:
                    body = json.loads(err.body)
                    assert (err.status, body["reason"], body["message"]) == (500, "InternalError", expected)
                    return True
                replica.delete_namespaced_config_map(f"blocked-{i}", ns)  # its cache had no hook yet
                return False

            wait_for(refused, timeout=30, interval=0.5, what=f"replica {i} calling the hanging webhook")
            replica.create_namespaced_config_map("default", {"metadata": {"name": f"unmatched-{i}"}})
        adm.patch_validating_webhook_configuration(
            "drill-blocker", [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]
        )
        for i, replica in enumerate(replicas):
            wait_for(
                lambda r=replica, i=i: r.create_namespaced_config_map(
                    ns, {"metadata": {"name": f"through-{i}"}}
                ),
                timeout=30,
                interval=0.5,
                retrying=(ApiException,),
            )
    finally:
        adm.delete_validating_webhook_configuration("drill-blocker")
        silent.close()
        core.delete_namespace(ns)
        for i in range(3):
            core.delete_namespaced_config_map(f"unmatched-{i}", "default")


def test_a_controller_whose_rbac_binding_is_gone_stops_and_resumes_when_it_is_back(ha: HaStack) -> None:
    """The seeds' broken-RBAC drill: the ReplicaSet controller's ClusterRoleBinding deleted (the
    controller manager writes as each controller's service account, as kubeadm runs it). A new ReplicaSet
    gets no pod, and everything else goes on. Who detects it: the controller manager's log carries the
    API's 403 (upstream's text); no Event says so, as upstream's controller records its events with the
    same forbidden identity. The binding put back, the controller's next retry creates the pod."""
    core = ha.core
    rbac = client.RbacAuthorizationV1Api(core.api_client)
    apps = client.AppsV1Api(core.api_client)
    binding_name = "system:controller:replicaset-controller"
    saved = core.api_client.sanitize_for_serialization(rbac.read_cluster_role_binding(binding_name))
    rbac.delete_cluster_role_binding(binding_name)
    name, labels = "drill-rbac", {"drill": "rbac"}
    sleeper = {"name": "c", "image": "busybox:latest", "command": ["sleep", "3600"]}
    forbidden = (
        'pods is forbidden: User "system:serviceaccount:kube-system:replicaset-controller" '
        'cannot create resource "pods" in API group "" in the namespace "default"'
    )
    logs = sorted(ha.state.glob("apiserver/**/controller-manager.log"))
    assert len(logs) == 3, logs
    try:
        apps.create_namespaced_replica_set(
            "default",
            {
                "metadata": {"name": name},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"terminationGracePeriodSeconds": 0, "containers": [sleeper]},
                    },
                },
            },
        )
        wait_for(
            lambda: any(f"default/{name}" in line and forbidden in line
                        for log in logs for line in log.read_text(errors="replace").splitlines()),
            timeout=60,
            interval=0.5,
            what="the controller manager logging the 403",
        )  # fmt: skip
        assert not core.list_namespaced_pod("default", label_selector="drill=rbac").items
        core.create_namespaced_config_map("default", {"metadata": {"name": "drill-rbac-unaffected"}})
        core.delete_namespaced_config_map("drill-rbac-unaffected", "default")
    finally:
        for field in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
            saved["metadata"].pop(field, None)
        rbac.create_cluster_role_binding(saved)
    wait_for(
        lambda: core.list_namespaced_pod("default", label_selector="drill=rbac").items,
        timeout=60,
        interval=0.5,
        what="the ReplicaSet's pod once the binding is back",
    )
    apps.delete_namespaced_replica_set(name, "default", propagation_policy="Background")
