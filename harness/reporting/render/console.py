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
