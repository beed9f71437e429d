"""The shim <-> service wire format."""

from __future__ import annotations

import pytest

from agent.cni import protocol


def test_request_round_trip_keeps_only_cni_vars() -> None:
    env = {"CNI_COMMAND": "ADD", "CNI_ARGS": "K8S_POD_NAME=a=b;X=1", "PATH": "/bin", "HOME": "/root"}
    stdin = b'{"cniVersion":"1.0.0"}\x00binary'
    req = protocol.decode_request(protocol.encode_request(env, stdin))
    assert req.env == {"CNI_COMMAND": "ADD", "CNI_ARGS": "K8S_POD_NAME=a=b;X=1"}
    assert req.stdin == stdin


def test_response_round_trip() -> None:
    code, out, err = protocol.decode_response(protocol.encode_response(7, '{"code": 7}', "trace\n"))
    assert (code, out, err) == (7, b'{"code": 7}', b"trace\n")


@pytest.mark.parametrize("data", [b"", b"HTTP/1.1\n", protocol.MAGIC + b"CNI_X=1"])
def test_bad_requests_are_rejected(data: bytes) -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.decode_request(data)
