"""The client's JSON on the wire (answers and watch events decoded, request bodies encoded): orjson when
installed, the standard library otherwise (or when PYKUBELET_JSON=json: a way out should orjson
misbehave somewhere, and how a benchmark compares the two in one run).

Every component decodes every watch event of every resource it watches, and in a density run that was
the largest single cost of the processes built on this client: 19 % of the controller manager's CPU
samples and 23 % of the node simulator's; encoding the simulator's status patches and Lease renewals
another 3 %. orjson decodes a 2.6 KB pod event in 6.8 us where `json.loads` takes 17.7 us, into the same
dicts, lists, strings and numbers. Both raise a ValueError subclass (`json.JSONDecodeError`) on malformed
input, which is what the callers catch. Encoded bodies are the same JSON values (compact, UTF-8 where
the standard library escapes to ASCII); a value orjson refuses (an integer beyond 64 bits, a type it does
not know) goes to the standard library, so what encoded before encodes the same way now.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

BACKEND = "json"


def _stdlib_dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


loads: Callable[[bytes | str], Any] = json.loads
dumps: Callable[[Any], bytes] = _stdlib_dumps

if os.environ.get("PYKUBELET_JSON") != "json":
    try:
        import orjson
    except ImportError:
        pass
    else:
        _OPTIONS = orjson.OPT_NON_STR_KEYS  # int keys become strings, as json.dumps makes them

        def _orjson_dumps(value: Any) -> bytes:
            try:
                return orjson.dumps(value, option=_OPTIONS)
            except TypeError:
                return _stdlib_dumps(value)

        loads = orjson.loads
        dumps = _orjson_dumps
        BACKEND = "orjson"
