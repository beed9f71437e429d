"""Where a process's CPU time goes, by `perf` samples grouped into what a reader of a benchmark asks
about: TLS, JSON (de)serialization, the etcd gRPC client, the HTTP and event-loop C code, the kernel
(syscalls, network, scheduling) and the rest of the Python interpreter (our code). Python 3.11 has no
perf trampolines, so Python functions are not named; the C symbols they spend their time in are, and
that is enough to tell serialization from TLS from the interpreter.

`with Profile(pid) as p: ...` samples the process for the block; `p.categories` is then
{category: percent of samples}, or empty with `p.skipped` saying why (perf missing or not permitted).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

_JSON = re.compile(
    r"^(encoder_|scan_once|scanstring|_parse_object|_parse_array|py_encode|escape_unicode|_match_number)"
)
# (category, test on the DSO, test on the symbol), first match wins
RULES: tuple[tuple[str, str, re.Pattern[str] | None], ...] = (
    ("TLS (libssl, libcrypto)", "libssl|libcrypto|_ssl", None),
    ("JSON (de)serialization", "_json\\.", None),
    ("SQLite", "sqlite", None),
    ("etcd gRPC client (grpc core, protobuf)", "cygrpc|grpc|_message|protobuf|upb", None),
    (
        "HTTP and event loop (uvloop, aiohttp parser, multidict, yarl)",
        "uvloop|loop\\.cpython|_http_parser|_http_writer|multidict|yarl|_websocket",
        None,
    ),
    ("kernel (syscalls, network, scheduling)", "kernel|vmlinux|\\[k\\]", None),
    ("JSON (de)serialization", "_json|libpython", _JSON),
    ("Python interpreter and our code", "libpython|python3", None),
)


def categorize(dso: str, symbol: str) -> str:
    for name, dso_pattern, symbol_pattern in RULES:
        if re.search(dso_pattern, dso) and (symbol_pattern is None or symbol_pattern.search(symbol)):
            return name
    return "other (libc, allocator, ...)"


@dataclass
class Profile:
    pid: int
    frequency: int = 499
    categories: dict[str, float] = field(default_factory=dict)
    top_symbols: list[tuple[str, float]] = field(default_factory=list)
    skipped: str = ""
    _proc: subprocess.Popen[bytes] | None = None
    _dir: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Profile:
        perf = shutil.which("perf")
        if perf is None:
            self.skipped = "perf is not installed"
            return self
        if os.geteuid() != 0 and Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip() not in (
            "-1",
            "0",
        ):
            self.skipped = "perf needs root or kernel.perf_event_paranoid <= 0"
            return self
        self._dir = tempfile.TemporaryDirectory(prefix="perf-")
        data = Path(self._dir.name) / "perf.data"
        self._proc = subprocess.Popen(
            [perf, "record", "-q", "-F", str(self.frequency), "-p", str(self.pid), "-o", str(data)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        # perf takes a moment to attach to every thread: the profile starts once it has written its header.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (not data.exists() or data.stat().st_size == 0):
            time.sleep(0.05)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is None or self._dir is None:
            return
        self._proc.send_signal(signal.SIGINT)
        _, err = self._proc.communicate(timeout=60)
        data = Path(self._dir.name) / "perf.data"
        try:
            if not data.exists():
                self.skipped = f"perf record failed: {err.decode(errors='replace')[-300:]}"
                return
            report = subprocess.run(
                [
                    "perf",
                    "report",
                    "-i",
                    str(data),
                    "--stdio",
                    "--no-children",
                    "--sort",
                    "dso,sym",
                    "-t",
                    "|",
                ],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            self._parse(report.stdout)
        finally:
            self._dir.cleanup()

    def _parse(self, text: str) -> None:
        totals: dict[str, float] = {}
        symbols: list[tuple[str, float]] = []
        for line in text.splitlines():
            parts = line.split("|")
            if len(parts) < 3 or not parts[0].strip().endswith("%"):
                continue
            share = float(parts[0].strip().rstrip("%"))
            dso, symbol = parts[1].strip(), parts[2].strip()
            symbol = symbol.split("] ", 1)[-1]
            totals[categorize(dso, symbol)] = totals.get(categorize(dso, symbol), 0.0) + share
            symbols.append((f"{symbol} ({dso})", share))
        self.categories = {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}
        self.top_symbols = [(s, round(v, 1)) for s, v in sorted(symbols, key=lambda kv: -kv[1])[:12]]
        if not totals:
            self.skipped = "perf recorded no samples"

    def summary(self) -> dict:
        return {
            "categories_pct": self.categories,
            "top_symbols_pct": self.top_symbols,
            "skipped": self.skipped,
        }
