"""The one rich Console renderers print to (stdout; width fixed when not a terminal)."""

from __future__ import annotations

import functools

# Width of output that goes to a file or a pipe (an overnight sweep's log, CI), where rich
# would otherwise wrap every table at 80 columns and split config keys and numbers across
# lines. COLUMNS, when set, still wins.
NON_TTY_WIDTH = 160


@functools.lru_cache(maxsize=None)
def console():
    import os
    import sys

    from rich.console import Console

    width = None
    if "COLUMNS" not in os.environ and not sys.stdout.isatty():
        width = NON_TTY_WIDTH
    return Console(highlight=False, soft_wrap=False, width=width)


def table(**kw):
    """A rich Table for this console: ruled on a terminal; on a pipe or in a file, plain
    columns without box-drawing characters (grep, awk and a log read it as text)."""
    from rich import box
    from rich.table import Table

    if not console().is_terminal:
        kw.setdefault("box", None)
        kw.setdefault("pad_edge", False)
    else:
        kw.setdefault("box", box.SIMPLE_HEAD)
    return Table(**kw)


def short_keys(keys) -> dict[str, str]:
    """Config keys as a table shows them: the '/'-separated fields every key shares dropped
    (a title or caption says them), the rest joined by spaces, so a cell wraps between fields,
    never inside one ("attention/b8/h16/kv16/n4096/d128/float16/full" among keys that differ
    only in seq_len, dtype and causal reads "n4096 float16 full")."""
    keys = list(dict.fromkeys(keys))
    parts = [k.split("/") for k in keys]
    if len(keys) < 2 or len({len(p) for p in parts}) != 1:
        return {k: " ".join(k.split("/")) for k in keys}
    keep = [i for i in range(len(parts[0])) if len({p[i] for p in parts}) > 1]
    return {k: " ".join(p[i] for i in keep) for k, p in zip(keys, parts)}


def common_fields(keys) -> str:
    """What short_keys dropped: the fields every key shares, as one string ("" when none)."""
    keys = list(dict.fromkeys(keys))
    parts = [k.split("/") for k in keys]
    if len(keys) < 2 or len({len(p) for p in parts}) != 1:
        return ""
    return "/".join(parts[0][i] for i in range(len(parts[0])) if len({p[i] for p in parts}) == 1)
