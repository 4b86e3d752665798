"""The expression tokens the bar (bar.py) and ``[verify]`` clauses (verify.py) share.

One tokenizer, so both languages read numbers, names, strings and comparison operators the
same way and point at a mistake the same way (a caret under the 1-based column). Neither
language reaches Python: no ``eval``, ``exec``, ``compile`` or ``ast``.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from typing import Callable

from harness.errors import UserError

# Token kinds.
NUMBER, STRING, NAME, OPERATOR, PUNCT, END = "number", "string", "name", "operator", "punct", "end"

# The comparison operators both languages accept, and what each computes.
COMPARE: dict[str, Callable[[object, object], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}

# Deep nesting is never a real bar or clause; the cap keeps hostile input from hitting
# Python's recursion limit (a bug-shaped RecursionError instead of a BarError).
MAX_NESTING = 32

_NUMBER_RE = re.compile(r"-?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER_TAIL = re.compile(r"[A-Za-z0-9_.]")  # a number glued to these is malformed
_OPERATORS = ("==", "!=", "<=", ">=", "<", ">")  # two-character ones first
_PUNCTUATION = "()[],"
# Arithmetic, for the [verify] clauses (harness/registration/verify.py); the bar grammar has
# no place for it, so the bar parser refuses these tokens where they appear. "-" glued to
# digits is a number's sign (the number rule is tried first).
_ARITHMETIC = "+-*/"


class BarError(UserError):
    """The bar expression is malformed; the message shows where, with a caret."""


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    pos: int  # 0-based offset into the expression
    value: object = None

    def describe(self) -> str:
        if self.kind == END:
            return "end of expression"
        if self.kind in (NUMBER, STRING):
            return f"{self.kind} {self.text}"
        return f"'{self.text}'"


def syntax_error(expr: str, pos: int, what: str, hint: str | None = None, label: str = "bar") -> BarError:
    """A BarError naming the 1-based column, with the expression and a caret under it."""
    suffix = f" ({hint})" if hint else ""
    shown = re.sub(r"\s", " ", expr)  # one column per character, so the caret lines up
    return BarError(f"{label}: {what} at column {pos + 1}{suffix}\n  {shown}\n  {' ' * pos}^")


def tokenize(expr: str, label: str = "bar") -> list[Token]:
    """The tokens of ``expr``, ending with one END token; ``label`` names the language in errors."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(expr):
        ch = expr[pos]
        if ch.isspace():
            pos += 1
            continue
        number = _NUMBER_RE.match(expr, pos)
        if number:
            text = number.group()
            end = number.end()
            if end < len(expr) and _NUMBER_TAIL.match(expr, end):
                raise syntax_error(expr, pos, f"malformed number '{text}{expr[end]}'", label=label)
            value = float(text) if any(c in text for c in ".eE") else int(text)
            if not math.isfinite(value):
                raise syntax_error(expr, pos, f"number {text} is out of range", label=label)
            tokens.append(Token(NUMBER, text, pos, value))
            pos = end
            continue
        name = _NAME_RE.match(expr, pos)
        if name:
            tokens.append(Token(NAME, name.group(), pos))
            pos = name.end()
            continue
        if ch in "\"'":
            close = expr.find(ch, pos + 1)
            if close < 0:
                raise syntax_error(expr, pos, "unterminated string", f"close it with {ch}", label=label)
            tokens.append(Token(STRING, expr[pos : close + 1], pos, expr[pos + 1 : close]))
            pos = close + 1
            continue
        op = next((o for o in _OPERATORS if expr.startswith(o, pos)), None)
        if op:
            tokens.append(Token(OPERATOR, op, pos))
            pos += len(op)
            continue
        if ch in _PUNCTUATION or ch in _ARITHMETIC:
            tokens.append(Token(PUNCT, ch, pos))
            pos += 1
            continue
        hint = "use '==' to compare" if ch == "=" else None
        raise syntax_error(expr, pos, f"unexpected character '{ch}'", hint, label)
    tokens.append(Token(END, "", len(expr)))
    return tokens
