"""A fast path for the CEL rules CRDs mostly carry, in front of controlplane/apiserver/cel.py.

cel-python interprets its parse tree, a millisecond or more per evaluation here; a CRD rule runs on every
write of every object, which would make custom resources several times slower to write than built-in
kinds. Most rules are small (`self.replicas <= self.maxReplicas`, `self == oldSelf`,
`has(self.x) || self.y != ''`, `self.name.startsWith('x-')`, `size(self.items) <= 10`): this module
compiles that subset (field selection, indexing, literals, comparisons, arithmetic on like types, the
logical operators, `?:`, `in`, has/size and a few string methods) once into Python closures. It trusts
only its successes: anything outside the subset does not compile here, and any value it cannot judge
exactly as CEL does (mixed types, a missing field, an overflow, an error) raises Fallback, so the
caller asks cel.py, whose verdict and error text are the reference.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

Env = dict[str, Any]
Fn = Callable[[Env], Any]
_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.\d+|\d+)(?P<unsigned>[uU])?|(?P<str>'[^'\\]*'|\"[^\"\\]*\")|(?P<id>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>==|!=|<=|>=|&&|\|\||[<>!+\-*/%?:.()\[\],]))"
)
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_KEYWORDS = {"true": True, "false": False, "null": None}


class Unsupported(Exception):
    """The expression is outside the subset (cel.py evaluates it)."""


class Fallback(Exception):
    """This evaluation needs cel.py's judgement."""


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    raise Fallback


def _int(value: int) -> int:
    if not _INT_MIN <= value <= _INT_MAX:
        raise Fallback
    return value


def _same(a: Any, b: Any) -> str:
    ka, kb = _kind(a), _kind(b)
    if ka != kb:
        raise Fallback
    return ka


def _compare(op: str) -> Callable[[Any, Any], bool]:
    def run(a: Any, b: Any) -> bool:
        if _same(a, b) not in ("int", "double", "string", "bool"):
            raise Fallback
        if op == "<":
            return a < b
        if op == "<=":
            return a <= b
        if op == ">":
            return a > b
        return a >= b

    return run


def _equal(a: Any, b: Any) -> bool:
    _same(a, b)
    return a == b


def _add(a: Any, b: Any) -> Any:
    kind = _same(a, b)
    if kind == "int":
        return _int(a + b)
    if kind in ("double", "string", "list"):
        return a + b
    raise Fallback


def _arith(op: str) -> Callable[[Any, Any], Any]:
    def run(a: Any, b: Any) -> Any:
        kind = _same(a, b)
        if kind == "int":
            if op == "-":
                return _int(a - b)
            if op == "*":
                return _int(a * b)
            if b == 0:
                raise Fallback
            quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
            return _int(quotient) if op == "/" else _int(a - quotient * b)
        if kind == "double" and op in ("-", "*", "/"):
            if op == "/" and b == 0:
                raise Fallback
            return a - b if op == "-" else a * b if op == "*" else a / b
        raise Fallback

    return run


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "==": _equal,
    "!=": lambda a, b: not _equal(a, b),
    "<": _compare("<"),
    "<=": _compare("<="),
    ">": _compare(">"),
    ">=": _compare(">="),
    "+": _add,
    "-": _arith("-"),
    "*": _arith("*"),
    "/": _arith("/"),
    "%": _arith("%"),
}
_PRECEDENCE = [("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">=", "in"), ("+", "-"), ("*", "/", "%")]


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Fallback
    return value


def _select(target: Fn, name: str) -> Fn:
    def run(env: Env) -> Any:
        value = target(env)
        if not isinstance(value, dict) or name not in value:
            raise Fallback
        return value[name]

    return run


def _has(target: Fn, name: str) -> Fn:
    def run(env: Env) -> bool:
        value = target(env)
        if not isinstance(value, dict):
            raise Fallback
        return name in value

    return run


def _index(target: Fn, key: Fn) -> Fn:
    def run(env: Env) -> Any:
        value, k = target(env), key(env)
        if isinstance(value, list) and _kind(k) == "int" and 0 <= k < len(value):
            return value[k]
        if isinstance(value, dict) and isinstance(k, str) and k in value:
            return value[k]
        raise Fallback

    return run


def _size(target: Fn) -> Fn:
    def run(env: Env) -> int:
        value = target(env)
        if not isinstance(value, str | list | dict):
            raise Fallback
        return len(value)

    return run


def _string_method(name: str, target: Fn, arg: Fn) -> Fn:
    def run(env: Env) -> bool:
        value, other = target(env), arg(env)
        if not isinstance(value, str) or not isinstance(other, str):
            raise Fallback
        if name == "startsWith":
            return value.startswith(other)
        if name == "endsWith":
            return value.endswith(other)
        return other in value

    return run


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, Any]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise Unsupported(text[pos:])
            pos = m.end()
            if m.group("num") is not None:
                if m.group("unsigned"):
                    raise Unsupported("uint")
                num = m.group("num")
                self.tokens.append(("lit", float(num) if "." in num else int(num)))
            elif m.group("str") is not None:
                self.tokens.append(("lit", m.group("str")[1:-1]))
            elif m.group("id") is not None:
                word = m.group("id")
                self.tokens.append(("lit", _KEYWORDS[word]) if word in _KEYWORDS else ("id", word))
            elif m.group("op") is not None:
                self.tokens.append(("op", m.group("op")))
        self.at = 0

    def peek(self) -> tuple[str, Any] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, op: str | None = None) -> tuple[str, Any]:
        token = self.peek()
        if token is None or (op is not None and token != ("op", op)):
            raise Unsupported(f"expected {op}")
        self.at += 1
        return token

    def is_op(self, *ops: str) -> bool:
        token = self.peek()
        return token is not None and (
            (token[0] == "op" and token[1] in ops) or (token == ("id", "in") and "in" in ops)
        )

    def parse(self) -> Fn:
        fn = self.ternary()
        if self.peek() is not None:
            raise Unsupported("trailing input")
        return fn

    def ternary(self) -> Fn:
        cond = self.binary(0)
        if not self.is_op("?"):
            return cond
        self.take("?")
        yes = self.ternary()
        self.take(":")
        no = self.ternary()
        return lambda env: yes(env) if _bool(cond(env)) else no(env)

    def binary(self, level: int) -> Fn:
        if level == len(_PRECEDENCE):
            return self.unary()
        left = self.binary(level + 1)
        while self.is_op(*_PRECEDENCE[level]):
            op = self.take()[1]
            right = self.binary(level + 1)
            left = self._combine(op, left, right)
        return left

    @staticmethod
    def _combine(op: str, left: Fn, right: Fn) -> Fn:
        if op == "&&":
            return lambda env: _bool(left(env)) and _bool(right(env))
        if op == "||":
            return lambda env: _bool(left(env)) or _bool(right(env))
        if op == "in":

            def member(env: Env) -> bool:
                item, container = left(env), right(env)
                if isinstance(container, dict):
                    if not isinstance(item, str):
                        raise Fallback
                    return item in container
                if isinstance(container, list):
                    return any(_kind(item) == _kind(c) and item == c for c in container)
                raise Fallback

            return member
        fn = _BINARY[op]
        return lambda env: fn(left(env), right(env))

    def unary(self) -> Fn:
        if self.is_op("!"):
            self.take()
            inner = self.unary()
            return lambda env: not _bool(inner(env))
        if self.is_op("-"):
            self.take()
            inner = self.unary()

            def negate(env: Env) -> Any:
                value = inner(env)
                if _kind(value) == "int":
                    return _int(-value)
                if _kind(value) == "double":
                    return -value
                raise Fallback

            return negate
        return self.member()

    def member(self) -> Fn:
        fn = self.primary()
        while self.is_op(".", "["):
            if self.take()[1] == "[":
                key = self.ternary()
                self.take("]")
                fn = _index(fn, key)
                continue
            kind, name = self.take()
            if kind != "id":
                raise Unsupported("field name")
            if self.is_op("("):
                self.take("(")
                args = self.arguments()
                if name == "size" and not args:
                    fn = _size(fn)
                elif name in ("startsWith", "endsWith", "contains") and len(args) == 1:
                    fn = _string_method(name, fn, args[0])
                else:
                    raise Unsupported(name)
            else:
                fn = _select(fn, name)
        return fn

    def arguments(self) -> list[Fn]:
        args: list[Fn] = []
        while not self.is_op(")"):
            args.append(self.ternary())
            if self.is_op(","):
                self.take(",")
        self.take(")")
        return args

    def primary(self) -> Fn:
        kind, value = self.take()
        if kind == "lit":
            return lambda env: value
        if kind == "op" and value == "(":
            inner = self.ternary()
            self.take(")")
            return inner
        if kind != "id":
            raise Unsupported(str(value))
        if value == "has" and self.is_op("("):
            return self.presence()
        if value == "size" and self.is_op("("):
            self.take("(")
            args = self.arguments()
            if len(args) != 1:
                raise Unsupported("size")
            return _size(args[0])
        if self.is_op("("):
            raise Unsupported(value)
        return lambda env: env[value] if value in env else _missing()

    def presence(self) -> Fn:
        """has(a.b): whether `a` holds `b` (never an error for a missing b)."""
        self.take("(")
        target = self.primary()
        name: str | None = None
        while self.is_op(".", "["):
            if name is not None:
                target, name = _select(target, name), None
            if self.take()[1] == "[":
                key = self.ternary()
                self.take("]")
                target = _index(target, key)
                continue
            kind, word = self.take()
            if kind != "id":
                raise Unsupported("field name")
            name = word
        if name is None:
            raise Unsupported("has() needs a field selection")
        self.take(")")
        return _has(target, name)


def _missing() -> Any:
    raise Fallback


@lru_cache(maxsize=4096)
def compile_fast(expression: str) -> Fn | None:
    """The closure for `expression`, or None when it is outside the subset."""
    try:
        return _Parser(expression).parse()
    except (Unsupported, IndexError, KeyError):
        return None


def evaluate(expression: str, bindings: Env) -> Any:
    """The value of `expression`; raises Fallback when only cel.py can say."""
    fn = compile_fast(expression)
    if fn is None:
        raise Fallback
    return fn(bindings)


__all__ = ["Fallback", "compile_fast", "evaluate"]
