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
- a node gone silent (its agent hung): Ready Unknown after the grace period with upstream's reason, the
  unreachable taint, its pod evicted once its toleration runs out and replaced on the other node; Ready
  and untainted again once the agent answers;
- an overloaded API: a flood of slow requests through a FlowSchema of few seats is shed with 429s at
  every replica (and counted in apiserver_flowcontrol_rejected_requests_total) while the nodes' Leases
  renew and an admin is served;
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


@pytest.mark.parametrize(
    "name", ["proxy", "apiserver-1", "etcd-m2", f"{SECOND}/agent", f"{SECOND}/containerd"]
)
def test_a_killed_daemon_is_back_within_30_seconds(ha: HaStack, name: str) -> None:
    old = _supervised_pid(ha.state, name)
    os.kill(old, signal.SIGKILL)
    _back(ha.state, name, old)
    if name.startswith("apiserver"):
        url = f"https://127.0.0.2:{_port(ha)}/readyz"
        wait_for(lambda: _readyz(url) == 200, timeout=60, interval=0.5)
    if name.startswith("etcd"):
        wait_for(lambda: _member_healthy(ha.state, name), timeout=60, interval=0.5)
    if name.endswith(("agent", "containerd")):  # the node reports Ready on a runtime that answers
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


def _describe(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            parent = proc.parent()
            out.append(
                f"{pid} ppid={proc.ppid()} ({' '.join(parent.cmdline()[:4]) if parent else '-'}) "
                f"age={time.time() - proc.create_time():.0f}s status={proc.status()}"
            )
        except psutil.Error as err:
            out.append(f"{pid}: {err}")
    return out


def _component_pids(state: Path, component: str) -> list[int]:
    """The `pykubelet <component>` processes every API server of the stack supervises."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline[1:4] == ["-m", "pykubelet", component] and any(str(state) in arg for arg in cmdline):
            # The API servers' children only: the CSI driver's sidecars run `pykubelet controller-manager`
            # too, as a daemon of the stack's own.
            try:
                parent = proc.parent()
                if parent is not None and parent.cmdline()[1:4] == ["-m", "pykubelet", "server"]:
                    found.append(proc.pid)
            except psutil.Error:
                continue
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
    # One per API server; a child of a replica an earlier drill killed may still be on its way out (its
    # parent-death SIGTERM lets it shut down gracefully), so wait for the three.
    try:
        old = wait_for(
            lambda: len(p := _component_pids(ha.state, component)) == 3 and p,
            timeout=30,
            interval=0.5,
            what=f"one {component} per API server",
        )
    except AssertionError as err:  # say which processes there were when the wait ran out
        raise AssertionError(f"{err}: {_describe(_component_pids(ha.state, component))}") from None
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


GRACE = 50  # kube-controller-manager's --node-monitor-grace-period in 1.32
UNREACHABLE = "node.kubernetes.io/unreachable"


def _ready(node: client.V1Node) -> client.V1NodeCondition:
    return next(c for c in node.status.conditions if c.type == "Ready")


def _pods_of(core: client.CoreV1Api, selector: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod("default", label_selector=selector).items


def test_a_node_gone_silent_is_detected_tainted_and_its_pods_run_elsewhere(ha: HaStack) -> None:
    """The seeds' kill-a-node drill, as a hung or cut-off node: the second node's agent stopped (SIGSTOP
    of its process group; the supervisor restarts what dies, not what hangs). What stops: that node's
    status and Lease. What continues: the cluster, and the other node's pods. Who detects it: the node
    lifecycle controller, after the grace period: Ready Unknown with upstream's reason and message, the
    unreachable NoExecute taint. Recovery: the pod's toleration runs out, it is evicted and its
    Deployment's replacement runs on the healthy node; the agent back, the node is Ready and untainted."""
    core = ha.core
    apps = client.AppsV1Api(core.api_client)
    labels = {"drill": "node"}
    tolerate = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}
        for key in (UNREACHABLE, "node.kubernetes.io/not-ready")
    ]
    on_second = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [SECOND]}]
    }
    apps.create_namespaced_deployment(
        "default",
        {
            "metadata": {"name": "drill-node"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "tolerations": tolerate,
                        "affinity": {
                            "nodeAffinity": {
                                "preferredDuringSchedulingIgnoredDuringExecution": [
                                    {"weight": 100, "preference": on_second}
                                ]
                            }
                        },
                        "containers": [
                            {"name": "c", "image": "busybox:latest", "command": ["sleep", "3600"]}
                        ],
                    },
                },
            },
        },
    )
    (first,) = wait_for(
        lambda: [p for p in _pods_of(core, "drill=node") if p.status.phase == "Running"],
        timeout=120,
        interval=0.5,
        what="the drill's pod running",
    )
    assert first.spec.node_name == SECOND
    agent = StackRecord.load(ha.state / "nodes" / SECOND)
    assert agent is not None
    pgid = agent.pids["agent"]
    _signal_group(pgid, signal.SIGSTOP)
    silent = time.monotonic()
    try:
        node = wait_for(
            lambda: (n := core.read_node(SECOND)) and _ready(n).status == "Unknown" and n,
            timeout=GRACE + 40,
            interval=1,
            what=f"{SECOND} Ready=Unknown",
        )
        assert time.monotonic() - silent >= 0.75 * GRACE
        assert (_ready(node).reason, _ready(node).message) == (
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
        )
        assert _ready(core.read_node(FIRST)).status == "True"  # the other node goes on
        wait_for(
            lambda: any(t.key == UNREACHABLE and t.effect == "NoExecute" for t in core.read_node(SECOND).spec.taints or []),
            timeout=30,
            interval=0.5,
            what="the unreachable NoExecute taint",
        )  # fmt: skip
        replacement = wait_for(
            lambda: [
                p
                for p in _pods_of(core, "drill=node")
                if p.metadata.uid != first.metadata.uid and p.status.phase == "Running"
            ],
            timeout=60,
            interval=0.5,
            what="the replacement pod running",
        )
        assert [p.spec.node_name for p in replacement] == [FIRST]
    finally:
        _signal_group(pgid, signal.SIGCONT)
    wait_for(
        lambda: (n := core.read_node(SECOND)) and _ready(n).status == "True"
        and not any(t.key == UNREACHABLE for t in n.spec.taints or []),
        timeout=60,
        interval=0.5,
        what=f"{SECOND} Ready again and untainted",
    )  # fmt: skip
    apps.delete_namespaced_deployment("drill-node", "default", propagation_policy="Background")
    wait_for(lambda: not _pods_of(core, "drill=node"), timeout=60, interval=0.5, what="the drill's pods gone")


def test_an_overloaded_api_sheds_the_flood_and_keeps_serving_the_cluster(ha: HaStack) -> None:
    """The seeds' overload drill: a flood of slow requests from one user, at every API server, through a
    FlowSchema sending that user to a priority level of few seats and a short queue (APF, as the
    workload-low level is for any workload). What stops: most of the flood (429 with upstream's text).
    What continues: the nodes' Lease renewals and status (both stay Ready) and an admin's requests. Who
    detects it: apiserver_flowcontrol_rejected_requests_total on the replicas. Recovery: the flood ends,
    the flooder is served again."""
    import asyncio
    import uuid

    import aiohttp

    from kubeclient.config import load_kubeconfig

    tag = uuid.uuid4().hex[:6]
    level, schema, user = f"drill-low-{tag}", f"drill-flood-{tag}", f"drill-flooder-{tag}"
    fc = client.FlowcontrolApiserverV1Api(ha.core.api_client)
    fc.create_priority_level_configuration(
        {
            "metadata": {"name": level},
            "spec": {
                "type": "Limited",
                "limited": {
                    "nominalConcurrencyShares": 1,
                    "limitResponse": {
                        "type": "Queue",
                        "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 2},
                    },
                },
            },
        }
    )
    fc.create_flow_schema(
        {
            "metadata": {"name": schema},
            "spec": {
                "priorityLevelConfiguration": {"name": level},
                "matchingPrecedence": 50,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": user}}],
                        "resourceRules": [
                            {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"]}
                        ],
                    }
                ],
            },
        }
    )
    # The flooder may list ConfigMaps in default (a refusal would end each request before it holds a seat).
    rbac = client.RbacAuthorizationV1Api(ha.core.api_client)
    rbac.create_namespaced_role_binding(
        "default",
        {
            "metadata": {"name": schema},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )
    configs = [
        load_kubeconfig(ha.state / "apiserver" / sub / "admin.kubeconfig")
        for sub in ("", "replica-1", "replica-2")
    ]
    tls = {config.server: config.ssl_context() for config in configs}

    def applied() -> bool:  # every replica has the schema in its configuration and the binding
        async def check() -> bool:
            async with aiohttp.ClientSession() as session:
                for config in configs:
                    async with session.get(
                        f"{config.server}/api/v1/namespaces/default/configmaps",
                        headers={"Impersonate-User": user},
                        ssl=tls[config.server],
                    ) as resp:
                        if (
                            resp.status != 200
                            or resp.headers.get("X-Kubernetes-PF-PriorityLevel-UID") is None
                        ):
                            return False
                        level_uid = fc.read_priority_level_configuration(level).metadata.uid
                        if resp.headers["X-Kubernetes-PF-PriorityLevel-UID"] != level_uid:
                            return False
            return True

        return asyncio.run(check())

    wait_for(applied, timeout=60, interval=0.5, what="the drill's FlowSchema in force on every replica")
    renewed_before = {
        n: client.CoordinationV1Api(ha.core.api_client)
        .read_namespaced_lease(n, "kube-node-lease")
        .spec.renew_time
        for n in (FIRST, SECOND)
    }

    async def flood() -> tuple[list[int], list[int], str]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def slow(config) -> tuple[int, str]:
                # Waits the watch cache's 3 s for a resourceVersion from the future, holding its seat.
                async with session.get(
                    f"{config.server}/api/v1/namespaces/default/configmaps",
                    params={"resourceVersion": "999999999", "resourceVersionMatch": "NotOlderThan"},
                    headers={"Impersonate-User": user},
                    ssl=tls[config.server],
                ) as resp:
                    return resp.status, await resp.text()

            async def admin() -> list[int]:
                statuses = []
                for _ in range(10):
                    for config in configs:
                        async with session.get(
                            f"{config.server}/api/v1/nodes", ssl=tls[config.server]
                        ) as resp:
                            statuses.append(resp.status)
                    await asyncio.sleep(0.1)
                return statuses

            answers, admin_codes = await asyncio.gather(
                asyncio.gather(*(slow(configs[i % 3]) for i in range(60))), admin()
            )
            refused = next((text for code, text in answers if code == 429), "")
            return [code for code, _ in answers], admin_codes, refused

    try:
        codes, admin_codes, refused_text = asyncio.run(flood())
        assert codes.count(429) >= 30, codes  # a few seats and two queue places per replica
        assert set(codes) <= {429, 504}, codes  # the rest ran and waited out the cache, as upstream's
        assert refused_text == "Too many requests, please try again later.\n"
        assert set(admin_codes) == {200}
        rejected = 0.0
        for config in configs:

            async def scrape(config=config) -> str:
                async with aiohttp.ClientSession() as session:
                    async with session.get(f"{config.server}/metrics", ssl=tls[config.server]) as resp:
                        return await resp.text()

            for line in asyncio.run(scrape()).splitlines():
                if (
                    line.startswith("apiserver_flowcontrol_rejected_requests_total{")
                    and f'flow_schema="{schema}"' in line
                ):
                    rejected += float(line.rsplit(" ", 1)[1])
        assert rejected == codes.count(429)
        # The nodes kept renewing their Leases and stayed Ready.
        coord = client.CoordinationV1Api(ha.core.api_client)
        wait_for(
            lambda: all(
                coord.read_namespaced_lease(n, "kube-node-lease").spec.renew_time > renewed_before[n]
                for n in (FIRST, SECOND)
            ),
            timeout=30,
            interval=0.5,
            what="both nodes' Leases renewed",
        )
        assert all(_ready(ha.core.read_node(n)).status == "True" for n in (FIRST, SECOND))

        # The flood over, the flooder is served again.
        async def once() -> int:
            async with aiohttp.ClientSession() as session:
                async with session.get(
                    f"{configs[0].server}/api/v1/namespaces/default/configmaps",
                    headers={"Impersonate-User": user},
                    ssl=tls[configs[0].server],
                ) as resp:
                    return resp.status

        assert asyncio.run(once()) == 200
    finally:
        fc.delete_flow_schema(schema)
        fc.delete_priority_level_configuration(level)
        rbac.delete_namespaced_role_binding(schema, "default")
