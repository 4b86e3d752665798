"""The bar's grammar: its vocabulary, syntax tree and recursive-descent parser (bar.py
evaluates what this parses). Tokens are tokens.py's, shared with ``[verify]``.

Grammar (EBNF; keywords are lower case, names are case-sensitive)::

    bar        = bool_expr END
    bool_expr  = and_expr { "or" and_expr }
    and_expr   = not_expr { "and" not_expr }
    not_expr   = "not" not_expr | "(" bool_expr ")" | comparison
    comparison = aggregate CMP NUMBER
    aggregate  = AGG "(" [ METRIC [ "(" NUMBER ")" ] [ "vs" STRING ] ] [ "where" filter ] ")"
               | ( "pass_rate" | "count" )               (* bare: no parentheses *)
               | STEP_METRIC                             (* bare: min(STEP_METRIC) *)
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
Type rules, checked at parse time: int fields take numbers and every CMP; str fields
take quoted strings and only ``==``/``!=``/``in``; bool fields take ``true``/``false``
and only ``==``/``!=``/``in``.

``speedup vs "PEER"`` (PEER_METRICS only) is each selected row's candidate against another
candidate of the line at the same config, from the same interleaved rounds: the peer's median
over the candidate's (governance/peers.py), > 1 where the candidate is the faster.

A metric with a parameter (metrics.PARAM_NAMES) takes exactly one number in parentheses and
no other metric takes any: ``tflops_at(1980)``, the rate at an SM clock of 1980 MHz, stated
in (0, MAX_STATED_MHZ].
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Mapping, Union

from harness.registry import load_workloads

from harness.vocab.metrics import BY_NAME, LEDGER_NAMES, MAX_STATED_MHZ, NAMES, PARAM_NAMES, STEP_NAMES
from harness.registration.tokens import (END, MAX_NESTING, NAME, NUMBER, OPERATOR, PUNCT, STRING, BarError, Token,
                                       syntax_error, tokenize)

# The metric names a bar may aggregate: the metric table's (every one a result row carries,
# those computed from them with an argument or from the line's ledger: the next-run interval) and
# the step metrics of a line's integration rows.
METRICS: tuple[str, ...] = NAMES + PARAM_NAMES + LEDGER_NAMES + STEP_NAMES
# A step metric may stand bare in a comparison: ``step_gain >= 0.02`` is the worst candidate's.
BARE_STEP_AGGREGATE = "min"

# The fields every row carries whatever its workload: a bar may filter any line on these.
COMMON_FIELDS: dict[str, type] = {"workload": str, "dtype": str, "candidate": str}
# attention's and decode's axes with the common fields: what a bar parsed without a workload
# (a report reading a shipped line) knows without loading any workload.
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

# Metrics a clause may take against a peer candidate (``speedup vs "fa4"``): only a figure of
# the interleaved rounds, where every arm ran in turn under one clock and the two medians are
# paired by round. A rate comes from each candidate's own sustained calls, another protocol
# run at another time: a ratio of two of them is not one measurement's.
PEER_METRICS = frozenset({"speedup"})
PEER_WORD = "vs"

# Aggregates that may omit the metric / the parentheses; pass_rate must omit the metric.
_METRIC_OPTIONAL = frozenset({"count", "pass_rate"})
_NO_METRIC = frozenset({"pass_rate"})

KEYWORDS = frozenset({"and", "or", "not", "where", "in", "true", "false", PEER_WORD})

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
    """``func(metric[(at)] [vs "peer"] [where ...])``; ``peer``: the candidate the metric is
    taken against at each selected row's config (None: the metric itself)."""

    func: str
    metric: str | None
    where: "Node | None"
    peer: str | None = None
    at: float | None = None  # a parameterised metric's argument (tflops_at(1980): 1980.0 MHz)


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
    def __init__(self, expr: str, fields: Mapping[str, type] | None = None):
        self.expr = expr
        self.fields = fields
        self.tokens = tokenize(expr)
        self.i = 0
        self.depth = 0
        self.clauses: list[Comparison] = []

    def field_type(self, name: str) -> type | None:
        """The type of filter field ``name``, or None: the given fields (a registration's
        workload's), else FILTER_FIELDS, then any installed workload's axes."""
        if self.fields is not None:
            return self.fields.get(name)
        return FILTER_FIELDS.get(name) or installed_fields().get(name)

    def known_fields(self) -> str:
        return f"known: {', '.join(self.fields if self.fields is not None else FILTER_FIELDS)}"

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
        if tok.text in STEP_NAMES:
            self.advance()
            return Aggregate(BARE_STEP_AGGREGATE, tok.text, None)
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
        at = self.argument(metric) if metric is not None else None
        peer = self.peer(func, metric) if self.is_word(PEER_WORD) else None
        where = None
        if self.is_word("where"):
            self.advance()
            where = self.bool_expr(self.field_test)
        context = "after the filter" if where else ("or 'where'" if peer or metric not in PEER_METRICS else
                                                    f"or 'where' (or '{PEER_WORD} \"candidate\"')")
        self.expect_punct(")", f"{context} to close {func}(")
        return Aggregate(func, metric, where, peer, at)

    def argument(self, metric: str) -> float | None:
        """A parameterised metric's ``(NUMBER)``: the SM clock in MHz it states; None for any
        other metric, which takes none."""
        spec = BY_NAME.get(metric)
        if spec is None or spec.param is None:
            if self.is_punct("("):
                raise self.fail(self.peek(), f"'{metric}' takes no argument",
                                f"only {', '.join(PARAM_NAMES)} states one, e.g. {PARAM_NAMES[0]}(1980)")
            return None
        example = f"e.g. {metric}(1980): the rate at an SM clock of 1980 MHz"
        if not self.is_punct("("):
            raise self.fail(self.peek(), f"{metric} needs the SM clock it states, in MHz", example)
        self.advance()
        num = self.peek()
        if num.kind != NUMBER:
            raise self.fail(num, f"expected an SM clock in MHz after '{metric}(', got {num.describe()}", example)
        if not 0 < num.value <= MAX_STATED_MHZ:
            raise self.fail(num, f"SM clock {num.text} MHz is outside (0, {MAX_STATED_MHZ:g}]",
                            f"state it in MHz, {example}")
        self.advance()
        self.expect_punct(")", f"to close {metric}(")
        return float(num.value)

    def peer(self, func: str, metric: str | None) -> str:
        tok = self.advance()  # "vs"
        if metric not in PEER_METRICS:
            raise self.fail(tok, f"'{PEER_WORD}' compares {' or '.join(sorted(PEER_METRICS))} with a peer candidate, "
                                 f"not {metric or 'a count'}",
                            f"e.g. {func}(speedup {PEER_WORD} \"sdpa_cudnn\" where candidate == \"triton_flash\"): "
                            f"only the interleaved rounds time two candidates together")
        name = self.peek()
        if name.kind != STRING or not name.value:
            raise self.fail(name, f"expected a candidate's name in quotes after '{PEER_WORD}', got {name.describe()}",
                            f"e.g. {metric} {PEER_WORD} \"sdpa_cudnn\"")
        self.advance()
        return name.value

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
        if name not in METRICS and self.field_type(name) is not None:
            raise self.fail(tok, f"'{name}' is a filter field, not a metric",
                            f"filter with {func}(speedup where {name} ...)")
        if name == PEER_WORD:
            raise self.fail(tok, f"'{PEER_WORD}' needs the metric it compares before it",
                            f"e.g. {func}(speedup {PEER_WORD} \"sdpa_cudnn\")")
        if name not in METRICS:
            raise self.fail(tok, f"unknown metric '{name}'", f"known: {', '.join(METRICS)}")
        self.advance()
        return name

    # filters
    def field_test(self) -> FieldTest:
        tok = self.peek()
        known = self.known_fields()
        if tok.kind != NAME or tok.text in KEYWORDS:
            raise self.fail(tok, f"expected a filter field, got {tok.describe()}", known)
        if tok.text in METRICS:
            raise self.fail(tok, f"'{tok.text}' is a metric; filters select configs by field", known)
        ftype = self.field_type(tok.text)
        if ftype is None:
            raise self.fail(tok, f"unknown field '{tok.text}'", known)
        field = self.advance().text

        if self.is_word("in") or (self.is_word("not") and self.is_word("in", 1)):
            negate = self.advance().text == "not"
            if negate:
                self.advance()
            return FieldTest(field, "not in" if negate else "in", self.literal_list(field))

        op = self.peek()
        if op.kind == OPERATOR:
            if ftype not in (int, float) and op.text not in _EQUALITY_OPS:
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
        ftype = self.field_type(field)
        if tok.kind == NUMBER:
            got, value = int, tok.value
        elif tok.kind == STRING:
            got, value = str, tok.value
        elif tok.kind == NAME and tok.text in ("true", "false"):
            got, value = bool, tok.text == "true"
        else:
            raise self.fail(tok, f"expected a value for '{field}', got {tok.describe()}",
                            "a number, a quoted string, true or false")
        if got is not ftype and not (got is int and ftype is float):
            wanted = {int: "a number", float: "a number", str: 'a quoted string, e.g. "bfloat16"', bool: "true or false"}
            raise self.fail(tok, f"field '{field}' is {ftype.__name__}, got {tok.describe()}",
                            f"compare it with {wanted[ftype]}")
        self.advance()
        return value


@functools.cache
def installed_fields() -> dict[str, type]:
    """Every installed workload's axes and their types (a bar of a plugin workload's line,
    parsed by a report that has only the bar). An axis two workloads type differently is left
    out: only a registration's own workload (``workload_fields``) can say which it is."""
    seen: dict[str, set[type]] = {}
    for wl in load_workloads().values():
        for axis in wl.axes:
            seen.setdefault(axis.name, set()).add(axis.type)
    return {name: next(iter(types)) for name, types in seen.items() if len(types) == 1}


def workload_fields(workload) -> dict[str, type]:
    """The fields a bar of ``workload``'s line may filter on: its axes and the common fields."""
    return {**COMMON_FIELDS, **{a.name: a.type for a in workload.axes}}


def _parser(expr: str, fields: Mapping[str, type] | None = None) -> _Parser:
    if not isinstance(expr, str):
        raise BarError(f"bar: expected a string expression, got {type(expr).__name__}")
    if not expr.strip():
        raise syntax_error(expr, 0, "empty expression", _EXAMPLE)
    return _Parser(expr, fields)


def parse(expr: str, fields: Mapping[str, type] | None = None) -> Bar:
    """Parse and type-check a bar expression; raises BarError on anything not in the grammar.
    ``fields``: the filter fields and their types (``workload_fields``); None: FILTER_FIELDS,
    then any installed workload's axes."""
    return _parser(expr, fields).parse()


def parse_aggregate(expr: str, fields: Mapping[str, type] | None = None) -> Aggregate:
    """Parse a lone aggregate such as ``geomean(speedup)`` (a registration's primary metric)."""
    return _parser(expr, fields).parse_aggregate()
