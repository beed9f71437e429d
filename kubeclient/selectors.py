"""Label and field selectors, as upstream's `labels.Parse`, `metav1.LabelSelectorAsSelector` and
`fields.ParseSelector` read and match them.

The API server filters lists and watches with them, controllers match pods to their owners with them,
clients send them: one grammar, one set of error texts, one matching rule for all.

- `parse_labels("app=web,tier in (a,b),!legacy")` reads the string form (400 on the server if wrong);
- `from_label_selector({"matchLabels": ..., "matchExpressions": ...})` reads the object form: `None`
  selects nothing, `{}` selects everything, as upstream;
- `parse_fields("spec.nodeName=n1,status.phase!=Failed")` reads field selectors (with `\\` escapes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kubeclient import names

EQUALS, DOUBLE_EQUALS, NOT_EQUALS = "=", "==", "!="
IN, NOT_IN, EXISTS, DOES_NOT_EXIST = "in", "notin", "exists", "!"
GREATER_THAN, LESS_THAN = "gt", "lt"
_SINGLE_VALUE = (EQUALS, DOUBLE_EQUALS, NOT_EQUALS)


class SelectorError(ValueError):
    """The selector cannot be parsed or built; the message is upstream's."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    @classmethod
    def new(cls, key: str, operator: str, values: Iterable[str] = ()) -> Requirement:
        """upstream's NewRequirement: checks the key, the operator's arity and every value."""
        problems = names.qualified_name(key)
        if problems:
            raise SelectorError(f'invalid label key "{key}": {"; ".join(problems)}')
        vals = tuple(values)
        if operator in (IN, NOT_IN):
            if not vals:
                raise SelectorError("for 'in', 'notin' operators, values set can't be empty")
            vals = tuple(sorted(set(vals)))
        elif operator in _SINGLE_VALUE:
            if len(vals) != 1:
                raise SelectorError("exact-match compatibility requires one single value")
        elif operator in (EXISTS, DOES_NOT_EXIST):
            if vals:
                raise SelectorError("values set must be empty for exists and does not exist")
        elif operator in (GREATER_THAN, LESS_THAN):
            if len(vals) != 1:
                raise SelectorError("for 'Gt', 'Lt' operators, exactly one value is required")
            try:
                int(vals[0])
            except ValueError:
                raise SelectorError("for 'Gt', 'Lt' operators, the value must be an integer") from None
        else:
            raise SelectorError(f"operator '{operator}' is not recognized")
        if operator not in (GREATER_THAN, LESS_THAN):
            for v in vals:
                problems = names.label_value(v)
                if problems:
                    raise SelectorError(f'invalid label value: "{v}": at key: "{key}": {"; ".join(problems)}')
        return cls(key, operator, vals)

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case "=" | "==" | "in":
                return present and labels[self.key] in self.values
            case "!=" | "notin":
                return not present or labels[self.key] not in self.values
            case "exists":
                return present
            case "!":
                return not present
            case "gt" | "lt":
                if not present:
                    return False
                try:
                    have = int(labels[self.key])
                except ValueError:
                    return False
                bound = int(self.values[0])
                return have > bound if self.operator == GREATER_THAN else have < bound
        return False

    def __str__(self) -> str:
        match self.operator:
            case "exists":
                return self.key
            case "!":
                return f"!{self.key}"
            case "in" | "notin":
                return f"{self.key} {self.operator} ({','.join(self.values)})"
            case "gt":
                return f"{self.key}>{self.values[0]}"
            case "lt":
                return f"{self.key}<{self.values[0]}"
        return f"{self.key}{self.operator}{self.values[0]}"


@dataclass(frozen=True)
class Selector:
    """Requirements that must all hold. `nothing` is the selector of a nil LabelSelector."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        """Selects everything."""
        return not self.nothing and not self.requirements

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


EVERYTHING = Selector()
NOTHING = Selector(nothing=True)


def _sorted(requirements: Iterable[Requirement]) -> Selector:
    return Selector(tuple(sorted(requirements, key=lambda r: r.key)))


def from_set(labels: Mapping[str, str]) -> Selector:
    """key=value for each label (the selector a Service's `spec.selector` is)."""
    return _sorted(Requirement.new(k, EQUALS, (v,)) for k, v in labels.items())


_EXPRESSION_OPERATORS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def from_label_selector(selector: Mapping[str, object] | None) -> Selector:
    """metav1.LabelSelectorAsSelector: None selects nothing, an empty selector everything."""
    if selector is None:
        return NOTHING
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        raise SelectorError("matchLabels must be a map and matchExpressions a list")
    requirements = [Requirement.new(str(k), EQUALS, (str(v),)) for k, v in match_labels.items()]
    for expr in expressions:
        if not isinstance(expr, Mapping):
            raise SelectorError("a match expression must be an object")
        op = _EXPRESSION_OPERATORS.get(str(expr.get("operator")))
        if op is None:
            raise SelectorError(f'"{expr.get("operator")}" is not a valid label selector operator')
        values = expr.get("values") or []
        requirements.append(Requirement.new(str(expr.get("key", "")), op, [str(v) for v in values]))  # type: ignore[union-attr]
    return _sorted(requirements)


# --- the string form ------------------------------------------------------------------------------

_SPECIAL = frozenset("=!(),><")
_OPERATOR_TOKENS = {
    "=": EQUALS,
    "==": DOUBLE_EQUALS,
    "!=": NOT_EQUALS,
    "in": IN,
    "notin": NOT_IN,
    ">": GREATER_THAN,
    "<": LESS_THAN,
}


@dataclass
class _Lexer:
    text: str
    pos: int = 0
    tokens: list[tuple[str, str]] = field(default_factory=list)  # (kind, literal)

    def run(self) -> list[tuple[str, str]]:
        text, n = self.text, len(self.text)
        while self.pos < n:
            ch = text[self.pos]
            if ch.isspace():
                self.pos += 1
            elif ch in _SPECIAL:
                start = self.pos
                while (
                    self.pos < n
                    and text[self.pos] in _SPECIAL
                    and text[start : self.pos + 1] in ("=", "==", "!", "!=", "(", ")", ",", ">", "<")
                ):
                    self.pos += 1
                    if text[start : self.pos] in ("(", ")", ","):
                        break
                literal = text[start : self.pos]
                kind = {"(": "open", ")": "close", ",": "comma", "!": "not"}.get(literal, "op")
                self.tokens.append((kind, literal))
            else:
                start = self.pos
                while self.pos < n and not text[self.pos].isspace() and text[self.pos] not in _SPECIAL:
                    self.pos += 1
                word = text[start : self.pos]
                self.tokens.append(("op" if word in ("in", "notin") else "id", word))
        self.tokens.append(("end", ""))
        return self.tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _Lexer(text).run()
        self.i = 0

    def peek(self, values: bool = False) -> tuple[str, str]:
        kind, lit = self.tokens[self.i]
        if values and kind == "op" and lit in ("in", "notin"):
            return "id", lit  # in value position, `in` is just a word
        return kind, lit

    def take(self, values: bool = False) -> tuple[str, str]:
        token = self.peek(values)
        self.i += 1
        return token

    def parse(self) -> Selector:
        requirements: list[Requirement] = []
        while True:
            kind, lit = self.peek(values=True)
            if kind == "end":
                return _sorted(requirements)
            if kind not in ("id", "not"):
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")
            try:
                requirements.append(self.requirement())
            except SelectorError as err:
                raise SelectorError(f"unable to parse requirement: {err}") from None
            kind, lit = self.take(values=True)
            if kind == "end":
                return _sorted(requirements)
            if kind != "comma":
                raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            kind, lit = self.peek(values=True)
            if kind not in ("id", "not"):
                raise SelectorError(f"found '{lit}', expected: identifier after ','")

    def requirement(self) -> Requirement:
        negated = False
        if self.peek()[0] == "not":
            self.take()
            negated = True
        kind, key = self.take(values=True)
        if kind != "id":
            raise SelectorError(f"found '{key}', expected: identifier")
        problems = names.qualified_name(key)
        if problems:
            raise SelectorError(f'invalid label key "{key}": {"; ".join(problems)}')
        kind, lit = self.peek()
        if kind in ("end", "comma"):
            return Requirement.new(key, DOES_NOT_EXIST if negated else EXISTS)
        if negated:
            raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
        kind, lit = self.take()
        operator = _OPERATOR_TOKENS.get(lit) if kind == "op" else None
        if operator is None:
            raise SelectorError(f"found '{lit}', expected: !=, <, =, ==, >, in, notin")
        if operator in (IN, NOT_IN):
            return Requirement.new(key, operator, self.value_set())
        kind, lit = self.peek(values=True)
        if kind in ("end", "comma"):
            return Requirement.new(key, operator, ("",))
        if kind != "id":
            raise SelectorError(f"found '{lit}', expected: identifier")
        self.take(values=True)
        return Requirement.new(key, operator, (lit,))

    def value_set(self) -> list[str]:
        kind, lit = self.take()
        if kind != "open":
            raise SelectorError(f"found '{lit}', expected: '('")
        values: list[str] = []
        expect_value = True
        while True:
            kind, lit = self.take(values=True)
            if kind == "close":
                if expect_value and values:
                    values.append("")
                return values
            if kind == "comma":
                if expect_value:
                    values.append("")
                expect_value = True
            elif kind == "id" and expect_value:
                values.append(lit)
                expect_value = False
            else:
                raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")


def parse_labels(text: str) -> Selector:
    """A label selector's string form; SelectorError with upstream's message if it is not one."""
    return _Parser(text).parse()


# --- field selectors ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    equal: bool
    value: str

    def __str__(self) -> str:
        return f"{self.field}{'=' if self.equal else '!='}{_escape(self.value)}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise SelectorError(f"invalid field selector: '{value}': invalid escape sequence")
            out.append(value[i + 1])
            i += 2
            continue
        if ch in ",=":
            raise SelectorError(f"invalid field selector: '{value}': unescaped {ch}")
        out.append(ch)
        i += 1
    return "".join(out)


def parse_fields(text: str) -> list[FieldRequirement]:
    """`a=b,c!=d` (also `==`); values may escape `\\`, `,` and `=` with a backslash, as upstream."""
    out: list[FieldRequirement] = []
    if not text.strip():
        return out
    for part in _split_unescaped(text, ","):
        if not part.strip():
            continue
        for op, equal in (("!=", False), ("==", True), ("=", True)):
            idx = _find_unescaped(part, op)
            if idx >= 0:
                name, value = part[:idx].strip(), part[idx + len(op) :]
                out.append(FieldRequirement(name, equal, _unescape(value.strip())))
                break
        else:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
    return out


def _find_unescaped(text: str, op: str) -> int:
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(op, i):
            return i
        i += 1
    return -1


def format_label_selector(selector: Mapping[str, object] | None) -> str:
    """kubectl's rendering of a LabelSelector object (`app=web,tier in (a,b)`), `<none>` if empty."""
    if not selector:
        return "<none>"
    try:
        text = str(from_label_selector(selector))
    except SelectorError:
        return "<error>"
    return text or "<none>"
