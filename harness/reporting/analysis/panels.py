"""The plots' panels: the result rows grouped by the config fields that vary between them,
each group titled by those fields, along a numeric size axis (render/plots.py draws them):
the workload's ``size_axis`` (seq_len for attention and decode, m for GEMM, tokens for RMSNorm)."""

from __future__ import annotations

from harness.errors import UserError
from harness.jsonsafe import number
from harness.ledger.payloads import ConfigFields, config_workload
from harness.registry import installed_workload
from harness.reporting.analysis.tidy import CONFIG_COLUMNS
from harness.workloads import SHIPPED_WORKLOADS

# The numeric size axis of attention's and decode's plots; the other config fields that vary
# split the panels. Another workload's is its ``Workload.size_axis``.
SIZE_FIELD = "seq_len"
# A panel field derived from the config: batch × seq_len (a grid in ``[grid] tokens``).
TOKENS = "tokens"
PANEL_FIELDS = ("dtype", "causal", "head_dim")  # always named in a panel's title



def size_field(config: dict) -> str | None:
    """The size axis of the workload ``config`` is a point of: seq_len for attention and decode,
    another's ``size_axis`` (None: it declares none, or it is not installed here)."""
    name = config_workload(config)
    if name in (None, *SHIPPED_WORKLOADS):
        return SIZE_FIELD
    try:
        wl = installed_workload(name)
    except UserError:
        return None
    return (wl.size_axis or None) if wl is not None else None


def size_label(rows) -> str:
    """What the plots' x axis is, for ``rows``: their workloads' size axes."""
    return " / ".join(sorted({f for r in rows if (f := size_field(r.config or {}))})) or SIZE_FIELD


def size_of(row) -> float | None:
    config = row.config or {}
    field = size_field(config)
    x = number(config.get(field)) if field else None
    return x if x is not None and x > 0 else None


def _columns(rows: list) -> tuple[str, ...]:
    """The config fields of ``rows``, in their workload's axis order (attention's and decode's:
    ``CONFIG_COLUMNS``; a plugin not installed here: its rows' fields, sorted)."""
    names = sorted({config_workload(r.config) for r in rows}, key=str)
    if set(names) <= {None, *SHIPPED_WORKLOADS}:
        return CONFIG_COLUMNS
    cols: list[str] = ["workload"]
    for name in names:
        wl = installed_workload(name)
        keys = wl.axis_names if wl is not None else \
            sorted({k for r in rows if config_workload(r.config) == name for k in r.config or {}})
        cols += [k for k in keys if k not in cols]
    return tuple(cols)


def _per_token(rows: list) -> bool:
    """Whether the rows' sizes read better as tokens (batch × seq_len) than as batch: fewer
    distinct values (a grid in ``tokens``: batch = tokens / seq_len moves with seq_len, and
    the token count names a panel)."""
    if _columns(rows) != CONFIG_COLUMNS:  # batch × seq_len means something to attention and decode only
        return False

    def n(f):
        return len({f(r.config or {}) for r in rows})

    return n(_tokens) < n(lambda c: ConfigFields.from_row(c).batch)


def _tokens(config: dict):
    """batch × seq_len of a row's config (an axis it does not hold counts 0)."""
    held = ConfigFields.from_row(config)
    return (held.batch if held.has("batch") else 0) * config.get(SIZE_FIELD, 0)


def panel_fields(rows: list) -> list[str]:
    """The config fields that name a panel: the always-named ones, then any other field (but the
    size axis and the workload) whose value differs between rows — with ``TOKENS`` (batch ×
    seq_len) for batch where that has fewer values (``_per_token``)."""
    tokens = _per_token(rows)
    sizes = {size_field(r.config or {}) for r in rows}
    varying = [f for f in _columns(rows) if f not in (*sizes, "workload", *PANEL_FIELDS)
               and not (tokens and f == "batch") and len({repr((r.config or {}).get(f)) for r in rows}) > 1]
    return [*PANEL_FIELDS, *((TOKENS,) if tokens else ()), *varying]


def _panel_value(row, field: str):
    c = row.config or {}
    return _tokens(c) if field == TOKENS else c.get(field)


def _field_text(field: str, value) -> str:
    if field == "causal":
        return "causal" if value else "non-causal"
    if field == "dtype":
        return str(value)
    if field == TOKENS:
        return f"b·{SIZE_FIELD} = {value}"
    short = {"head_dim": "d", "batch": "b", "heads": "h", "kv_heads": "kv"}.get(field, f"{field}=")
    return f"{short}{value}"


def panels(rows: list) -> list[tuple[str, list]]:
    """(title, rows) per panel, in config order: rows grouped by their panel fields."""
    fields = panel_fields(rows)
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault(tuple(_panel_value(r, f) for f in fields), []).append(r)

    def order(key):
        return tuple((str(type(v)), str(v) if not isinstance(v, (int, float)) else f"{v:020.6f}") for v in key)

    return [(", ".join(_field_text(f, v) for f, v in zip(fields, key) if v is not None), groups[key])
            for key in sorted(groups, key=order)]


__all__ = ["PANEL_FIELDS", "SIZE_FIELD", "TOKENS", "panel_fields", "panels", "size_field", "size_label", "size_of"]
