"""Machine-readable output for the read commands (`--format table|json|csv`): one JSON document
or one CSV table on stdout, nothing else there (notes go to stderr), so the output pipes into
jq, pandas or a spreadsheet. JSON is strict (``harness.jsonsafe``: NaN spelled "NaN"); a CSV
cell holding a list or a table holds its JSON. `--format md` (compare, route) writes
GitHub-flavoured Markdown for a pull-request comment: pipe tables, no ANSI, no box characters."""

from __future__ import annotations

import json
import sys

from harness.errors import UserError
from harness.jsonsafe import jsonable

FORMATS = ("table", "json", "csv")
MARKDOWN = "md"  # `--format md`: a pull-request comment (nvbench --markdown, pyperf --table-format=md)


def check_format(fmt: str, allowed: tuple[str, ...] = FORMATS) -> str:
    """``fmt`` if it is one of ``allowed``; else the one-line refusal (before any work is done)."""
    if fmt not in allowed:
        raise UserError(f"--format {fmt!r}: use {', '.join(allowed)}")
    return fmt


def emit(fmt: str, records: list[dict], document=None) -> None:
    """``records`` (one flat dict per row) as CSV, or ``document`` (default: the records) as JSON."""
    if fmt == "json":
        sys.stdout.write(json.dumps(jsonable(records if document is None else document), indent=1) + "\n")
        return
    import csv

    cols: list[str] = []
    for r in records:
        cols += [k for k in r if k not in cols]
    w = csv.DictWriter(sys.stdout, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in records:
        w.writerow({k: _cell(v) for k, v in jsonable(r).items()})


def _cell(v):
    return json.dumps(v) if isinstance(v, (list, dict)) else v


def note(text: str) -> None:
    """A note beside machine-readable output: on stderr, so stdout stays one document."""
    print(f"note: {text}", file=sys.stderr)


def md_cell(value) -> str:
    """One Markdown table cell: a pipe escaped, a line break made a space (a cell is one line)."""
    return " ".join(str(value).split()).replace("|", "\\|")


def markdown(title: str, columns: list[str], rows: list[list], *, right: tuple[str, ...] = (), caption: str = "",
             notes=(), after=()) -> str:
    """A GitHub-flavoured Markdown document: a bold title, a pipe table (``right``: the columns
    aligned right, numbers), the caption in italics, then ``notes`` as a list and ``after`` as
    paragraphs. Plain text only: no ANSI styles, no box-drawing characters."""
    out = [f"**{md_cell(title)}**", ""]
    out.append("| " + " | ".join(md_cell(c) for c in columns) + " |")
    out.append("|" + "|".join("---:" if c in right else ":---" for c in columns) + "|")
    out += ["| " + " | ".join(md_cell(v) for v in row) + " |" for row in rows]
    if caption:
        out += ["", f"_{md_cell(caption)}_"]
    if notes:
        out += [""] + [f"- {md_cell(n)}" for n in notes]
    for text in after:
        out += ["", md_cell(text)]
    return "\n".join(out) + "\n"


def emit_markdown(document: str) -> None:
    """A Markdown document on stdout (``markdown``)."""
    sys.stdout.write(document)
