"""CNI error codes and the error type every layer of the plugin raises.

The runtime (containerd's libcni) only understands failures reported as the spec's error JSON on
stdout with a non-zero exit, so every failure is funnelled into one `CniError` that knows its code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# Codes from the CNI spec (1.0 / 1.1), section "Error".
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENV = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
PLUGIN_NOT_AVAILABLE = 50
LIMITED_CONNECTIVITY = 51
# 100+ are plugin specific.
CHECK_FAILED = 100
INTERNAL = 999


@dataclass
class CniError(Exception):
    """A failure the plugin reports to the runtime with a spec error code."""

    code: int
    msg: str
    details: str = ""

    def __str__(self) -> str:
        return f"{self.msg}: {self.details}" if self.details else self.msg

    def to_json(self, cni_version: str = "1.0.0") -> str:
        """Render the error object the spec puts on stdout."""
        body: dict[str, object] = {"cniVersion": cni_version, "code": self.code, "msg": self.msg}
        if self.details:
            body["details"] = self.details
        return json.dumps(body)
