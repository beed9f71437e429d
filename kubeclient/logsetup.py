"""One logging set-up for every pykubelet process, in the shapes upstream's components write.

Operators grep and ship Kubernetes logs by their shape, so each process writes what a Go component
built on klog and k8s.io/component-base/logs writes, to stderr:

- text (the default), klog's header then the message:
  `I1205 18:30:00.123456   12345 file.py:123] message` (severity I/W/E/F, MMDD, local time with
  microseconds, the process id right-aligned in 7, file:line); a structured call (`extra=kv(...)`)
  writes its message quoted and its pairs after it, as klog's InfoS does: `"Started" port=6443`;
- whatever the format, a bearer token or a JWT that reaches a log line is masked (`redact`): no code
  path should log one, and this keeps a slip from leaking a credential;
- `--logging-format=json`, component-base's JSON logger (zap through zapr): one object per line,
  `{"ts":<epoch milliseconds, float>,"caller":"file.py:123","msg":"...","v":0,<pairs>}`; an error record
  carries no "v" and puts its exception under "err".

Verbosity is klog's: `-v N` lets V(n) <= N through. Python levels map onto it: INFO and above is V(0),
DEBUG is V(4) (klog's "debug" convention), `V(n)` gives the level a V(n) record is logged at.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
import traceback
from typing import Any

from kubeclient.flags import go_int

FORMATS = ("text", "json")
# The last line of defence: a bearer credential or a JWT that reaches a log line anyway is masked.
_SECRETS = re.compile(r"(?i)(bearer\s+)[\w\-.~+/]+=*|eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+")


def redact(text: str) -> str:
    """`text` with bearer tokens and JWTs masked (cheap when there is none)."""
    if "eyJ" not in text and "earer" not in text:
        return text
    return _SECRETS.sub(lambda m: f"{m.group(1)}<redacted>" if m.group(1) else "<redacted>", text)


_NOISY = ("asyncio", "aiohttp.access", "aiohttp.server", "aiohttp.client", "urllib3", "kubernetes.client")


def V(n: int) -> int:
    """The logging level of a klog V(n) record: V(0) is INFO, V(4) is DEBUG."""
    if n <= 0:
        return logging.INFO
    if n == 4:
        return logging.DEBUG
    return logging.INFO - n if n < 4 else max(1, logging.DEBUG - (n - 4))


def verbosity_of(levelno: int) -> int:
    """The klog verbosity of a record at `levelno` (the inverse of V)."""
    if levelno >= logging.INFO:
        return 0
    if levelno > logging.DEBUG:
        return logging.INFO - levelno if logging.INFO - levelno < 4 else 4
    return 4 + (logging.DEBUG - levelno)


def kv(**pairs: Any) -> dict[str, Any]:
    """`log.info("Started", extra=kv(port=6443))`: klog's structured key/value pairs."""
    return {"kv": pairs}


def _verbosity(text: str) -> int:
    value = go_int(text)
    if not -(2**31) <= value < 2**31:
        raise argparse.ArgumentTypeError(f'strconv.ParseInt: parsing "{text}": value out of range')
    return value


def _format_name(text: str) -> str:
    if text not in FORMATS:
        raise argparse.ArgumentTypeError(f'format "{text}" is not supported (permitted: "json", "text")')
    return text


def add_flags(parser: Any) -> None:
    """klog's -v and component-base's --logging-format on a FlagParser."""
    parser.add_argument(
        "-v",
        "--v",
        dest="v",
        type=_verbosity,
        default=0,
        metavar="Level",
        help="number for the log level verbosity",
    )
    parser.add_argument(
        "--logging-format",
        type=_format_name,
        default="text",
        help='Sets the log format. Permitted formats: "json", "text".',
    )
    parser.add_unsupported("--vmodule", reason="per-file verbosity is not implemented; set one level with -v")


def _go_quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _text_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if value is None:
        return "<nil>"
    return _go_quote(value if isinstance(value, str) else str(value))


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict | list | tuple):
        return json.loads(json.dumps(value, default=str))
    return str(value)


class KlogTextFormatter(logging.Formatter):
    """klog's text header and InfoS/Infof body."""

    _SEVERITY = {logging.WARNING: "W", logging.ERROR: "E", logging.CRITICAL: "F"}

    def format(self, record: logging.LogRecord) -> str:
        severity = "I" if record.levelno < logging.WARNING else self._SEVERITY.get(record.levelno, "E")
        when = time.localtime(record.created)
        micros = int((record.created % 1) * 1_000_000)
        header = (
            f"{severity}{when.tm_mon:02d}{when.tm_mday:02d} {when.tm_hour:02d}:{when.tm_min:02d}:"
            f"{when.tm_sec:02d}.{micros:06d} {record.process or os.getpid():7d} {record.filename}:{record.lineno}] "
        )
        message = record.getMessage()
        pairs = getattr(record, "kv", None)
        if isinstance(pairs, dict):
            message = _go_quote(message) + "".join(f" {k}={_text_value(v)}" for k, v in pairs.items())
        if record.exc_info:
            message += f" err={_go_quote(self.formatException(record.exc_info))}"
        return header + redact(message)


class JsonFormatter(logging.Formatter):
    """component-base's JSON shape: ts (epoch ms), caller, msg, v, then the pairs; errors carry err."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": record.created * 1000.0,
            "caller": f"{record.filename}:{record.lineno}",
            "msg": record.getMessage(),
        }
        if record.levelno < logging.ERROR:
            entry["v"] = verbosity_of(record.levelno)
        pairs = getattr(record, "kv", None)
        if isinstance(pairs, dict):
            for key, value in pairs.items():
                entry.setdefault(str(key), _json_value(value))
        if record.exc_info:
            entry["err"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return redact(json.dumps(entry, ensure_ascii=False, separators=(",", ":")))


class VerbosityFilter(logging.Filter):
    """Lets through warnings and errors always, and V(n) records when n <= the configured -v."""

    def __init__(self, verbosity: int) -> None:
        super().__init__()
        self.verbosity = verbosity

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or verbosity_of(record.levelno) <= self.verbosity


def configure(verbosity: int = 0, logging_format: str = "text", stream: Any = None) -> None:
    """Make the root logger write `logging_format` at `verbosity` to stderr (replacing any set-up)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if logging_format == "json" else KlogTextFormatter())
    handler.addFilter(VerbosityFilter(verbosity))
    root.addHandler(handler)
    # The lowest level any record that passes can have (so disabled V levels cost no record at all).
    root.setLevel(min((V(n) for n in range(0, max(verbosity, 0) + 1)), default=logging.INFO))
    for name in _NOISY:
        logging.getLogger(name).setLevel(logging.WARNING if verbosity < 6 else logging.NOTSET)


def configure_from_args(args: argparse.Namespace) -> None:
    """`configure` with the flags `add_flags` declared."""
    configure(getattr(args, "v", 0), getattr(args, "logging_format", "text"))
