"""The GO/NO-GO bar: a small expression language, parsed without ``eval``.

A registration's ``[bar] go = "..."`` is fixed before any number exists, so it must be
checked completely at register time (names, types, syntax) and then evaluated
mechanically over the ledger's per-config rows. A hand-written tokenizer and
recursive-descent parser accept only the grammar below; nothing in the text can reach
Python (no ``eval``, ``exec``, ``compile`` or ``ast``).

Grammar (EBNF; keywords are lower case, names are case-sensitive)::

    bar        = bool_expr END
    bool_expr  = and_expr { "or" and_expr }
    and_expr   = not_expr { "and" not_expr }
    not_expr   = "not" not_expr | "(" bool_expr ")" | comparison
    comparison = aggregate CMP NUMBER
    aggregate  = AGG "(" [ METRIC ] [ "where" filter ] ")"
               | ( "pass_rate" | "count" )               (* bare: no parentheses *)
    filter     = f_and { "or" f_and }
    f_and      = f_not { "and" f_not }
    f_not      = "not" f_not | "(" filter ")" | test
    test       = FIELD CMP literal
               | FIELD [ "not" ] "in" "[" literal { "," literal } "]"
               | FIELD                                   (* bool fields only: "causal" *)
    literal    = NUMBER | STRING | "true" | "false"
    CMP        = "==" | "!=" | "<" | "<=" | ">" | ">="
    NUMBER     = [ "-" ] ( digits [ "." digits ] | "." digits ) [ ( "e" | "E" ) [ "+" | "-" ] digits ]
    STRING     = '"' chars '"' | "'" chars "'"           (* no escapes *)

Aggregates (AGG) and what they take:

* ``geomean min max median mean`` need a METRIC; they reduce the metric over rows that
  match the filter, passed the correctness gate (``correct``) and measured the metric.
* ``count(METRIC ...)`` counts those same rows; ``count`` / ``count(where ...)`` with no
  metric counts every filter-matching row, correct or not (sweep coverage).
* ``pass_rate`` / ``pass_rate(where ...)`` takes no metric: the fraction of
  filter-matching rows that are ``correct``.

Semantics: an aggregate over zero rows is ``None`` (``count`` is 0: an empty count is
still a count) and any comparison with ``None`` is false, so a bar over a slice the
sweep never produced fails closed. Every comparison is a *clause*, reported on its own
with the value that decided it; ``and``/``or``/``not`` combine clause results, all
clauses are evaluated (no short-circuit) so the verdict can show each one.

Type rules, checked at parse time: int fields take numbers and every CMP; str fields
take quoted strings and only ``==``/``!=``/``in``; bool fields take ``true``/``false``
and only ``==``/``!=``/``in``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Union

from harness.governance.metrics import NAMES
from harness.governance.tokens import (COMPARE, END, MAX_NESTING, NAME, NUMBER, OPERATOR, PUNCT, STRING, BarError,
                                       Token, syntax_error, tokenize)

# The metric names a bar may aggregate: the metric table's (every one a result row carries).
METRICS: tuple[str, ...] = NAMES

FILTER_FIELDS: dict[str, type] = {
    "workload": str,
    "batch": int,
    "heads": int,
    "kv_heads": int,
    "seq_len": int,
    "head_dim": int,
    "dtype": str,
    "causal": bool,
    "candidate": str,
}

AGGREGATES: tuple[str, ...] = ("geomean", "min", "max", "median", "mean", "count", "pass_rate")

# Aggregates that may omit the metric / the parentheses; pass_rate must omit the metric.
_METRIC_OPTIONAL = frozenset({"count", "pass_rate"})
_NO_METRIC = frozenset({"pass_rate"})

KEYWORDS = frozenset({"and", "or", "not", "where", "in", "true", "false"})

_EQUALITY_OPS = frozenset({"==", "!="})

_EXAMPLE = "e.g. geomean(speedup) >= 1.10 and pass_rate == 1.0"


# --------------------------------------------------------------------------- nodes


@dataclass(frozen=True)
class Not:
    operand: "Node"


@dataclass(frozen=True)
class And:
    operands: tuple["Node", ...]


@dataclass(frozen=True)
class Or:
    operands: tuple["Node", ...]


@dataclass(frozen=True)
class FieldTest:
    """``field op value``; for ``in`` / ``not in`` the value is a tuple of literals."""

    field: str
    op: str
    value: object


@dataclass(frozen=True)
class Aggregate:
    func: str
    metric: str | None
    where: "Node | None"


@dataclass(frozen=True)
class Comparison:
    """One clause: ``aggregate op threshold``; ``text`` is its exact source slice."""

    aggregate: Aggregate
    op: str
    threshold: float
    text: str
    index: int  # position among the bar's clauses, in source order


Node = Union[Not, And, Or, FieldTest, Comparison]


@dataclass(frozen=True)
class Bar:
    """A parsed bar: the source text and its syntax tree."""

    expr: str
    root: Node
    _clauses: tuple[Comparison, ...]

    def clauses(self) -> list[Comparison]:
        """The comparisons in source order; each has ``.text`` (source) and its parts."""
        return list(self._clauses)

    def __str__(self) -> str:
        return self.expr


# --------------------------------------------------------------------------- parser


class _Parser:
    def __init__(self, expr: str):
        self.expr = expr
        self.tokens = tokenize(expr)
        self.i = 0
        self.depth = 0
        self.clauses: list[Comparison] = []

    # token helpers
    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        tok = self.peek()
        self.i += 1
        return tok

    def is_word(self, word: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok.kind == NAME and tok.text == word

    def is_punct(self, ch: str) -> bool:
        tok = self.peek()
        return tok.kind == PUNCT and tok.text == ch

    def fail(self, tok: Token, what: str, hint: str | None = None) -> BarError:
        return syntax_error(self.expr, tok.pos, what, hint)

    def expect_punct(self, ch: str, context: str) -> Token:
        if not self.is_punct(ch):
            tok = self.peek()
            raise self.fail(tok, f"expected '{ch}' {context}, got {tok.describe()}")
        return self.advance()

    # boolean structure, shared by the top level (clauses) and filters (field tests)
    def bool_expr(self, leaf: Callable[[], Node]) -> Node:
        operands = [self.and_expr(leaf)]
        while self.is_word("or"):
            self.advance()
            operands.append(self.and_expr(leaf))
        return operands[0] if len(operands) == 1 else Or(tuple(operands))

    def and_expr(self, leaf: Callable[[], Node]) -> Node:
        operands = [self.not_expr(leaf)]
        while self.is_word("and"):
            self.advance()
            operands.append(self.not_expr(leaf))
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def not_expr(self, leaf: Callable[[], Node]) -> Node:
        if not (self.is_word("not") or self.is_punct("(")):
            return leaf()
        tok = self.advance()
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.fail(tok, f"nesting deeper than {MAX_NESTING} levels")
        if tok.text == "not":
            node: Node = Not(self.not_expr(leaf))
        else:
            node = self.bool_expr(leaf)
            self.expect_punct(")", "to close '('")
        self.depth -= 1
        return node

    # top level
    def parse(self) -> Bar:
        root = self.bool_expr(self.comparison)
        self.expect_end("expected 'and', 'or' or the end")
        return Bar(self.expr, root, tuple(self.clauses))

    def parse_aggregate(self) -> Aggregate:
        agg = self.aggregate()
        self.expect_end("expected only an aggregate, e.g. geomean(speedup)")
        return agg

    def expect_end(self, hint: str) -> None:
        tok = self.peek()
        if tok.kind != END:
            raise self.fail(tok, f"unexpected {tok.describe()}", hint)

    def comparison(self) -> Comparison:
        start = self.peek().pos
        agg = self.aggregate()
        op = self.peek()
        if op.kind != OPERATOR:
            raise self.fail(op, f"expected a comparison after {agg.func}, got {op.describe()}",
                            "one of == != < <= > >= and a number")
        self.advance()
        num = self.peek()
        if num.kind != NUMBER:
            raise self.fail(num, f"expected a number after '{op.text}', got {num.describe()}")
        self.advance()
        end = num.pos + len(num.text)
        clause = Comparison(agg, op.text, float(num.value), self.expr[start:end], len(self.clauses))
        self.clauses.append(clause)
        return clause

    def aggregate(self) -> Aggregate:
        tok = self.peek()
        if tok.kind != NAME or tok.text in KEYWORDS:
            raise self.fail(tok, f"expected an aggregate, got {tok.describe()}",
                            f"known: {', '.join(AGGREGATES)}; {_EXAMPLE}")
        if tok.text in METRICS:
            raise self.fail(tok, f"'{tok.text}' is a metric, not an aggregate",
                            f"wrap it, e.g. geomean({tok.text})")
        if tok.text not in AGGREGATES:
            raise self.fail(tok, f"unknown aggregate '{tok.text}'", f"known: {', '.join(AGGREGATES)}")
        func = self.advance().text
        if not self.is_punct("("):
            if func in _METRIC_OPTIONAL:
                return Aggregate(func, None, None)
            raise self.fail(self.peek(), f"{func} needs a metric in parentheses",
                            f"e.g. {func}(speedup)")
        self.advance()
        metric = self.metric(func)
        where = None
        if self.is_word("where"):
            self.advance()
            where = self.bool_expr(self.field_test)
        context = "after the filter" if where else "or 'where'"
        self.expect_punct(")", f"{context} to close {func}(")
        return Aggregate(func, metric, where)

    def metric(self, func: str) -> str | None:
        tok = self.peek()
        if tok.kind != NAME or tok.text == "where":
            if func in _METRIC_OPTIONAL:
                return None
            raise self.fail(tok, f"{func} needs a metric, got {tok.describe()}",
                            f"e.g. {func}(speedup where seq_len >= 2048)")
        name = tok.text
        if func in _NO_METRIC:
            raise self.fail(tok, f"{func} takes no metric, got '{name}'",
                            f"it is the fraction of correct rows; filter with {func}(where ...)")
        if name in AGGREGATES:
            raise self.fail(tok, f"aggregates do not nest: '{name}' inside {func}(")
        if name in FILTER_FIELDS:
            raise self.fail(tok, f"'{name}' is a filter field, not a metric",
                            f"filter with {func}(speedup where {name} ...)")
        if name not in METRICS:
            raise self.fail(tok, f"unknown metric '{name}'", f"known: {', '.join(METRICS)}")
        self.advance()
        return name

    # filters
    def field_test(self) -> FieldTest:
        tok = self.peek()
        known = f"known: {', '.join(FILTER_FIELDS)}"
        if tok.kind != NAME or tok.text in KEYWORDS:
            raise self.fail(tok, f"expected a filter field, got {tok.describe()}", known)
        if tok.text in METRICS:
            raise self.fail(tok, f"'{tok.text}' is a metric; filters select configs by field", known)
        if tok.text not in FILTER_FIELDS:
            raise self.fail(tok, f"unknown field '{tok.text}'", known)
        field = self.advance().text
        ftype = FILTER_FIELDS[field]

        if self.is_word("in") or (self.is_word("not") and self.is_word("in", 1)):
            negate = self.advance().text == "not"
            if negate:
                self.advance()
            return FieldTest(field, "not in" if negate else "in", self.literal_list(field))

        op = self.peek()
        if op.kind == OPERATOR:
            if ftype is not int and op.text not in _EQUALITY_OPS:
                raise self.fail(op, f"'{op.text}' does not apply to {ftype.__name__} field '{field}'",
                                "use ==, != or in [...]")
            self.advance()
            return FieldTest(field, op.text, self.literal(field))
        if ftype is bool:
            return FieldTest(field, "==", True)  # bare "causal" means "causal == true"
        raise self.fail(op, f"expected a comparison after field '{field}', got {op.describe()}",
                        "one of == != < <= > >= or in [...]")

    def literal_list(self, field: str) -> tuple[object, ...]:
        self.expect_punct("[", "to open the list after 'in'")
        values = [self.literal(field)]
        while self.is_punct(","):
            self.advance()
            values.append(self.literal(field))
        self.expect_punct("]", "or ',' in the list")
        return tuple(values)

    def literal(self, field: str) -> object:
        tok = self.peek()
        ftype = FILTER_FIELDS[field]
        if tok.kind == NUMBER:
            got, value = int, tok.value
        elif tok.kind == STRING:
            got, value = str, tok.value
        elif tok.kind == NAME and tok.text in ("true", "false"):
            got, value = bool, tok.text == "true"
        else:
            raise self.fail(tok, f"expected a value for '{field}', got {tok.describe()}",
                            "a number, a quoted string, true or false")
        if got is not ftype:
            wanted = {int: "a number", str: 'a quoted string, e.g. "bfloat16"', bool: "true or false"}
            raise self.fail(tok, f"field '{field}' is {ftype.__name__}, got {tok.describe()}",
                            f"compare it with {wanted[ftype]}")
        self.advance()
        return value


def _parser(expr: str) -> _Parser:
    if not isinstance(expr, str):
        raise BarError(f"bar: expected a string expression, got {type(expr).__name__}")
    if not expr.strip():
        raise syntax_error(expr, 0, "empty expression", _EXAMPLE)
    return _Parser(expr)


def parse(expr: str) -> Bar:
    """Parse and type-check a bar expression; raises BarError on anything not in the grammar."""
    return _parser(expr).parse()


def parse_aggregate(expr: str) -> Aggregate:
    """Parse a lone aggregate such as ``geomean(speedup)`` (a registration's primary metric)."""
    return _parser(expr).parse_aggregate()


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class ClauseOutcome:
    """One clause's result: ``value op threshold`` over ``n`` rows (value None: no rows)."""

    text: str
    value: float | None
    op: str
    threshold: float
    passed: bool
    n: int


@dataclass(frozen=True)
class BarOutcome:
    passed: bool
    clauses: tuple[ClauseOutcome, ...]


def _geomean(values: list[float]) -> float:
    bad = [v for v in values if not v > 0]
    if bad:
        # Speedups and throughputs are positive by construction; a zero is a harness bug.
        raise ValueError(f"geomean of non-positive values {bad[:3]}")
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


_REDUCERS: dict[str, Callable[[list[float]], float]] = {
    "geomean": _geomean,
    "min": min,
    "max": max,
    "median": statistics.median,
    "mean": statistics.fmean,
}


def _matches(node: Node, row: dict) -> bool:
    if isinstance(node, And):
        return all(_matches(n, row) for n in node.operands)
    if isinstance(node, Or):
        return any(_matches(n, row) for n in node.operands)
    if isinstance(node, Not):
        return not _matches(node.operand, row)
    if not isinstance(node, FieldTest):
        raise TypeError(f"not a filter node: {node!r}")
    if node.field not in row:
        raise KeyError(f"row has no field '{node.field}': {sorted(row)}")
    actual = row[node.field]
    if node.op == "in":
        return actual in node.value
    if node.op == "not in":
        return actual not in node.value
    return COMPARE[node.op](actual, node.value)


def field_tests(node) -> list[FieldTest]:
    """Every filter test in a bar, an aggregate or a node (to check literals against a grid)."""
    if isinstance(node, Bar):
        return field_tests(node.root)
    if isinstance(node, FieldTest):
        return [node]
    if isinstance(node, Comparison):
        return field_tests(node.aggregate)
    if isinstance(node, Aggregate):
        return field_tests(node.where) if node.where is not None else []
    if isinstance(node, Not):
        return field_tests(node.operand)
    if isinstance(node, (And, Or)):
        return [t for n in node.operands for t in field_tests(n)]
    raise TypeError(f"not a bar node: {node!r}")


def matches_nothing(agg: Aggregate, rows: list[dict]) -> bool:
    """Whether ``agg`` filters out every row: over a line's registered (config, candidate)
    rows, such an aggregate is over nothing whatever the sweep measures (None; a count is
    always 0), so a clause on it can never be decided."""
    return agg.where is not None and not matching(agg, rows)


def matching(agg: Aggregate, rows: list[dict]) -> list[dict]:
    """The rows ``agg`` aggregates over before the correctness rule: those its filter selects."""
    return [r for r in rows if agg.where is None or _matches(agg.where, r)]


def reduce(func: str, values: list[float]) -> float:
    """Reducer ``func`` (geomean, min, max, median or mean) over a non-empty list of values."""
    return float(_REDUCERS[func](values))


def compare(op: str, value: float, threshold: float) -> bool:
    """``value op threshold`` with one of the bar's comparison operators."""
    return COMPARE[op](value, threshold)


def combine(bar: Bar, truths: list[bool | None]) -> bool | None:
    """The bar's truth from its clauses' truths (in clause order; None: unknown), by the
    three-valued rule ``evaluate`` uses: what-if cases are judged exactly as a verdict is."""
    return _combine(bar.root, truths)


def evaluate_aggregate(agg: Aggregate, rows: list[dict]) -> float | None:
    """The aggregate's value over ``rows`` (None when no row qualifies), for reporting."""
    return _aggregate(agg, rows)[0]


def _aggregate(agg: Aggregate, rows: list[dict]) -> tuple[float | None, int]:
    """(value, rows aggregated); value is None when there is nothing to aggregate."""
    selected = matching(agg, rows)
    if agg.func == "pass_rate":
        n = len(selected)
        return (sum(bool(r["correct"]) for r in selected) / n if n else None), n
    if agg.metric is None:  # bare count: coverage, correct or not
        return float(len(selected)), len(selected)
    values = [float(r[agg.metric]) for r in selected
              if bool(r["correct"]) and r.get(agg.metric) is not None]
    if agg.func == "count":
        return float(len(values)), len(values)
    if not values:
        return None, 0
    return float(_REDUCERS[agg.func](values)), len(values)


def _combine(node: Node, results: list[bool | None]) -> bool | None:
    """Kleene three-valued logic: None (no data) stays unknown through not/and/or."""
    if isinstance(node, Comparison):
        return results[node.index]
    if isinstance(node, And):
        vals = [_combine(n, results) for n in node.operands]
        return False if False in vals else (None if None in vals else True)
    if isinstance(node, Or):
        vals = [_combine(n, results) for n in node.operands]
        return True if True in vals else (None if None in vals else False)
    if isinstance(node, Not):
        val = _combine(node.operand, results)
        return None if val is None else not val
    raise TypeError(f"not a bar node: {node!r}")


def evaluate(bar: Bar, rows: list[dict]) -> BarOutcome:
    """Evaluate every clause over ``rows`` (one dict per config x candidate), then combine.

    A clause whose aggregate is None (no rows) is unknown, not false: ``not`` of an
    unknown is still unknown, and an unknown bar is no GO — it fails closed on data the
    sweep did not produce, however the clause is negated.
    """
    outcomes, truth = [], []
    for clause in bar.clauses():
        value, n = _aggregate(clause.aggregate, rows)
        known = None if value is None else COMPARE[clause.op](value, clause.threshold)
        truth.append(known)
        outcomes.append(ClauseOutcome(clause.text, value, clause.op, clause.threshold, bool(known), n))
    return BarOutcome(_combine(bar.root, truth) is True, tuple(outcomes))
