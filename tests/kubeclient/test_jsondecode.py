"""The client's JSON decoder: orjson when installed, else the standard library, with the same results
and the same error type either way, and PYKUBELET_JSON=json choosing the standard library."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kubeclient import jsondecode

EVENT = (
    b'{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"p","resourceVersion":"9"},'
    b'"spec":{"priority":0,"terminationGracePeriodSeconds":30},"status":{"ratio":0.25,"ok":true,'
    b'"none":null,"text":"caf\\u00e9 \xe2\x9c\x93"}}}'
)


def test_decodes_what_the_standard_library_decodes() -> None:
    assert jsondecode.loads(EVENT) == json.loads(EVENT)
    assert jsondecode.loads(EVENT.decode()) == json.loads(EVENT)


@pytest.mark.parametrize("bad", [b'{"type": "ADDED", "object": {', b"not json", b'{"a": 1} trailing'])
def test_malformed_input_raises_a_value_error(bad: bytes) -> None:
    with pytest.raises(ValueError):
        jsondecode.loads(bad)


def test_the_environment_chooses_the_standard_library() -> None:
    code = "from kubeclient import jsondecode; print(jsondecode.BACKEND)"
    env = {**os.environ, "PYKUBELET_JSON": "json"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "json"
