"""`python -m pykubelet.csidriver --endpoint SOCK --node-id NODE --state-dir DIR [--registration-dir
DIR]`: serve the host-path CSI driver until SIGTERM or SIGINT, then take its sockets away (the kubelet
sees the registration socket go and deregisters the driver)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from kubeclient.csi.client import socket_address
from kubeclient.csi.pb import csi_pb2_grpc as pb_grpc
from kubeclient.csi.pb import registration_pb2_grpc as reg_grpc
from pykubelet.csidriver.capacity import parse_capacity
from pykubelet.csidriver.driver import Driver, DriverConfig, Registrar, registration_socket

DEFAULT_NAME = "hostpath.csi.pykubelet.io"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pykubelet.csidriver", description=__doc__)
    p.add_argument("--endpoint", required=True, help="the driver's CSI socket")
    p.add_argument("--node-id", required=True)
    p.add_argument("--state-dir", required=True, type=Path, help="the volumes' folders live here")
    p.add_argument("--registration-dir", help="the kubelet's plugins_registry folder (none: no registration)")
    p.add_argument("--name", default=DEFAULT_NAME)
    p.add_argument("--attach-required", action="store_true", help="advertise ControllerPublish/Unpublish")
    p.add_argument("--max-volumes", type=int, default=0, help="NodeGetInfo's max_volumes_per_node")
    p.add_argument("--topology-key", default="", help="report the node's topology under this key")
    p.add_argument("--call-log", type=Path, help="append every call here as a JSON line")
    p.add_argument("--no-expansion", action="store_true", help="advertise no volume expansion")
    p.add_argument("--publish-delay", type=float, default=0.0, help="seconds NodePublishVolume waits first")
    p.add_argument("--stage-delay", type=float, default=0.0, help="seconds NodeStageVolume waits first")
    p.add_argument(
        "--finish-late",
        action="store_true",
        help="a delayed call mounts even after the caller's deadline passed",
    )
    p.add_argument(
        "--capacity",
        action="append",
        default=[],
        metavar="[KIND=]SIZE",
        help="simulate a storage pool of SIZE bytes (10Gi) for the classes whose `kind` parameter is KIND "
        "(none: the classes without one); repeatable. Without it GetCapacity reports the largest volume size",
    )
    p.add_argument(
        "--no-capacity", action="store_true", help="advertise no GET_CAPACITY controller capability"
    )
    p.add_argument(
        "--volume-mount-group",
        action="store_true",
        help="advertise VOLUME_MOUNT_GROUP: mount with the CO's fsGroup (volume_mount_group)",
    )
    return p.parse_args(argv)


def _serve(servicer_adders, socket: str) -> grpc.Server:
    if os.path.exists(socket):
        os.unlink(socket)
    os.makedirs(os.path.dirname(socket) or ".", exist_ok=True)
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    for add in servicer_adders:
        add(server)
    server.add_insecure_port(socket_address(socket))
    server.start()
    return server


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        pools = parse_capacity(args.capacity)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    cfg = DriverConfig(
        args.name,
        args.node_id,
        args.state_dir,
        args.attach_required,
        args.max_volumes,
        args.topology_key,
        args.call_log,
        not args.no_expansion,
        mount_group=args.volume_mount_group,
        publish_delay=args.publish_delay,
        stage_delay=args.stage_delay,
        finish_late=args.finish_late,
        get_capacity=not args.no_capacity,
        capacity=pools,
    )
    driver = Driver(cfg)
    endpoint = os.path.abspath(args.endpoint)
    servers = [
        (
            _serve(
                [
                    lambda s: pb_grpc.add_IdentityServicer_to_server(driver, s),
                    lambda s: pb_grpc.add_ControllerServicer_to_server(driver, s),
                    lambda s: pb_grpc.add_NodeServicer_to_server(driver, s),
                ],
                endpoint,
            ),
            endpoint,
        )
    ]
    if args.registration_dir:
        reg_socket = registration_socket(args.registration_dir, args.name)
        registrar = Registrar(cfg, endpoint)
        servers.append(
            (
                _serve([lambda s: reg_grpc.add_RegistrationServicer_to_server(registrar, s)], reg_socket),
                reg_socket,
            )
        )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    print(f"serving {args.name} on {endpoint}", flush=True)
    done.wait()
    for server, socket in reversed(servers):
        server.stop(grace=1).wait()
        if os.path.exists(socket):
            os.unlink(socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
