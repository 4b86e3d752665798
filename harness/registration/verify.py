"""``[verify]`` clauses: claims about a kernel checked against its hardware counters.

The tensor-core fusion notes: a kernel "fused" on paper can still stream S through memory, miss the tensor
cores or spill registers, and only counters say so. A registration may therefore state
such claims next to its bar::

    [verify]
    clauses = ["dram_read_bytes <= 1.2 * min_bytes", "local_spill_bytes == 0", "tensor_active >= 0.3"]

Each clause is one comparison between two arithmetic expressions, written with the bar
language's tokens (harness/registration/tokens.py: same numbers, names, comparison operators,
same caret-under-the-column errors; never ``eval``)::

    clause = expr CMP expr END
    expr   = term { ( "+" | "-" ) term }
    term   = factor { ( "*" | "/" ) factor }
    factor = NUMBER | NAME | "(" expr ")"

Names are counter metrics of one call of the kernel (``COUNTERS``, summarised from
``ncu`` launches by harness/measurement/counters.py), the same counters of one call of the
workload's bare op at that config (``bare_<counter>``: ``Workload.bare_op``, the core
computation, e.g. gemm_bias_gelu's GEMM without its epilogue) and the workload's formulas of
the config (``FORMULAS``: ``Workload.min_bytes`` and kin). A clause is evaluated on every
profiled (config, candidate) of the line and holds when it holds on each of them; a
missing value (a metric ncu could not read, a bare op that failed its float64 check, a
division by zero) makes it unknown, and an unknown clause is no GO (the bar's three-valued
rule).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Union

from harness.registration.tokens import (COMPARE, END, MAX_NESTING, NAME, NUMBER, OPERATOR, PUNCT, BarError,
                                       syntax_error, tokenize)
from harness.measurement.counters import COUNTERS

# Per-config formulas (bytes and FLOPs any correct kernel must move / do); a workload may
# define some of them nowhere (``Workload.kv_bytes`` None): `bench register` refuses a clause
# naming one its workload does not define (``undefined_names``).
FORMULAS: tuple[str, ...] = ("min_bytes", "min_read_bytes", "kv_bytes", "flops")
# The counters of the workload's bare op (``Workload.bare_op``), profiled at the same config:
# ``bare_dram_read_bytes`` is what the core computation alone reads.
BARE_PREFIX = "bare_"
BARE_COUNTERS: tuple[str, ...] = tuple(BARE_PREFIX + c for c in COUNTERS)
NAMES = COUNTERS + BARE_COUNTERS + FORMULAS
_LABEL = "clause"
_EXAMPLE = 'e.g. "dram_read_bytes <= 1.2 * min_bytes"'


@dataclass(frozen=True)
class Num:
    value: float


@dataclass(frozen=True)
class Name:
    name: str


@dataclass(frozen=True)
class BinOp:
    op: str
    left: "Expr"
    right: "Expr"


Expr = Union[Num, Name, BinOp]


@dataclass(frozen=True)
class Clause:
    """A parsed clause: ``left op right``; ``text`` is its source."""

    text: str
    left: Expr
    op: str
    right: Expr


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text, label=_LABEL)
        self.i = 0
        self.depth = 0

    def peek(self):
        return self.tokens[min(self.i, len(self.tokens) - 1)]

    def advance(self):
        tok = self.peek()
        self.i += 1
        return tok

    def fail(self, tok, what: str, hint: str | None = None) -> BarError:
        return syntax_error(self.text, tok.pos, what, hint, _LABEL)

    def is_punct(self, chars: str) -> bool:
        tok = self.peek()
        return tok.kind == PUNCT and tok.text in chars

    def clause(self) -> Clause:
        left = self.expr()
        op = self.peek()
        if op.kind != OPERATOR:
            raise self.fail(op, f"expected a comparison, got {op.describe()}", "one of == != < <= > >=; " + _EXAMPLE)
        self.advance()
        right = self.expr()
        end = self.peek()
        if end.kind != END:
            raise self.fail(end, f"unexpected {end.describe()}", "one comparison per clause: list several clauses")
        return Clause(self.text, left, op.text, right)

    def expr(self) -> Expr:
        node = self.term()
        while True:
            tok = self.peek()
            if self.is_punct("+-"):
                self.advance()
                node = BinOp(tok.text, node, self.term())
            elif tok.kind == NUMBER and tok.text.startswith("-"):
                # "x -1": the tokenizer read "-1" as a number; here it can only be a subtraction.
                self.advance()
                node = BinOp("-", node, Num(-float(tok.value)))
            else:
                return node

    def term(self) -> Expr:
        node = self.factor()
        while self.is_punct("*/"):
            op = self.advance().text
            node = BinOp(op, node, self.factor())
        return node

    def factor(self) -> Expr:
        tok = self.peek()
        if tok.kind == NUMBER:
            self.advance()
            return Num(float(tok.value))
        if tok.kind == NAME:
            if tok.text not in NAMES:
                raise self.fail(tok, f"unknown name '{tok.text}'",
                                f"counters: {', '.join(COUNTERS)}; the bare op's: {BARE_PREFIX}<counter>; "
                                f"formulas: {', '.join(FORMULAS)}")
            self.advance()
            return Name(tok.text)
        if self.is_punct("("):
            self.advance()
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise self.fail(tok, f"nesting deeper than {MAX_NESTING} levels")
            node = self.expr()
            if not self.is_punct(")"):
                got = self.peek()
                raise self.fail(got, f"expected ')' to close '(', got {got.describe()}")
            self.advance()
            self.depth -= 1
            return node
        raise self.fail(tok, f"expected a number, a name or '(', got {tok.describe()}", _EXAMPLE)


def parse(text: str) -> Clause:
    """Parse one clause; raises BarError (a UserError) naming the column on anything else."""
    if not isinstance(text, str):
        raise BarError(f"{_LABEL}: a clause is a string, got {type(text).__name__}")
    if not text.strip():
        raise syntax_error(text, 0, "empty clause", _EXAMPLE, _LABEL)
    return _Parser(text).clause()


def parse_all(clauses) -> tuple[Clause, ...]:
    """A registration's ``[verify] clauses``: a non-empty list of distinct clause strings."""
    if not isinstance(clauses, list) or not clauses:
        raise BarError(f"clauses must be a non-empty list of strings, {_EXAMPLE}")
    if len(set(map(str, clauses))) != len(clauses):
        raise BarError(f"clauses lists a clause twice: {clauses}")
    return tuple(parse(c) for c in clauses)


def names(node) -> set[str]:
    """Every name a clause or expression uses."""
    if isinstance(node, Clause):
        return names(node.left) | names(node.right)
    if isinstance(node, Name):
        return {node.name}
    if isinstance(node, BinOp):
        return names(node.left) | names(node.right)
    return set()


def bare_names(clauses) -> set[str]:
    """The bare op's counters the clauses name: what makes profiling run the bare op too."""
    return {n for c in clauses for n in names(c) if n in BARE_COUNTERS}


def undefined_names(clauses, workload, configs) -> str | None:
    """Why ``clauses`` cannot be checked on ``workload`` at ``configs``, or None: a clause names
    the bare op's counters and the workload declares no bare op, or a formula the workload does
    not define at one of the configs (its value None there: ``kv_bytes`` outside attention)."""
    for clause in clauses:
        bare = sorted(names(clause) & set(BARE_COUNTERS))
        if bare and not workload.has_bare_op:
            return (f"clause `{clause.text}` names {bare[0]}, but workload '{workload.name}' declares no bare op "
                    f"(Workload.bare_op: docs/workloads.md) — compare with a formula instead")
        for name in sorted(names(clause) & set(FORMULAS)):
            cfg = next((c for c in configs if getattr(workload, name)(c) is None), None)
            if cfg is not None:
                return (f"clause `{clause.text}` names {name}, which workload '{workload.name}' does not define "
                        f"(at {cfg.key()}) — use {', '.join(f for f in FORMULAS if f != name)} or a counter")
    return None


def bare_env(bare: dict | None) -> tuple[dict, dict]:
    """(the ``bare_<counter>`` values, name -> why each has none) of a `profile` row's ``bare``
    (commands/profile.py ``bare_payload``; None: a row profiled without it)."""
    if bare is None:
        return {}, dict.fromkeys(BARE_COUNTERS, "no bare op was profiled with this row")
    if not bare.get("counters"):
        return {}, dict.fromkeys(BARE_COUNTERS, f"bare op: {bare.get('error') or 'no counters'}")
    return {BARE_PREFIX + k: v for k, v in bare["counters"].items() if k in COUNTERS}, {}


_ARITH: dict[str, Callable[[float, float], float | None]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b if b != 0 else None,  # no value, not infinity: the clause is unknown
}


def value(node: Expr, env: dict) -> float | None:
    """The expression over ``env`` (name -> number or None); None when any part is missing."""
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Name):
        v = env.get(node.name)
        return None if v is None else float(v)
    a, b = value(node.left, env), value(node.right, env)
    return None if a is None or b is None else _ARITH[node.op](a, b)


def _times(a: float, b: float) -> float:
    return 0.0 if a == 0 or b == 0 else a * b  # an end at 0 times one at infinity: 0


def span(node: Expr, env: dict) -> tuple[float, float]:
    """The least and greatest value ``node`` can take when each name lies in its ``env`` range
    (name -> (lo, hi)): interval arithmetic, so both ends hold for any values in the ranges."""
    if isinstance(node, Num):
        return node.value, node.value
    if isinstance(node, Name):
        return env[node.name]
    (a0, a1), (b0, b1) = span(node.left, env), span(node.right, env)
    if node.op == "+":
        return a0 + b0, a1 + b1
    if node.op == "-":
        return a0 - b1, a1 - b0
    if node.op == "/":
        if b0 <= 0 <= b1:
            return -math.inf, math.inf  # a divisor that may be 0: anything (or no value)
        b0, b1 = 1 / b1, 1 / b0
    ends = [_times(x, y) for x in (a0, a1) for y in (b0, b1)]
    return min(ends), max(ends)


def possible(clause: Clause, env: dict) -> tuple[bool, bool]:
    """(can hold, can fail): whether ``clause`` can be true, and false, for values in ``env``'s
    ranges (from ``span``: an answer of False is certain, True only possible)."""
    (l0, l1), (r0, r1) = span(clause.left, env), span(clause.right, env)
    lo, hi = l0 - r1, l1 - r0  # left - right
    holds = {"<=": lo <= 0, "<": lo < 0, ">=": hi >= 0, ">": hi > 0, "==": lo <= 0 <= hi, "!=": not lo == hi == 0}
    fails = {"<=": hi > 0, "<": hi >= 0, ">=": lo < 0, ">": lo <= 0, "==": not lo == hi == 0, "!=": lo <= 0 <= hi}
    return holds[clause.op], fails[clause.op]


@dataclass(frozen=True)
class PairCheck:
    """One clause on one (config, candidate): both sides and the truth (None: unknown)."""

    config_key: str
    candidate: str
    left: float | None
    right: float | None
    holds: bool | None
    why: str | None = None  # why an unknown pair has no value, where a row says so


@dataclass(frozen=True)
class ClauseResult:
    """A clause over the line: True only if it holds on every pair (and there is one)."""

    text: str
    passed: bool | None
    checks: tuple[PairCheck, ...]

    def as_row(self, max_listed: int) -> dict:
        bad = [c for c in self.checks if c.holds is not True]
        return {"text": self.text, "passed": self.passed, "n": len(self.checks), "n_failed": len(bad),
                "failing": [{"config_key": c.config_key, "candidate": c.candidate, "left": c.left,
                             "right": c.right, "holds": c.holds, **({"why": c.why} if c.why else {})}
                            for c in bad[:max_listed]]}


def check(clause: Clause, env: dict) -> tuple[float | None, float | None, bool | None]:
    left, right = value(clause.left, env), value(clause.right, env)
    holds = None if left is None or right is None else COMPARE[clause.op](left, right)
    return left, right, holds


def _why(clause: Clause, env: dict, missing: dict) -> str | None:
    """Why an unknown clause has no value at a pair: the first of its names ``missing`` explains."""
    return next((missing[n] for n in sorted(names(clause)) if env.get(n) is None and n in missing), None)


def evaluate(clauses, pairs: list[tuple], missing: dict | None = None) -> tuple[ClauseResult, ...]:
    """Every clause over ``pairs`` of (config_key, candidate, env). A clause fails if it is
    false on any pair; it is unknown (None) if no pair is false but one is unknown, or
    there are no pairs at all. ``missing``: (config_key, candidate) -> {name: why it has no
    value}, the reason an unknown pair's row lists (a bare op that failed its check)."""
    missing = missing or {}
    results = []
    for clause in clauses:
        listed: list[PairCheck] = []
        for ck, cand, env in pairs:
            left, right, holds = check(clause, env)
            why = _why(clause, env, missing.get((ck, cand), {})) if holds is None else None
            listed.append(PairCheck(ck, cand, left, right, holds, why))
        checks = tuple(listed)
        truths = [c.holds for c in checks]
        passed = False if False in truths else (None if None in truths or not truths else True)
        results.append(ClauseResult(clause.text, passed, checks))
    return tuple(results)
