"""Which kubeconfig files a client reads and how several make one, as clientcmd's loading rules do.

`--kubeconfig FILE` names one file, which must exist. Otherwise `$KUBECONFIG` is a list (":"-separated;
empty entries and repeats dropped; files that do not exist skipped), else `~/.kube/config`. The files
merge into one: for every cluster, user and context name the first file that has it gives the whole
entry, and `current-context` comes from the first file that sets it. Each file's relative paths (CA,
client certificate and key, tokenFile, an exec command with a "/") are resolved against its own folder
before the merge, so a merged entry still finds its files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Entry = dict[str, Any]
_CLUSTER_PATHS = ("certificate-authority",)
_USER_PATHS = ("client-certificate", "client-key", "tokenFile")


class KubeconfigError(Exception):
    """No kubeconfig can be read, or one of them is not a kubeconfig."""


@dataclass
class Kubeconfig:
    """The merged kubeconfig: entries by name (paths already absolute) and the current context."""

    clusters: dict[str, Entry] = field(default_factory=dict)
    users: dict[str, Entry] = field(default_factory=dict)
    contexts: dict[str, Entry] = field(default_factory=dict)
    current_context: str = ""
    files: tuple[Path, ...] = ()

    def describe(self) -> str:
        return ", ".join(str(f) for f in self.files) or "no kubeconfig"


def kubeconfig_paths(
    explicit: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None
) -> list[Path]:
    """The files to read, in precedence order: the explicit one, else $KUBECONFIG's list, else
    ~/.kube/config. An explicit value holding the list separator is taken as a list too (our CLIs pass
    $KUBECONFIG as the --kubeconfig default)."""
    value = os.fspath(explicit) if explicit else (os.environ if env is None else env).get("KUBECONFIG", "")
    if not value:
        return [Path.home() / ".kube" / "config"]
    return [Path(os.path.expanduser(p)) for p in dict.fromkeys(value.split(os.pathsep)) if p]


def read_kubeconfigs(paths: list[Path]) -> Kubeconfig:
    """Merge `paths` (first wins). With one path that file must exist; with several, missing ones are
    skipped but at least one must be there."""
    merged = Kubeconfig()
    read: list[Path] = []
    for path in paths:
        try:
            text = path.read_text()
        except FileNotFoundError:
            if len(paths) == 1:
                raise KubeconfigError(f"cannot read kubeconfig {path}: No such file or directory") from None
            continue
        except OSError as err:
            raise KubeconfigError(f'error loading config file "{path}": {err.strerror}') from None
        _merge(merged, _parse(text, path))
        read.append(path)
    if not read:
        raise KubeconfigError(f"no kubeconfig found in {os.pathsep.join(str(p) for p in paths)}")
    merged.files = tuple(read)
    return merged


def _parse(text: str, path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise KubeconfigError(f"kubeconfig {path} is not YAML: {err}") from None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"kubeconfig {path} is not a kubeconfig")
    base = path.resolve().parent
    for key, paths in (("clusters", _CLUSTER_PATHS), ("users", _USER_PATHS)):
        kind = key[:-1]
        for item in doc.get(key) or []:
            entry = item.get(kind) if isinstance(item, dict) else None
            if isinstance(entry, dict):
                _absolute(entry, paths, base)
                command = (entry.get("exec") or {}).get("command") if kind == "user" else None
                if isinstance(command, str) and "/" in command:
                    entry["exec"]["command"] = str(_resolve(command, base))
    return doc


def _absolute(entry: Entry, keys: tuple[str, ...], base: Path) -> None:
    for key in keys:
        if isinstance(entry.get(key), str) and entry[key]:
            entry[key] = str(_resolve(entry[key], base))


def _resolve(path: str, base: Path) -> Path:
    p = Path(os.path.expanduser(path))
    return p if p.is_absolute() else base / p


def _merge(merged: Kubeconfig, doc: dict[str, Any]) -> None:
    for key, kind, target in (
        ("clusters", "cluster", merged.clusters),
        ("users", "user", merged.users),
        ("contexts", "context", merged.contexts),
    ):
        for item in doc.get(key) or []:
            if isinstance(item, dict) and item.get("name") and item["name"] not in target:
                target[item["name"]] = item.get(kind) or {}
    if not merged.current_context and doc.get("current-context"):
        merged.current_context = str(doc["current-context"])
