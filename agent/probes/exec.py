"""exec handler: run the command in the container through CRI ExecSync.

Upstream (pkg/probe/exec/exec.go with the CRI client's ExecSync, staging/src/k8s.io/cri-client/pkg/
remote_runtime.go in v1.31+) returns stdout followed by stderr, at most 10 KiB of it: exit 0 is
Success, any other exit Failure with that output. A gRPC DeadlineExceeded from the runtime is a timed
out command, a Failure whose output is the CRI client's error, `command timed out: "<cmd>" timed out
after 1s`. Any other error (container gone, runtime refused) leaves the result Unknown ("probe
errored"), with the error's text.

containerd 1.6 enforces ExecSync's timeout itself: it kills the command and answers DeadlineExceeded
("failed to exec in container: timeout 1s exceeded: context deadline exceeded") some 50 ms after the
timeout, dropping any output. We also bound the call ourselves (the timeout plus a small margin) so a
wedged runtime cannot hold a probe for the CRI call's 2-minute deadline.
"""

from __future__ import annotations

import asyncio
import math

from agent.cri import CRIClient, CRIError, DeadlineExceededError
from agent.probes.result import Outcome, Result
from agent.probes.tcp import go_code, go_duration, go_quote

# Upstream keeps at most this much of the command's output (maxReadLength).
MAX_OUTPUT = 10 * 1024
# How long past the runtime's own timeout we wait for its answer before giving up on our side.
MARGIN = 2.0


def timed_out(command: list[str], timeout: float) -> str:
    """The CRI client's error for an ExecSync that ran past its timeout (ErrCommandTimedOut)."""
    return f"command timed out: {go_quote(' '.join(command))} timed out after {go_duration(timeout)}"


def rpc_error_text(err: CRIError) -> str:
    """A CRI error as Go's gRPC status prints it: `rpc error: code = NotFound desc = ...`."""
    code = go_code(err.code.name if err.code is not None else "UNKNOWN")
    return f"rpc error: code = {code} desc = {err.details}"


async def exec_probe(cri: CRIClient, container_id: str, command: list[str], timeout: float) -> Outcome:
    """Run `command` in the container. `timeout` seconds, rounded up to whole seconds for CRI as
    upstream's timeoutSeconds are; 0 or less means no timeout (lifecycle exec hooks run unbounded)."""
    seconds = math.ceil(timeout) if timeout > 0 else 0
    try:
        async with asyncio.timeout(seconds + MARGIN if seconds else None):
            result = await cri.exec_sync(container_id, command, timeout_seconds=seconds)
    except (TimeoutError, DeadlineExceededError):
        return Outcome(Result.FAILURE, timed_out(command, seconds))
    except CRIError as err:
        return Outcome(Result.UNKNOWN, rpc_error_text(err))
    except Exception as err:  # an unreachable runtime makes an errored probe, not a crashed worker
        return Outcome(Result.UNKNOWN, str(err))
    output = (result.stdout + result.stderr)[:MAX_OUTPUT].decode("utf-8", "replace")
    return Outcome(Result.SUCCESS if result.exit_code == 0 else Result.FAILURE, output)
