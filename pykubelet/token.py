"""`pykubelet token create|list|delete`: bootstrap tokens as kubeadm's `kubeadm token` manages them, so a
person (or a script written for kubeadm) gets the same output: `create` prints the token alone, or with
`--print-join-command` the command that joins a node with it (`pykubelet join https://HOST:PORT --token
ID.SECRET --discovery-token-ca-cert-hash sha256:HEX`, the hash as kubeadm computes it); `list` prints
kubeadm's table; `delete` takes token ids or whole tokens.

The tokens are Secrets in kube-system (kubeclient/bootstraptoken.py); the API server must run with
--enable-bootstrap-token-auth for them to authenticate, and the controller manager's bootstrapsigner
signs cluster-info with them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
from pathlib import Path

from kubeclient import bootstraptoken as bt
from kubeclient.client import KubeClient
from kubeclient.config import ConfigError, load_kubeconfig
from kubeclient.errors import ApiError
from kubeclient.flags import go_duration

SECRETS = f"/api/v1/namespaces/{bt.NAMESPACE}/secrets"


def _kubeconfig(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config"),
        help="the administrator's kubeconfig (default $KUBECONFIG, else ~/.kube/config)",
    )
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True, help="create, list or delete")
    create = _kubeconfig(sub.add_parser("create", help="create a bootstrap token on the server"))
    create.add_argument("token", nargs="?", default="", help="the token to create (default: a random one)")
    create.add_argument(
        "--ttl",
        type=go_duration,
        default="24h0m0s",
        help="the duration before the token is automatically deleted (e.g. 1s, 2m, 3h); 0 means never expires",
    )
    create.add_argument(
        "--description", default="", help="a human friendly description of how this token is used"
    )
    create.add_argument(
        "--groups",
        default=bt.KUBEADM_DEFAULT_GROUP,
        help="extra groups this token will authenticate as when used for authentication; each must match "
        f"{bt.GROUP_RE.pattern[2:-2]}",
    )
    create.add_argument(
        "--usages",
        default="signing,authentication",
        help="describes the ways in which this token can be used (signing, authentication)",
    )
    create.add_argument(
        "--print-join-command",
        action="store_true",
        help="print the full 'pykubelet join' flag needed to join the cluster using the token",
    )
    _kubeconfig(sub.add_parser("list", help="list bootstrap tokens on the server"))
    delete = _kubeconfig(sub.add_parser("delete", help="delete bootstrap tokens on the server"))
    delete.add_argument("tokens", nargs="+", metavar="TOKEN", help="token ids or whole tokens")


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    try:
        config = load_kubeconfig(args.kubeconfig)
    except ConfigError as err:
        return _fail(str(err))
    if config.ca_data is None and config.ca_file:
        try:
            config.ca_data = Path(config.ca_file).read_bytes()
        except OSError as err:
            return _fail(f"cannot read the CA file {config.ca_file}: {err.strerror}")
    try:
        return asyncio.run(_run(args, config))
    except ApiError as err:
        return _fail(err.message or str(err))
    except ValueError as err:
        return _fail(str(err))


async def _run(args: argparse.Namespace, config) -> int:  # type: ignore[no-untyped-def]
    client = KubeClient(config, max_attempts=2)
    try:
        if args.action == "create":
            return await _create(client, config, args)
        if args.action == "list":
            return await _list(client)
        return await _delete(client, args.tokens)
    finally:
        await client.close()


async def _create(client: KubeClient, config, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    token = args.token or bt.generate()
    if not bt.TOKEN_RE.match(token):
        raise ValueError(f'the bootstrap token "{token}" was not of the form "{bt.TOKEN_RE.pattern[2:-2]}"')
    ttl = args.ttl
    groups = tuple(g.strip() for g in args.groups.split(",") if g.strip())
    for group in groups:
        if why := bt.validate_group(group):
            raise ValueError(why)
    usages = tuple(u.strip() for u in args.usages.split(",") if u.strip())
    if why := bt.validate_usages(list(usages)):
        raise ValueError(why)
    if groups and "authentication" not in usages:
        raise ValueError('token groups cannot be specified unless --usages includes "authentication"')
    secret = bt.token_secret(token, ttl, usages, groups, args.description)
    try:
        await client.create(SECRETS, secret)
    except ApiError as err:
        if err.status == 409:
            raise ValueError(f'a token with id "{token[:6]}" already exists') from None
        raise
    if not args.print_join_command:
        print(token)
        return 0
    ca = config.ca_data or b""
    if not ca:
        raise ValueError("the kubeconfig holds no certificate authority to compute the CA hash from")
    print(
        f"pykubelet join {config.server} --token {token} --discovery-token-ca-cert-hash {bt.ca_cert_hash(ca)}"
    )
    return 0


def _short_duration(delta: dt.timedelta) -> str:
    """apimachinery's ShortHumanDuration (what kubeadm's TTL column shows)."""
    seconds = int(delta.total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 60:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    return f"{hours // 24 // 365}y"


def _table(rows: list[list[str]]) -> str:
    """Go's tabwriter with kubeadm's settings (minwidth 10, padding 3, spaces)."""
    widths = [max(10, *(len(r[i]) + 3 for r in rows)) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("".join(cells) + row[-1])
    return "\n".join(lines)


def token_rows(secrets: list[dict], now: dt.datetime) -> list[list[str]]:
    rows = [["TOKEN", "TTL", "EXPIRES", "USAGES", "DESCRIPTION", "EXTRA GROUPS"]]
    for secret in sorted(secrets, key=lambda s: s["metadata"]["name"]):
        token, _why = bt.parse_secret(secret)
        if token is None:
            continue  # kubeadm skips Secrets it cannot read as tokens
        ttl, expires = "<forever>", "<never>"
        if token.expiration is not None:
            ttl = _short_duration(token.expiration - now)
            expires = token.expiration.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        usages = ",".join(u for u in sorted(token.usages)) or "<none>"
        rows.append(
            [
                f"{token.token_id}.{token.token_secret}",
                f"{ttl:<9}",
                expires,
                f"{usages:<22}",
                f"{token.description or '<none>':<56}",
                ",".join(token.groups) or "<none>",
            ]
        )
    return rows


async def _list(client: KubeClient) -> int:
    listed = await client.get(SECRETS, fieldSelector=f"type={bt.SECRET_TYPE}")
    rows = token_rows(listed.get("items") or [], dt.datetime.now(dt.UTC))
    if len(rows) > 1:
        print(_table(rows))
    return 0


async def _delete(client: KubeClient, tokens: list[str]) -> int:
    for given in tokens:
        token_id = given.split(".", 1)[0]
        if not bt.ID_RE.match(token_id) or ("." in given and not bt.TOKEN_RE.match(given)):
            raise ValueError(
                f'given token didn\'t match pattern "{bt.ID_RE.pattern[2:-2]}" or "{bt.TOKEN_RE.pattern[2:-2]}"'
            )
        try:
            await client.delete(f"{SECRETS}/{bt.secret_name(token_id)}")
        except ApiError as err:
            if err.status == 404:
                raise ValueError(f'bootstrap token "{token_id}" not found') from None
            raise
        print(f'bootstrap token "{token_id}" deleted')
    return 0
