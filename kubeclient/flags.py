"""One command-line syntax for every pykubelet command: upstream's Go flags (spf13/pflag) on argparse.

People paste flags from upstream's docs and kubeadm's manifests, so every command reads them as the
Kubernetes components do:

- booleans as pflag takes them: `--x` is true, `--x=true` / `--x=false` (strconv.ParseBool's spellings);
  `--x false` does NOT take `false` as the value (pflag's NoOptDefVal), so it stays a stray argument;
- durations in Go's syntax (`90s`, `1h30m`, `500ms`), refused with Go's message otherwise;
- string lists repeated or comma-separated (pflag's StringSlice: the first use replaces the default);
- no abbreviations (`--kube` is not `--kubeconfig`), an unknown flag refused by name with exit 2;
- a flag upstream has and we cannot honour is declared with `add_unsupported`: it is refused with a
  message saying so (exit 2), never accepted and ignored.

`FlagParser.add_argument` turns argparse's `store_true` and `BooleanOptionalAction` into Go booleans, so a
command's flag table stays ordinary argparse; it requires help text and appends the default to it as
pflag's usage does (`(default 6443)`).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from typing import Any

from kubeclient.duration import format_go_duration, parse_go_duration

_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def parse_go_bool(text: str) -> bool:
    """strconv.ParseBool."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def go_duration(text: str) -> float:
    """A Go duration flag value, in seconds."""
    try:
        return parse_go_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def go_int(text: str) -> int:
    """strconv.ParseInt(text, 0, 64) as pflag's int flags read it (0x.., 0o.., 0b.. accepted)."""
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f'strconv.ParseInt: parsing "{text}": invalid syntax') from None


def split_list(text: str) -> list[str]:
    """A StringSlice value: comma-separated, read as one CSV record (pflag does the same)."""
    if not text:
        return []
    return [item.strip() for item in next(csv.reader([text]))]


class GoBool(argparse.Action):
    """A pflag boolean: bare means true, `=value` takes strconv.ParseBool's spellings."""

    def __init__(self, option_strings: Sequence[str], dest: str, default: Any = False, **kwargs: Any) -> None:
        kwargs.pop("nargs", None)
        kwargs.pop("type", None)
        kwargs.pop("const", None)
        super().__init__(
            option_strings, dest, nargs="?", const=True, default=default, type=parse_go_bool, **kwargs
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, True if values is None else values)


class StringSlice(argparse.Action):
    """pflag's StringSlice: comma-separated and/or repeated; the first use replaces the default."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.pop("nargs", None)
        self.item_type = kwargs.pop("type", None)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        seen = getattr(namespace, f"_{self.dest}_seen", False)
        current = list(getattr(namespace, self.dest) or []) if seen else []
        items = split_list(values)
        if self.item_type is not None:
            try:
                items = [self.item_type(i) for i in items]
            except (ValueError, argparse.ArgumentTypeError) as err:
                raise argparse.ArgumentError(self, f'invalid argument "{values}": {err}') from None
        setattr(namespace, self.dest, current + items)
        setattr(namespace, f"_{self.dest}_seen", True)


class Unsupported(argparse.Action):
    """An upstream flag pykubelet cannot honour: refused by name, with the reason."""

    def __init__(self, option_strings: Sequence[str], dest: str, reason: str = "", **kwargs: Any) -> None:
        self.reason = reason
        kwargs.setdefault("help", f"not supported by pykubelet: {reason}")
        super().__init__(option_strings, dest, nargs=kwargs.pop("nargs", None), **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        parser.error(f"flag {option_string} is not supported by pykubelet: {self.reason}")


def _type_name(kwargs: dict[str, Any]) -> str:
    """pflag's placeholder for a flag's value: its type's name."""
    if kwargs.get("action") is StringSlice or kwargs.get("action") == "append":
        return "strings"
    kind = kwargs.get("type")
    if kind is go_duration:
        return "duration"
    if kind in (int, go_int):
        return "int"
    if kind is float:
        return "float"
    return "string"


def _format_default(default: Any, action: argparse.Action) -> str:
    if isinstance(action, StringSlice) or isinstance(default, list | tuple):
        return "[" + ",".join(str(d) for d in default) + "]"
    if getattr(action, "type", None) is go_duration and isinstance(default, int | float):
        return format_go_duration(default)
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, str):
        return f'"{default}"' if " " in default else default
    return str(default)


def _shows_no_default(default: Any) -> bool:
    return default is None or default is False or default == "" or default == [] or default == ()


class GoHelpFormatter(argparse.HelpFormatter):
    """Booleans show as `--x` (their optional value is `=true|false`), wide enough for long flag names."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=40, width=110)

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        if isinstance(action, GoBool):
            return "[=true|false]"
        return super()._format_args(action, default_metavar)


class FlagParser(argparse.ArgumentParser):
    """argparse with pflag's syntax (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", GoHelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:  # type: ignore[override]
        action = kwargs.get("action")
        if action in ("store_true", argparse.BooleanOptionalAction):
            kwargs["action"] = GoBool
            kwargs.setdefault("default", False)
        if names and names[0].startswith("-") and kwargs.get("help") is None and action != "help":
            raise ValueError(f"flag {names[0]} has no help text")
        if (
            names
            and names[0].startswith("-")
            and "metavar" not in kwargs
            and kwargs.get("action") in (None, "store", "append", StringSlice)
        ):
            kwargs["metavar"] = _type_name(kwargs)
        created = super().add_argument(*names, **kwargs)
        text = created.help
        if (
            created.option_strings
            and text
            and text is not argparse.SUPPRESS
            and "(default" not in text
            and "default:" not in text
            and not _shows_no_default(created.default)
            and not isinstance(created, argparse._HelpAction)
        ):
            created.help = f"{text} (default {_format_default(created.default, created)})".replace("%", "%%")
        return created

    def add_unsupported(self, *names: str, reason: str, takes_value: bool = True) -> None:
        """Declare an upstream flag that is refused, with `reason`, whenever it is given."""
        self.add_argument(
            *names,
            action=Unsupported,
            reason=reason,
            nargs=None if takes_value else 0,
            help=f"not supported by pykubelet: {reason}",
        )

    def bool_options(self) -> set[str]:
        return {s for a in self._actions if isinstance(a, GoBool) for s in a.option_strings}

    def go_argv(self, args: Sequence[str]) -> list[str]:
        """Bare booleans become `--x=true` so that argparse never takes the next word as their value."""
        bools = self.bool_options()
        out: list[str] = []
        for i, token in enumerate(args):
            if token == "--":
                return out + list(args[i:])
            out.append(f"{token}=true" if token in bools else token)
        return out

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        argv = self.go_argv(sys.argv[1:] if args is None else args)
        return super().parse_known_args(argv, namespace)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        for token in extras:
            if token.startswith("-") and token != "-":
                self.error(f"unknown flag: {token.split('=', 1)[0]}")
        if extras:
            self.error(f"unexpected argument: {extras[0]}")
        for name in list(vars(parsed)):
            if name.startswith("_") and name.endswith("_seen"):
                delattr(parsed, name)
        parsed._changed = self.changed(sys.argv[1:] if args is None else args)
        return parsed

    def changed(self, args: Sequence[str]) -> frozenset[str]:
        """The dests of the flags `args` sets (pflag's Changed): a config file yields to them."""
        given = {token.split("=", 1)[0] for token in args if token.startswith("-")}
        return frozenset(
            a.dest
            for a in self._actions
            if any(
                o in given or (len(o) == 2 and any(t.startswith(o) for t in given)) for o in a.option_strings
            )
        )
