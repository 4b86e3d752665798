"""The one rich Console renderers print to (stdout; width fixed when not a terminal), and the
error handler that lets every line bench prints reach a stream that cannot encode it."""

from __future__ import annotations

import codecs
import functools
import sys

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


def words_fit(t) -> bool:
    """Whether ``t`` fits the console with each column at its longest word (what ``fit`` can
    reach without folding or cutting a word)."""
    c = console()
    least = sum(t._measure_column(c, c.options, col).minimum for col in t.columns)
    return least <= c.options.max_width - t._extra_width


def fit(t):
    """``t`` with each wrapping column's width set so that the table fits the console: the
    widest column with room narrows first, never below its longest word, so that cells wrap
    between words and no name, key or number is folded or cut. (rich narrows only the widest
    of its wrapping columns until two tie, then cuts every column alike.)"""
    c = console()
    opts = c.options
    ranges = [t._measure_column(c, opts, col) for col in t.columns]
    widths = [r.maximum for r in ranges]
    room = opts.max_width - t._extra_width
    while sum(widths) > room:
        slack = [(w - r.minimum, i) for i, (w, r, col) in enumerate(zip(widths, ranges, t.columns))
                 if not col.no_wrap and w > r.minimum]
        if not slack:
            break  # the words alone are wider than the console: rich does what it can
        widths[max(slack)[1]] -= 1
    for i, col in enumerate(t.columns):
        if not col.no_wrap and widths[i] < ranges[i].maximum:
            col.width = widths[i] - t._get_padding_width(i)
    return t


# What bench prints beyond ASCII, as a stream that cannot encode it (PYTHONIOENCODING=ascii, a
# C locale without UTF-8 mode, a legacy code page) shows it instead; anything else becomes '?'.
ASCII_FALLBACKS = {"—": "-", "–": "-", "−": "-", "×": "x", "→": "->", "←": "<-", "↑": "^", "↓": "v", "±": "+/-",
                   "≥": ">=", "≤": "<=", "≠": "!=", "≈": "~", "∞": "inf", "…": "...", "·": ".", "•": "*", "µ": "u",
                   "α": "alpha", "²": "^2", "½": "1/2", "ᵀ": "^T", "‖": "||", "‘": "'", "’": "'", "“": '"', "”": '"',
                   "✓": "ok", "✗": "x", "█": "#", "━": "-", "─": "-", "│": "|"}
FALLBACK_ERRORS = "bench-fallback"
# The error handlers Python gives stdout and stderr by itself (PYTHONIOENCODING can name others).
PYTHON_DEFAULT_ERRORS = ("strict", "backslashreplace", "surrogateescape")
# A byte the file system gave that is not UTF-8 reaches Python as one of these surrogates
# (PEP 383): written back as that byte, as os.fsencode would.
SURROGATE_BYTES = range(0xDC80, 0xDD00)


def _fallback(exc: UnicodeError):
    """Encode error handler: each character the stream's encoding cannot hold, degraded."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    bad = exc.object[exc.start:exc.end]
    if any(ord(ch) in SURROGATE_BYTES for ch in bad):  # bytes: the file system's, as they were
        return b"".join(bytes([ord(ch) - 0xDC00]) if ord(ch) in SURROGATE_BYTES else
                        ASCII_FALLBACKS.get(ch, "?").encode("ascii") for ch in bad), exc.end
    return "".join(ASCII_FALLBACKS.get(ch, "?") for ch in bad), exc.end


codecs.register_error(FALLBACK_ERRORS, _fallback)


def fit_streams() -> None:
    """Make stdout and stderr degrade what they cannot encode (ASCII_FALLBACKS) instead of
    raising UnicodeEncodeError mid-output (stdout's default; surrogateescape's, a C locale's,
    for anything but a surrogate) or printing ``\\u2014`` (stderr's): every command, its
    one-line errors included, works on any stream. An error handler the user chose
    (PYTHONIOENCODING=ascii:replace) is kept."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) in PYTHON_DEFAULT_ERRORS and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors=FALLBACK_ERRORS)
