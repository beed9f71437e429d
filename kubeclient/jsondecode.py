"""Decoding the API's JSON answers and watch events: orjson when installed, the standard library's
decoder otherwise (or when PYKUBELET_JSON=json: a way out should orjson misbehave somewhere, and how a
benchmark compares the two in one run).

Every component decodes every watch event of every resource it watches, and in a density run that was
the largest single cost of the processes built on this client: 19 % of the controller manager's CPU
samples and 23 % of the node simulator's. orjson decodes a 2.6 KB pod event in 6.8 us where `json.loads`
takes 17.7 us, into the same dicts, lists, strings and numbers. Both raise a ValueError subclass
(`json.JSONDecodeError`) on malformed input, which is what the callers catch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

loads: Callable[[bytes | str], Any] = json.loads
BACKEND = "json"

if os.environ.get("PYKUBELET_JSON") != "json":
    try:
        import orjson
    except ImportError:
        pass
    else:
        loads = orjson.loads
        BACKEND = "orjson"
