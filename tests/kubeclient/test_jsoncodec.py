"""The client's JSON codec: orjson when installed, else the standard library, with the same results
and the same error type either way, and PYKUBELET_JSON=json choosing the standard library."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kubeclient import jsoncodec

EVENT = (
    b'{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"p","resourceVersion":"9"},'
    b'"spec":{"priority":0,"terminationGracePeriodSeconds":30},"status":{"ratio":0.25,"ok":true,'
    b'"none":null,"text":"caf\\u00e9 \xe2\x9c\x93"}}}'
)


def test_decodes_what_the_standard_library_decodes() -> None:
    assert jsoncodec.loads(EVENT) == json.loads(EVENT)
    assert jsoncodec.loads(EVENT.decode()) == json.loads(EVENT)


def test_an_integer_beyond_64_bits_is_read_as_a_float_as_go_clients_read_it() -> None:
    """A custom resource may hold any JSON number. apimachinery's JSON decoding into unstructured
    objects keeps an integer that fits int64 and makes any other a float64; orjson does the same (the
    standard library, the way out, keeps Python's unbounded int)."""
    body = b'{"spec": {"n": 1180591620717411303424, "fits": 9223372036854775807}}'
    decoded = jsoncodec.loads(body)["spec"]
    assert decoded["fits"] == 2**63 - 1 and isinstance(decoded["fits"], int)
    if jsoncodec.BACKEND == "orjson":
        assert decoded["n"] == float(2**70) and isinstance(decoded["n"], float)
    else:
        assert decoded["n"] == 2**70


def test_the_installed_codec_is_orjson() -> None:
    """orjson is a declared dependency: the standard library is the way out, not what runs."""
    assert jsoncodec.BACKEND == ("json" if os.environ.get("PYKUBELET_JSON") == "json" else "orjson")


@pytest.mark.parametrize("bad", [b'{"type": "ADDED", "object": {', b"not json", b'{"a": 1} trailing'])
def test_malformed_input_raises_a_value_error(bad: bytes) -> None:
    with pytest.raises(ValueError):
        jsoncodec.loads(bad)


def test_the_environment_chooses_the_standard_library() -> None:
    code = "from kubeclient import jsoncodec; print(jsoncodec.BACKEND)"
    env = {**os.environ, "PYKUBELET_JSON": "json"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "json"


def test_encodes_what_the_standard_library_encodes() -> None:
    body = {"metadata": {"name": "caf\u00e9", "labels": {1: "int key"}}, "spec": {"n": 2**63, "r": 0.5}}
    assert json.loads(jsoncodec.dumps(body)) == json.loads(json.dumps(body))
    huge = {"n": 2**70}  # beyond 64 bits: orjson refuses it, the standard library writes it
    assert json.loads(jsoncodec.dumps(huge)) == huge


def test_a_value_json_cannot_encode_is_refused_either_way() -> None:
    with pytest.raises(TypeError):
        jsoncodec.dumps({"when": object()})
