"""The exit code an exec's Status channel reports, as upstream's remotecommand reads it (the command run
for real through the API and the kubelet: e2e/test_trace_diagnose.py's dataplane scenarios)."""

from __future__ import annotations

from kubeclient.podexec import exit_code


def test_exit_codes_from_the_status_channel() -> None:
    assert exit_code({"metadata": {}, "status": "Success"}) == 0
    failed = {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "message": "command terminated with non-zero exit code: error executing command [nc], exit code 1",
        "details": {"causes": [{"reason": "ExitCode", "message": "1"}]},
    }
    assert exit_code(failed) == 1
    assert (
        exit_code({"status": "Failure", "reason": "InternalError", "message": "executable not found"}) == -1
    )
