"""Every check of the Pod Security Standards, on a pod's metadata and spec as JSON, with the reason and
detail upstream's pod-security-admission words for each violation.

A check belongs to the baseline or the restricted level and has one implementation per policy version
it changed at (`since`); evaluating a level at a version runs the implementations in force then, the
baseline checks first and then the restricted ones, each group in order of its ID (upstream's order, so
that the messages read the same). The restricted level includes the baseline checks except those a
restricted check replaces (restrictedVolumes replaces hostPathVolumes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from controlplane.apiserver.podsecurity.levels import BASELINE, PRIVILEGED, RESTRICTED, LevelVersion

Obj = dict[str, Any]
Violation = tuple[str, str]  # (forbidden reason, forbidden detail)
CheckFn = Callable[[Obj, Obj], Violation | None]

# The newest policy version any check changed at: `latest` and anything newer evaluate as this one.
MAX_MINOR = 32


def join_quote(items: list[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def pluralize(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _containers(spec: Obj) -> Iterator[Obj]:
    """Init containers, containers, then ephemeral containers, as upstream's visitor walks them."""
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or ():
            if isinstance(c, dict):
                yield c


def _sc(obj: Obj) -> Obj | None:
    sc = obj.get("securityContext")
    return sc if isinstance(sc, dict) else None


def _named(noun: str, names: list[str]) -> str:
    return f"{pluralize(noun, noun + 's', len(names))} {join_quote(names)}"


def _windows(spec: Obj) -> bool:
    return ((spec.get("os") or {}).get("name")) == "windows"


def _unless_windows(check: CheckFn) -> CheckFn:
    """The 1.25 form of a restricted check: Windows pods (spec.os.name) pass, as their runtime has no
    such setting."""

    def run(meta: Obj, spec: Obj) -> Violation | None:
        return None if _windows(spec) else check(meta, spec)

    return run


# --- baseline ---------------------------------------------------------------------------------------


def host_namespaces(meta: Obj, spec: Obj) -> Violation | None:
    found = [f"{f}=true" for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f) is True]
    return ("host namespaces", ", ".join(found)) if found else None


def privileged(meta: Obj, spec: Obj) -> Violation | None:
    bad = [c.get("name", "") for c in _containers(spec) if (_sc(c) or {}).get("privileged") is True]
    if bad:
        return "privileged", f"{_named('container', bad)} must not set securityContext.privileged=true"
    return None


_DEFAULT_CAPABILITIES = frozenset(
    (
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    )
)


def capabilities_baseline(meta: Obj, spec: Obj) -> Violation | None:
    bad: list[str] = []
    caps: set[str] = set()
    for c in _containers(spec):
        added = [a for a in ((_sc(c) or {}).get("capabilities") or {}).get("add") or () if isinstance(a, str)]
        extra = [a for a in added if a not in _DEFAULT_CAPABILITIES]
        if extra:
            bad.append(c.get("name", ""))
            caps.update(extra)
    if bad:
        return (
            "non-default capabilities",
            f"{_named('container', bad)} must not include {join_quote(sorted(caps))} in "
            "securityContext.capabilities.add",
        )
    return None


def host_path_volumes(meta: Obj, spec: Obj) -> Violation | None:
    bad = [v.get("name", "") for v in spec.get("volumes") or () if isinstance(v, dict) and v.get("hostPath")]
    return ("hostPath volumes", _named("volume", bad)) if bad else None


def host_ports(meta: Obj, spec: Obj) -> Violation | None:
    bad: list[str] = []
    ports: set[int] = set()
    for c in _containers(spec):
        used = [p.get("hostPort") for p in c.get("ports") or () if isinstance(p, dict) and p.get("hostPort")]
        if used:
            bad.append(c.get("name", ""))
            ports.update(int(p) for p in used)
    if bad:
        listed = sorted(str(p) for p in ports)  # upstream sorts them as strings
        return (
            "hostPort",
            f"{_named('container', bad)} {pluralize('uses', 'use', len(bad))} "
            f"{pluralize('hostPort', 'hostPorts', len(listed))} {', '.join(listed)}",
        )
    return None


_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def app_armor_profile(meta: Obj, spec: Obj) -> Violation | None:
    setters: list[str] = []
    values: set[str] = set()
    pod_profile = ((_sc(spec) or {}).get("appArmorProfile")) or None
    if isinstance(pod_profile, dict) and pod_profile.get("type") not in ("RuntimeDefault", "Localhost"):
        setters.append("pod")
        values.add(str(pod_profile.get("type") or ""))
    bad: list[str] = []
    for c in _containers(spec):
        profile = (_sc(c) or {}).get("appArmorProfile")
        if isinstance(profile, dict) and profile.get("type") not in ("RuntimeDefault", "Localhost"):
            bad.append(c.get("name", ""))
            values.add(str(profile.get("type") or ""))
    if bad:
        setters.append(_named("container", bad))
    annotations = sorted(
        f"{k}={_go_quote(v)}"
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(_APPARMOR_ANNOTATION)
        and not (not v or v == "runtime/default" or str(v).startswith("localhost/"))
    )
    value_list = sorted(values) + annotations
    if annotations:
        setters.append(pluralize("annotation", "annotations", len(annotations)))
    if setters:
        return (
            pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", len(value_list)),
            f"{' and '.join(setters)} must not set AppArmor profile type to {join_quote(value_list)}",
        )
    return None


_SELINUX_TYPES = frozenset(("", "container_t", "container_init_t", "container_kvm_t"))


def se_linux_options(meta: Obj, spec: Obj) -> Violation | None:
    bad_types: set[str] = set()
    state = {"user": False, "role": False}

    def valid(opts: Obj) -> bool:
        ok = True
        kind = opts.get("type") or ""
        if kind not in _SELINUX_TYPES:
            ok = False
            bad_types.add(kind)
        for f in ("user", "role"):
            if opts.get(f):
                ok = False
                state[f] = True
        return ok

    setters: list[str] = []
    pod_opts = (_sc(spec) or {}).get("seLinuxOptions")
    if isinstance(pod_opts, dict) and not valid(pod_opts):
        setters.append("pod")
    bad = []
    for c in _containers(spec):
        opts = (_sc(c) or {}).get("seLinuxOptions")
        if isinstance(opts, dict) and not valid(opts):
            bad.append(c.get("name", ""))
    if bad:
        setters.append(_named("container", bad))
    if not setters:
        return None
    data: list[str] = []
    if bad_types:  # upstream names user and role only beside a bad type
        data.append(f"{pluralize('type', 'types', len(bad_types))} {join_quote(sorted(bad_types))}")
        if state["user"]:
            data.append("user may not be set")
        if state["role"]:
            data.append("role may not be set")
    return (
        "seLinuxOptions",
        f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}",
    )


def proc_mount(meta: Obj, spec: Obj) -> Violation | None:
    bad: list[str] = []
    kinds: set[str] = set()
    for c in _containers(spec):
        mount = (_sc(c) or {}).get("procMount")
        if mount is not None and mount != "Default":
            bad.append(c.get("name", ""))
            kinds.add(str(mount))
    if bad:
        return (
            "procMount",
            f"{_named('container', bad)} must not set securityContext.procMount to {join_quote(sorted(kinds))}",
        )
    return None


_SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
_SECCOMP_CONTAINER_ANNOTATION = "container.seccomp.security.alpha.kubernetes.io/"


def _go_quote(value: Any) -> str:
    import json

    return json.dumps(str(value), ensure_ascii=False)


def seccomp_baseline_1_0(meta: Obj, spec: Obj) -> Violation | None:
    """Before 1.19 seccomp was set by annotations."""
    annotations = meta.get("annotations") or {}

    def ok(v: str) -> bool:
        return v in ("runtime/default", "docker/default") or v.startswith("localhost/")

    bad: set[str] = set()
    if _SECCOMP_POD_ANNOTATION in annotations and not ok(str(annotations[_SECCOMP_POD_ANNOTATION])):
        bad.add(f"{_SECCOMP_POD_ANNOTATION}={_go_quote(annotations[_SECCOMP_POD_ANNOTATION])}")
    for c in _containers(spec):
        key = _SECCOMP_CONTAINER_ANNOTATION + str(c.get("name", ""))
        if key in annotations and not ok(str(annotations[key])):
            bad.add(f"{key}={_go_quote(annotations[key])}")
    if bad:
        return (
            "seccompProfile",
            f"forbidden {pluralize('annotation', 'annotations', len(bad))} {', '.join(sorted(bad))}",
        )
    return None


def _seccomp_type(holder: Obj | None) -> tuple[bool, str]:
    profile = (holder or {}).get("seccompProfile")
    if not isinstance(profile, dict):
        return False, ""
    return True, str(profile.get("type") or "")


def _seccomp(spec: Obj, required: bool) -> Violation | None:
    setters: list[str] = []
    values: set[str] = set()
    pod_set, pod_type = _seccomp_type(_sc(spec))
    pod_ok = False
    if pod_set:
        if pod_type in ("RuntimeDefault", "Localhost"):
            pod_ok = True
        else:
            setters.append("pod")
            values.add(pod_type)
    explicit: list[str] = []
    implicit: list[str] = []
    for c in _containers(spec):
        is_set, kind = _seccomp_type(_sc(c))
        if is_set:
            if kind not in ("RuntimeDefault", "Localhost"):
                explicit.append(c.get("name", ""))
                values.add(kind)
        elif not pod_ok:
            implicit.append(c.get("name", ""))
    if explicit:
        setters.append(_named("container", explicit))
    if setters:
        return (
            "seccompProfile",
            f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to "
            f"{join_quote(sorted(values))}",
        )
    if required and implicit:
        return (
            "seccompProfile",
            f"pod or {_named('container', implicit)} must set securityContext.seccompProfile.type to "
            '"RuntimeDefault" or "Localhost"',
        )
    return None


def seccomp_baseline_1_19(meta: Obj, spec: Obj) -> Violation | None:
    return _seccomp(spec, required=False)


def seccomp_restricted(meta: Obj, spec: Obj) -> Violation | None:
    return _seccomp(spec, required=True)


_SYSCTLS_1_0 = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
)
_SYSCTLS_1_27 = (*_SYSCTLS_1_0, "net.ipv4.ip_local_reserved_ports")
_SYSCTLS_1_29 = (
    *_SYSCTLS_1_27,
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
)
_SYSCTLS_1_32 = (*_SYSCTLS_1_29, "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")


def sysctls(allowed: tuple[str, ...]) -> CheckFn:
    safe = frozenset(allowed)

    def run(meta: Obj, spec: Obj) -> Violation | None:
        bad = [
            str(s.get("name", ""))
            for s in (_sc(spec) or {}).get("sysctls") or ()
            if isinstance(s, dict) and s.get("name") not in safe
        ]
        return ("forbidden sysctls", ", ".join(bad)) if bad else None

    return run


def windows_host_process(meta: Obj, spec: Obj) -> Violation | None:
    def host_process(holder: Obj | None) -> bool:
        return ((holder or {}).get("windowsOptions") or {}).get("hostProcess") is True

    setters = ["pod"] if host_process(_sc(spec)) else []
    bad = [c.get("name", "") for c in _containers(spec) if host_process(_sc(c))]
    if bad:
        setters.append(_named("container", bad))
    if setters:
        return (
            "hostProcess",
            f"{' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true",
        )
    return None


# --- restricted -------------------------------------------------------------------------------------


def allow_privilege_escalation(meta: Obj, spec: Obj) -> Violation | None:
    bad = [
        c.get("name", "")
        for c in _containers(spec)
        if (_sc(c) or {}).get("allowPrivilegeEscalation") is not False
    ]
    if bad:
        return (
            "allowPrivilegeEscalation != false",
            f"{_named('container', bad)} must set securityContext.allowPrivilegeEscalation=false",
        )
    return None


def capabilities_restricted(meta: Obj, spec: Obj) -> Violation | None:
    missing_drop: list[str] = []
    adding: list[str] = []
    caps: set[str] = set()
    for c in _containers(spec):
        capabilities = (_sc(c) or {}).get("capabilities")
        if not isinstance(capabilities, dict):
            missing_drop.append(c.get("name", ""))
            continue
        if "ALL" not in (capabilities.get("drop") or ()):
            missing_drop.append(c.get("name", ""))
        forbidden = [a for a in capabilities.get("add") or () if a != "NET_BIND_SERVICE"]
        if forbidden:
            adding.append(c.get("name", ""))
            caps.update(str(a) for a in forbidden)
    details = []
    if missing_drop:
        details.append(
            f'{_named("container", missing_drop)} must set securityContext.capabilities.drop=["ALL"]'
        )
    if adding:
        details.append(
            f"{_named('container', adding)} must not include {join_quote(sorted(caps))} in "
            "securityContext.capabilities.add"
        )
    return ("unrestricted capabilities", "; ".join(details)) if details else None


_ALLOWED_VOLUMES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
# The inline sources upstream names, in the order it tests them; anything else is "unknown".
_RESTRICTED_VOLUMES = (
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
)


def restricted_volumes(meta: Obj, spec: Obj) -> Violation | None:
    bad: list[str] = []
    kinds: set[str] = set()
    for v in spec.get("volumes") or ():
        if not isinstance(v, dict) or any(v.get(k) is not None for k in _ALLOWED_VOLUMES):
            continue
        bad.append(str(v.get("name", "")))
        kinds.add(next((k for k in _RESTRICTED_VOLUMES if v.get(k) is not None), "unknown"))
    if bad:
        return (
            "restricted volume types",
            f"{_named('volume', bad)} {pluralize('uses', 'use', len(bad))} "
            f"{pluralize('restricted volume type', 'restricted volume types', len(kinds))} "
            f"{join_quote(sorted(kinds))}",
        )
    return None


def run_as_non_root(meta: Obj, spec: Obj) -> Violation | None:
    setters: list[str] = []
    pod_value = (_sc(spec) or {}).get("runAsNonRoot")
    if pod_value is False:
        setters.append("pod")
    explicit: list[str] = []
    implicit: list[str] = []
    for c in _containers(spec):
        value = (_sc(c) or {}).get("runAsNonRoot")
        if value is not None:
            if value is False:
                explicit.append(c.get("name", ""))
        elif pod_value is not True:
            implicit.append(c.get("name", ""))
    if explicit:
        setters.append(_named("container", explicit))
    if setters:
        return (
            "runAsNonRoot != true",
            f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false",
        )
    if implicit:
        return (
            "runAsNonRoot != true",
            f"pod or {_named('container', implicit)} must set securityContext.runAsNonRoot=true",
        )
    return None


def run_as_user(meta: Obj, spec: Obj) -> Violation | None:
    setters = ["pod"] if (_sc(spec) or {}).get("runAsUser") == 0 else []
    bad = [c.get("name", "") for c in _containers(spec) if (_sc(c) or {}).get("runAsUser") == 0]
    if bad:
        setters.append(_named("container", bad))
    return ("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


# --- the table --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    id: str
    level: str
    versions: tuple[tuple[int, CheckFn], ...]  # (since minor, implementation), oldest first
    overrides: tuple[str, ...] = ()

    def at(self, minor: int) -> CheckFn | None:
        found = None
        for since, fn in self.versions:
            if since <= minor:
                found = fn
        return found


CHECKS: tuple[Check, ...] = (
    Check("appArmorProfile", BASELINE, ((0, app_armor_profile),)),
    Check("capabilities_baseline", BASELINE, ((0, capabilities_baseline),)),
    Check("hostNamespaces", BASELINE, ((0, host_namespaces),)),
    Check("hostPathVolumes", BASELINE, ((0, host_path_volumes),)),
    Check("hostPorts", BASELINE, ((0, host_ports),)),
    Check("privileged", BASELINE, ((0, privileged),)),
    Check("procMount", BASELINE, ((0, proc_mount),)),
    Check("seLinuxOptions", BASELINE, ((0, se_linux_options),)),
    Check("seccompProfile_baseline", BASELINE, ((0, seccomp_baseline_1_0), (19, seccomp_baseline_1_19))),
    Check(
        "sysctls",
        BASELINE,
        (
            (0, sysctls(_SYSCTLS_1_0)),
            (27, sysctls(_SYSCTLS_1_27)),
            (29, sysctls(_SYSCTLS_1_29)),
            (32, sysctls(_SYSCTLS_1_32)),
        ),
    ),
    Check("windowsHostProcess", BASELINE, ((0, windows_host_process),)),
    Check(
        "allowPrivilegeEscalation",
        RESTRICTED,
        ((8, allow_privilege_escalation), (25, _unless_windows(allow_privilege_escalation))),
    ),
    Check(
        "capabilities_restricted",
        RESTRICTED,
        ((22, capabilities_restricted), (25, _unless_windows(capabilities_restricted))),
    ),
    Check("restrictedVolumes", RESTRICTED, ((0, restricted_volumes),), overrides=("hostPathVolumes",)),
    Check("runAsNonRoot", RESTRICTED, ((0, run_as_non_root),)),
    Check("runAsUser", RESTRICTED, ((23, run_as_user),)),
    Check(
        "seccompProfile_restricted",
        RESTRICTED,
        ((19, seccomp_restricted), (25, _unless_windows(seccomp_restricted))),
    ),
)

# Upstream's order: baseline checks by ID, then restricted ones by ID (byte order, as Go sorts).
ORDERED = tuple(
    sorted((c for c in CHECKS if c.level == BASELINE), key=lambda c: c.id)
    + sorted((c for c in CHECKS if c.level == RESTRICTED), key=lambda c: c.id)
)


def _plan(level: str, minor: int) -> tuple[CheckFn, ...]:
    chosen = [c for c in ORDERED if c.level == BASELINE or level == RESTRICTED]
    active = [(c, c.at(minor)) for c in chosen]
    overridden = {o for c, fn in active if fn is not None for o in c.overrides}
    return tuple(fn for c, fn in active if fn is not None and c.id not in overridden)


_PLANS = {
    (level, minor): _plan(level, minor) for level in (BASELINE, RESTRICTED) for minor in range(MAX_MINOR + 1)
}


def evaluate(lv: LevelVersion, meta: Obj, spec: Obj) -> list[Violation]:
    """The violations of the pod (its metadata and spec) against the level at the version."""
    if lv.level == PRIVILEGED:
        return []
    minor = MAX_MINOR if lv.version.minor is None else min(lv.version.minor, MAX_MINOR)
    out = []
    for fn in _PLANS[(lv.level, minor)]:
        found = fn(meta, spec)
        if found is not None:
            out.append(found)
    return out


def forbidden_detail(violations: list[Violation]) -> str:
    """`reason (detail), reason (detail)`: the text of the refusal and of the warning."""
    return ", ".join(f"{r} ({d})" if d else r for r, d in violations)


def forbidden_reason(violations: list[Violation]) -> str:
    """The reasons alone: what the namespace relabel's dry run lists per pod."""
    return ", ".join(r for r, _ in violations)
