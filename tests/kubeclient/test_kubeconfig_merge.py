"""$KUBECONFIG lists merged as clientcmd's loading rules merge them: for each cluster, user and context
name the first file that has it wins (the whole entry), current-context comes from the first file that
sets it, relative paths resolve against each file's own folder, missing files in a list are skipped,
and an explicit single file must exist."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from kubeclient.config import ConfigError, load_config, load_kubeconfig
from kubeclient.kubeconfigfiles import kubeconfig_paths


def write(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def entry(kind: str, name: str, body: dict) -> dict:
    return {"name": name, kind: body}


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "b" / "ca.crt").parent.mkdir(parents=True)
    (tmp_path / "b" / "token").write_text("token-from-b\n")
    first = write(
        tmp_path / "a" / "config",
        {
            "clusters": [
                entry("cluster", "shared", {"server": "https://first:6443", "insecure-skip-tls-verify": True})
            ],
            "users": [entry("user", "shared", {"token": "first-token"})],
            "contexts": [
                entry("context", "one", {"cluster": "shared", "user": "shared", "namespace": "ns-a"})
            ],
        },
    )
    second = write(
        tmp_path / "b" / "config",
        {
            "current-context": "two",
            "clusters": [
                entry("cluster", "shared", {"server": "https://second:6443"}),
                entry("cluster", "other", {"server": "https://other:6443", "insecure-skip-tls-verify": True}),
            ],
            "users": [
                entry("user", "shared", {"token": "second-token"}),
                entry("user", "b-user", {"tokenFile": "token"}),
            ],
            "contexts": [
                entry("context", "one", {"cluster": "other", "user": "b-user"}),
                entry("context", "two", {"cluster": "other", "user": "b-user", "namespace": "ns-b"}),
            ],
        },
    )
    return first, second


def test_the_first_file_wins_each_name_and_current_context_comes_from_the_first_setting_it(files) -> None:
    first, second = files
    listed = os.pathsep.join([str(first), str(first.parent / "missing"), str(second)])
    # No current-context in the first file: the second's ("two") is taken; its relative tokenFile is
    # resolved against the second file's folder.
    two = load_kubeconfig(listed)
    assert (two.server, two.namespace, two.bearer_token()) == ("https://other:6443", "ns-b", "token-from-b")
    # "one" is in both: the first file's context, cluster and user win as whole entries.
    one = load_kubeconfig(listed, "one")
    assert (one.server, one.token, one.namespace, one.insecure) == (
        "https://first:6443",
        "first-token",
        "ns-a",
        True,
    )
    # The other order: the second file now wins "one", "shared" and the current context.
    swapped = os.pathsep.join([str(second), str(first)])
    assert load_kubeconfig(swapped, "one").server == "https://other:6443"


def test_kubeconfig_env_lists_are_read_whole(files, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = files
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second)]))
    assert load_config().namespace == "ns-b"
    assert kubeconfig_paths(None, {"KUBECONFIG": f"{first}{os.pathsep}{os.pathsep}{first}"}) == [first]
    assert kubeconfig_paths(None, {}) == [Path.home() / ".kube" / "config"]


def test_a_missing_single_file_or_a_list_of_missing_files_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        load_kubeconfig(tmp_path / "nope")
    with pytest.raises(ConfigError, match="no kubeconfig found"):
        load_kubeconfig(os.pathsep.join([str(tmp_path / "x"), str(tmp_path / "y")]))
