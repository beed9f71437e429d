"""The shared flag layer against upstream's pflag syntax, on a parser of its own and on every command's
real parser: booleans in all of pflag's forms, Go durations, klog's -v, StringSlice lists, unknown and
unsupported flags refused by name with exit 2, help text with defaults."""

from __future__ import annotations

import argparse

import pytest

from kubeclient.duration import format_go_duration, parse_go_duration
from kubeclient.flags import FlagParser, StringSlice, go_duration
from pykubelet.cli import SUBCOMMANDS, command_parser


def sample() -> FlagParser:
    parser = FlagParser(prog="sample")
    parser.add_argument("--on", action="store_true", default=True, help="a flag on by default")
    parser.add_argument("--off", action="store_true", help="a flag off by default")
    parser.add_argument("--ttl", type=go_duration, default="1h0m0s", help="a duration")
    parser.add_argument("--plugins", action=StringSlice, default=["A"], help="a list")
    parser.add_argument("rest", nargs="*", help="positionals")
    parser.add_unsupported("--profiling", reason="no profiler")
    return parser


@pytest.mark.parametrize(
    ("argv", "on", "off"),
    [
        ([], True, False),
        (["--off"], True, True),
        (["--on=false"], False, False),
        (["--on=False", "--off=true"], False, True),
        (["--on=0", "--off=1"], False, True),
        (["--on=f", "--off=T"], False, True),
        (["--on=FALSE", "--off=TRUE"], False, True),
        (["--off", "--off=false"], True, False),  # the last one wins
    ],
)
def test_go_booleans(argv: list[str], on: bool, off: bool) -> None:
    args = sample().parse_args(argv)
    assert (args.on, args.off) == (on, off)


def test_a_bare_boolean_never_takes_the_next_word() -> None:
    """pflag: `--on false` sets --on and leaves `false` as an argument."""
    args = sample().parse_args(["--on", "false"])
    assert args.on is True
    assert args.rest == ["false"]


@pytest.mark.parametrize("value", ["maybe", "yes", "", "2"])
def test_a_bad_boolean_is_refused_with_parsebools_words(value: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        sample().parse_args([f"--on={value}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--on" in err
    assert f'strconv.ParseBool: parsing "{value}": invalid syntax' in err


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("1h30m", 5400), ("500ms", 0.5), ("1h", 3600), ("0", 0), ("1.5m", 90), ("2h45m30s", 9930)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)
    assert sample().parse_args(["--ttl", text]).ttl == pytest.approx(seconds)
    assert sample().parse_args([f"--ttl={text}"]).ttl == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1x", 'time: unknown unit "x" in duration "1x"'),
        ("90", 'time: missing unit in duration "90"'),
        ("abc", 'time: invalid duration "abc"'),
    ],
)
def test_bad_durations_are_refused_with_gos_message(
    text: str, message: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exit_:
        sample().parse_args(["--ttl", text])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--ttl" in err and message in err


def test_go_duration_strings() -> None:
    assert [format_go_duration(s) for s in (3600, 90, 0.5, 0, 15, 300)] == [
        "1h0m0s",
        "1m30s",
        "500ms",
        "0s",
        "15s",
        "5m0s",
    ]


def test_lists_repeated_or_comma_separated() -> None:
    assert sample().parse_args([]).plugins == ["A"]
    assert sample().parse_args(["--plugins=B,C"]).plugins == ["B", "C"]
    assert sample().parse_args(["--plugins", "B", "--plugins", "C,D"]).plugins == ["B", "C", "D"]


def test_unknown_flag_and_abbreviation_refused_by_name(capsys: pytest.CaptureFixture) -> None:
    for argv, name in ((["--nope=1"], "--nope"), (["--pl", "X"], "--pl")):
        with pytest.raises(SystemExit) as exit_:
            sample().parse_args(argv)
        assert exit_.value.code == 2
        assert f"unknown flag: {name}" in capsys.readouterr().err


def test_unsupported_flag_refused_with_its_reason(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        sample().parse_args(["--profiling=true"])
    assert exit_.value.code == 2
    assert "flag --profiling is not supported by pykubelet: no profiler" in capsys.readouterr().err


def test_help_shows_defaults_as_pflag_does() -> None:
    text = sample().format_help()
    assert "a flag on by default (default true)" in text
    assert "a duration (default 1h0m0s)" in text
    assert "a list (default [A])" in text
    assert "a flag off by default\n" in text  # pflag shows no zero default


def test_a_flag_without_help_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="--bare has no help text"):
        FlagParser(prog="x").add_argument("--bare")


def test_changed_records_the_flags_given() -> None:
    args = sample().parse_args(["--ttl=1s", "--off"])
    assert {"ttl", "off"} <= args._changed and "on" not in args._changed


# --- every command ----------------------------------------------------------------------------------

COMMANDS = [name for name in SUBCOMMANDS if name not in ("version", "completion")]
LOGGING = ["agent", "server", "scheduler", "controller-manager", "proxy", "dns", "metrics-server"]


def parse(command: str, *argv: str) -> argparse.Namespace:
    _, parser = command_parser(command)
    required = {"server": ["--data-dir", "/tmp/x"], "join": ["https://h:6443", "--token", "a.b"]}
    required.update({"trace": ["pod/x"], "diagnose": ["pod/x"], "token": ["list"]})
    required["migrate-store"] = ["--from", "sqlite:/x", "--to", "etcd:https://h:2379"]
    required.update({"restart": ["proxy"], "etcd-snapshot": ["list"]})
    return parser.parse_args([*required.get(command, []), *argv])


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_of_every_command_has_help(command: str) -> None:
    _, parser = command_parser(command)
    for action in parser._actions:
        assert action.help, f"pykubelet {command} {action.option_strings or action.dest} has no help"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_an_unknown_flag_by_name(command: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(command, "--no-such-flag=1")
    assert exit_.value.code == 2
    assert "unknown flag: --no-such-flag" in capsys.readouterr().err


@pytest.mark.parametrize("command", LOGGING)
@pytest.mark.parametrize("argv", [["-v", "4"], ["-v=4"], ["--v=4"], ["-v4"], ["--v", "4"]])
def test_every_component_takes_klogs_v(command: str, argv: list[str]) -> None:
    args = parse(command, *argv, "--logging-format=json")
    assert (args.v, args.logging_format) == (4, "json")


@pytest.mark.parametrize("command", LOGGING)
def test_bad_verbosity_and_format_refused(command: str, capsys: pytest.CaptureFixture) -> None:
    for argv, text in (
        (["--v=abc"], 'strconv.ParseInt: parsing "abc": invalid syntax'),
        (["--logging-format=xml"], 'format "xml" is not supported'),
        (["--vmodule=x=2"], "flag --vmodule is not supported by pykubelet"),
    ):
        with pytest.raises(SystemExit) as exit_:
            parse(command, *argv)
        assert exit_.value.code == 2
        assert text in capsys.readouterr().err


def test_server_takes_upstreams_flags() -> None:
    args = parse(
        "server",
        "--secure-port=6444",
        "--anonymous-auth=false",
        "--event-ttl",
        "1h",
        "--etcd-compaction-interval=90s",
        "--enable-admission-plugins=NodeRestriction,ServiceAccount",
        "--disable-admission-plugins",
        "DefaultStorageClass",
        "--service-cluster-ip-range=10.97.0.0/24",
        "--service-node-port-range=31000-31100",
        "--watch-cache-sizes=pods#500,deployments.apps#50",
        "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_AES_128_GCM_SHA256",
        "--scheduler=false",
        "--enable-priority-and-fairness=false",
    )
    assert args.port == 6444 and args.anonymous_auth is False and args.event_ttl == 3600
    assert args.etcd_compaction_interval == 90
    assert args.enable_admission_plugins == ["NodeRestriction", "ServiceAccount"]
    assert args.disable_admission_plugins == ["DefaultStorageClass"]
    assert args.service_node_port_range == range(31000, 31101)
    assert args.watch_cache_sizes == [("pods", 500), ("deployments.apps", 50)]
    assert args.scheduler is False and args.enable_priority_and_fairness is False
    defaults = parse("server")
    assert (defaults.port, defaults.anonymous_auth, defaults.event_ttl) == (6443, True, 3600)
    assert defaults.etcd_compaction_interval == 300


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["--event-ttl", "1x"], 'time: unknown unit "x" in duration "1x"'),
        (["--service-node-port-range=30000"], None),
        (["--service-node-port-range=a-b"], "unable to parse port range"),
        (["--watch-cache-sizes=pods"], "invalid value of watch cache size: pods"),
        (["--watch-cache-sizes=pods#0"], "not supported by pykubelet"),
    ],
)
def test_server_refuses_bad_values_by_name(
    argv: list[str], text: str | None, capsys: pytest.CaptureFixture
) -> None:
    if text is None:  # a single port is a valid range upstream
        assert parse("server", *argv).service_node_port_range == range(30000, 30001)
        return
    with pytest.raises(SystemExit) as exit_:
        parse("server", *argv)
    assert exit_.value.code == 2
    assert text in capsys.readouterr().err


def test_leader_elect_false_on_the_components_that_elect() -> None:
    assert parse("scheduler", "--leader-elect=false").leader_elect is False
    assert parse("scheduler").leader_elect is None  # the config file's then
    args = parse("scheduler", "--leader-elect-lease-duration=30s", "--leader-elect-retry-period", "3s")
    assert (args.lease_duration, args.retry_period, args.renew_deadline) == (30, 3, None)
    cm = parse("controller-manager", "--leader-elect=false", "--leader-elect-renew-deadline=5s")
    assert cm.leader_elect is False and cm.leader_elect_renew_deadline == 5
    assert parse("controller-manager").leader_elect_lease_duration == 15
    assert parse("controller-manager", "--node-monitor-grace-period=1m").node_monitor_grace_period == 60


def test_lists_upstream_takes_as_string_slices() -> None:
    assert parse(
        "server", "--authorization-mode=Node", "--authorization-mode", "RBAC"
    ).authorization_mode == [
        "Node",
        "RBAC",
    ]
    assert parse("server").authorization_mode == ["Node", "RBAC"]
    assert parse(
        "controller-manager", "--controllers=*,bootstrapsigner", "--controllers=-ttl"
    ).controllers == [
        "*",
        "bootstrapsigner",
        "-ttl",
    ]
    args = parse("server", "--tls-cipher-suites=A,B", "--tls-cipher-suites", "C")
    assert args.tls_cipher_suites == ["A", "B", "C"]


def test_metrics_server_durations_and_lists() -> None:
    args = parse(
        "metrics-server", "--metric-resolution", "15s", "--kubelet-preferred-address-types=InternalIP"
    )
    assert args.metric_resolution == 15 and args.kubelet_preferred_address_types == ["InternalIP"]
    assert parse("metrics-server", "--kubelet-insecure-tls=true").kubelet_insecure_tls is True
    assert parse("metrics-server", "--metric-resolution=500ms").metric_resolution == 0.5


def test_proxy_durations_and_config_flag(tmp_path) -> None:
    args = parse("proxy", "--sync-period=1m", "--min-sync-period", "500ms", "--masquerade-all=true")
    assert (args.sync_period, args.min_sync_period, args.masquerade_all) == (60, 0.5, True)
    assert parse("proxy", "--config", str(tmp_path / "c.yaml")).config == tmp_path / "c.yaml"


def test_agent_booleans_and_join_cri_socket() -> None:
    assert parse("agent").rotate_certificates is None
    assert parse("agent", "--rotate-certificates=false").rotate_certificates is False
    assert parse("join", "--cri-socket", "/run/containerd/containerd.sock").cri_socket.endswith(".sock")
    assert parse("up", "--no-example=true").no_example is True
