"""The one logging set-up: klog's text header and InfoS body, component-base's JSON shape, -v levels
(INFO is V(0), DEBUG V(4)) and errors carrying "err"."""

from __future__ import annotations

import io
import json
import logging
import os
import re
from collections.abc import Iterator

import pytest

from kubeclient import logsetup
from kubeclient.logsetup import V, kv

# Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg
KLOG = re.compile(r"^([IWEF])(\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6}) +(\d+) ([\w.]+):(\d+)\] (.*)$")


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    out = io.StringIO()
    yield out
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_text_is_klogs_header_and_body(stream: io.StringIO) -> None:
    logsetup.configure(0, "text", stream)
    log = logging.getLogger("t.text")
    log.info("plain %s=%d", "count", 3)
    log.warning("Pod status updated", extra=kv(pod="default/web", ready=True, restarts=2))
    log.error("failed")
    first, second, third = lines(stream)
    m = KLOG.match(first)
    assert m, first
    assert m.group(1) == "I" and int(m.group(8)) == os.getpid()
    assert m.group(9) == "test_logsetup.py" and m.group(11) == "plain count=3"
    assert first[21:30] == f" {os.getpid():7d} "  # the pid right-aligned in 7, as klog pads it
    m = KLOG.match(second)
    assert m and m.group(1) == "W"
    assert m.group(11) == '"Pod status updated" pod="default/web" ready=true restarts=2'
    assert KLOG.match(third).group(1) == "E"


def test_json_is_component_bases_shape(stream: io.StringIO) -> None:
    logsetup.configure(4, "json", stream)
    log = logging.getLogger("t.json")
    log.info("Pod status updated", extra=kv(pod="default/web", status="ready"))
    log.debug("detail")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("sync failed")
    info, debug, error = (json.loads(line) for line in lines(stream))
    assert list(info) == ["ts", "caller", "msg", "v", "pod", "status"]
    assert info["msg"] == "Pod status updated" and info["v"] == 0 and info["pod"] == "default/web"
    assert info["caller"].startswith("test_logsetup.py:") and info["ts"] > 1e12  # epoch milliseconds
    assert debug["v"] == 4
    assert "v" not in error and "RuntimeError: boom" in error["err"]


@pytest.mark.parametrize("verbosity", [0, 2, 3, 4, 6])
def test_v_levels_are_honoured(stream: io.StringIO, verbosity: int) -> None:
    logsetup.configure(verbosity, "json", stream)
    log = logging.getLogger("t.levels")
    for n in range(0, 8):
        log.log(V(n), "level %d", n)
    log.warning("always")
    shown = [json.loads(line) for line in lines(stream)]
    assert [e["v"] for e in shown if e["msg"] != "always"] == list(range(0, min(verbosity, 7) + 1))
    assert shown[-1]["msg"] == "always"


def test_debug_is_v4_and_info_v0() -> None:
    assert logsetup.verbosity_of(logging.DEBUG) == 4
    assert logsetup.verbosity_of(logging.INFO) == 0
    assert [logsetup.verbosity_of(V(n)) for n in range(0, 10)] == list(range(0, 10))


def test_a_component_process_writes_klog_text_then_json() -> None:
    """A real component (the proxy removing a table that is not there) logs klog's text by default and
    component-base's JSON with --logging-format=json."""
    import shutil
    import subprocess

    if shutil.which("nft") is None:
        pytest.skip("the proxy's cleanup needs nft")
    argv = ["pykubelet", "proxy", "--cleanup", "--nft-table", f"pykubelet-logtest-{os.getpid()}"]
    text = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stderr.splitlines()
    assert text and all(KLOG.match(line) for line in text), text
    assert KLOG.match(text[-1]).group(11).startswith("cleanup table=pykubelet-logtest-")
    out = subprocess.run([*argv, "--logging-format=json", "-v=2"], capture_output=True, text=True, timeout=60)
    entries = [json.loads(line) for line in out.stderr.splitlines()]
    assert entries and all(list(e)[:3] == ["ts", "caller", "msg"] for e in entries)


def test_credentials_that_reach_a_log_line_are_masked(stream: io.StringIO) -> None:
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"
    for fmt in ("text", "json"):
        logsetup.configure(0, fmt, stream)
        logging.getLogger("t.secret").info("headers Authorization: Bearer abc.DEF-123 token=%s", jwt)
    out = stream.getvalue()
    assert "abc.DEF-123" not in out and jwt not in out
    assert out.count("Bearer <redacted>") == 2 and out.count("token=<redacted>") == 2
