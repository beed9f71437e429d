"""The controller manager's tunables in one table: flag, option name (what a controller reads with
`ctx.option(name, DEFAULTS[name])`), upstream's default (kube-controller-manager 1.32) and help, so the
CLI and the controllers cannot disagree about a default.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from kubeclient.duration import parse_go_duration

DURATION, FLOAT, INT = "duration", "float", "int"


@dataclass(frozen=True)
class Tunable:
    flag: str
    default: str | float | int
    kind: str
    help: str

    @property
    def name(self) -> str:
        return self.flag.replace("-", "_")

    def parse(self, raw: Any) -> float | int:
        try:
            if self.kind == DURATION:
                value: float | int = parse_go_duration(str(raw))
            elif self.kind == FLOAT:
                value = float(raw)
            else:
                value = int(raw)
        except ValueError as err:
            detail = str(err) if self.kind == DURATION else "invalid syntax"
            raise argparse.ArgumentTypeError(
                f'invalid argument "{raw}" for "--{self.flag}" flag: {detail}'
            ) from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"--{self.flag} must not be negative")
        return value


TUNABLES: tuple[Tunable, ...] = (
    Tunable("node-monitor-period", "5s", DURATION, "The period for syncing NodeStatus in NodeController."),
    Tunable(
        "node-monitor-grace-period",
        "50s",
        DURATION,
        "Amount of time which we allow running Node to be unresponsive before marking it unhealthy. Must be N "
        "times more than kubelet's nodeStatusUpdateFrequency, where N means number of retries allowed for kubelet "
        "to post node status.",
    ),
    Tunable(
        "node-startup-grace-period",
        "1m0s",
        DURATION,
        "Amount of time which we allow starting Node to be unresponsive before marking it unhealthy.",
    ),
    Tunable(
        "node-eviction-rate",
        0.1,
        FLOAT,
        "Number of nodes per second on which pods are deleted in case of node failure when a zone is healthy "
        "(see --unhealthy-zone-threshold for definition of healthy/unhealthy). Zone refers to entire cluster in "
        "non-multizone clusters.",
    ),
    Tunable(
        "secondary-node-eviction-rate",
        0.01,
        FLOAT,
        "Number of nodes per second on which pods are deleted in case of node failure when a zone is unhealthy. "
        "This value is implicitly overridden to 0 if the cluster size is smaller than "
        "--large-cluster-size-threshold.",
    ),
    Tunable(
        "large-cluster-size-threshold",
        50,
        INT,
        "Number of nodes from which node-lifecycle-controller treats the cluster as large for the eviction logic "
        "purposes. --secondary-node-eviction-rate is implicitly overridden to 0 for clusters this size or "
        "smaller.",
    ),
    Tunable(
        "unhealthy-zone-threshold",
        0.55,
        FLOAT,
        "Fraction of Nodes in a zone which needs to be not Ready (minimum 3) for zone to be treated as "
        "unhealthy.",
    ),
    Tunable(
        "max-endpoints-per-slice",
        100,
        INT,
        "The maximum number of endpoints that will be added to an EndpointSlice. More endpoints per slice will "
        "result in less endpoint slices, but larger resources. Defaults to 100.",
    ),
    Tunable(
        "cluster-signing-duration",
        "8760h0m0s",
        DURATION,
        "The max length of duration signed certificates will be given. Individual CSRs may request shorter "
        "certs by setting spec.expirationSeconds.",
    ),
    Tunable(
        "terminated-pod-gc-threshold",
        12500,
        INT,
        "Number of terminated pods that can exist before the terminated pod garbage collector starts deleting "
        "terminated pods. If <= 0, the terminated pod garbage collector is disabled.",
    ),
    Tunable(
        "horizontal-pod-autoscaler-sync-period",
        "15s",
        DURATION,
        "The period for syncing the number of pods in horizontal pod autoscaler.",
    ),
    Tunable(
        "horizontal-pod-autoscaler-tolerance",
        0.1,
        FLOAT,
        "The minimum change (from 1.0) in the desired-to-actual metrics ratio for the horizontal pod autoscaler "
        "to consider scaling.",
    ),
    Tunable(
        "horizontal-pod-autoscaler-downscale-stabilization",
        "5m0s",
        DURATION,
        "The period for which autoscaler will look backwards and not scale down below any recommendation it made "
        "during that period.",
    ),
    Tunable(
        "horizontal-pod-autoscaler-cpu-initialization-period",
        "5m0s",
        DURATION,
        "The period after pod start when CPU samples might be skipped.",
    ),
    Tunable(
        "horizontal-pod-autoscaler-initial-readiness-delay",
        "30s",
        DURATION,
        "The period after pod start during which readiness changes will be treated as initial readiness.",
    ),
)

DEFAULTS: dict[str, float | int] = {t.name: t.parse(t.default) for t in TUNABLES}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for tunable in TUNABLES:
        parser.add_argument(
            f"--{tunable.flag}",
            dest=tunable.name,
            type=tunable.parse,
            default=DEFAULTS[tunable.name],
            help=f"{tunable.help} (default {tunable.default})",
        )


def from_args(args: argparse.Namespace) -> dict[str, float | int]:
    return {t.name: getattr(args, t.name) for t in TUNABLES}
