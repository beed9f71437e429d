"""`$(VAR)` references in container commands, args and env values, with upstream's rules (its forked
golang expansion package): `$(NAME)` becomes the variable's value, `$$` an escaped `$`, and a
reference to an unknown name stays as written. Shared by the pod workers (env, command, args) and the
prober (exec probe commands, expanded with the container's literal env only)."""

from __future__ import annotations

import re
from typing import Any

_REF = re.compile(r"\$\$|\$\(([^)]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, text)


def expand_static(command: list[str], container: dict[str, Any]) -> list[str]:
    """upstream's ExpandContainerCommandOnlyStatic: only env entries with a literal value count."""
    env = {e["name"]: e.get("value", "") for e in container.get("env") or [] if e.get("valueFrom") is None}
    return [expand(part, env) for part in command]
