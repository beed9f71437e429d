"""plugin.handle's contract with the runtime, with the command functions replaced (unit scope)."""

from __future__ import annotations

import json

import pytest

from agent.cni import plugin
from agent.cni.errors import CniError

CONF = json.dumps(
    {
        "cniVersion": "1.0.0",
        "name": "n",
        "type": "pykubelet-cni",
        "ipam": {"ranges": [[{"subnet": "10.1.0.0/24"}]]},
    }
).encode()
ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0"}


def test_unexpected_exception_becomes_cni_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(conf: object, args: object) -> None:
        raise RuntimeError("kernel said no")

    monkeypatch.setitem(plugin._COMMANDS, "ADD", boom)
    resp = plugin.handle(ENV, CONF)
    assert resp.code == 1
    assert json.loads(resp.stdout) == {
        "cniVersion": "1.0.0",
        "code": 999,
        "msg": "RuntimeError: kernel said no",
    }
    assert "Traceback" in resp.stderr


def test_cni_error_keeps_its_code_and_config_version(monkeypatch: pytest.MonkeyPatch) -> None:
    def busy(conf: object, args: object) -> None:
        raise CniError(11, "try again later", "lock held")

    monkeypatch.setitem(plugin._COMMANDS, "DEL", busy)
    resp = plugin.handle({**ENV, "CNI_COMMAND": "DEL"}, CONF.replace(b"1.0.0", b"0.4.0"))
    assert resp.code == 1
    assert json.loads(resp.stdout) == {
        "cniVersion": "0.4.0",
        "code": 11,
        "msg": "try again later",
        "details": "lock held",
    }


def test_success_prints_result_and_nothing_for_del(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(plugin._COMMANDS, "ADD", lambda conf, args: {"cniVersion": "1.0.0", "ips": []})
    monkeypatch.setitem(plugin._COMMANDS, "DEL", lambda conf, args: None)
    assert json.loads(plugin.handle(ENV, CONF).stdout) == {"cniVersion": "1.0.0", "ips": []}
    assert plugin.handle({**ENV, "CNI_COMMAND": "DEL"}, CONF) == plugin.Response(0, "", "")
