"""Issue 51 item 3: every table bench prints fits the terminal without splitting a token.

Each read command renders the shipped ledgers at COLUMNS 80, 100 and 160 (rich reads it), off a
terminal (plain columns), in-process through the CLI. A token is a maximal run of non-space
characters: wrapped only at spaces, a narrow render holds no token that is cut with an ellipsis
or is a piece of a token of the same command's render at WIDE columns (a name, number or key
folded in two); at 100 columns no line is longer than 100.
"""

from __future__ import annotations

import pytest

from tests.conftest import REPO

WIDTHS = (80, 100, 160)
WIDE = 1000  # wide enough that nothing of these commands wraps: the tokens as they are
FITS = 100  # at this width every line fits
MIN_PIECE = 3  # the shortest piece of a folded token the check looks for

COMMANDS = {
    "status": ["status"],
    "status --lineage": ["status", "--lineage"],
    "kernels": ["kernels"],
    "ledger verify": ["ledger", "verify"],
    "ledger show": ["ledger", "show", "flash-h200-v2"],
    "ledger show decode": ["ledger", "show", "decode-h200"],
    "verdict --show": ["verdict", "flash-h200-v2", "--show"],
    "compare": ["compare", "flash-h200-v2", "flash-h200-peers", "--exact"],
    "route": ["route", "flash-h200-v2", "decode-h200", "--exact", "--out", "{tmp}"],
}


def render(args: list[str], columns: int, monkeypatch) -> str:
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.reporting.render import console

    monkeypatch.chdir(REPO)
    console.console.cache_clear()  # a console of this width
    try:
        r = CliRunner().invoke(app, args, env={"COLUMNS": str(columns)})
    finally:
        console.console.cache_clear()
    assert r.exit_code in (0, 1), (args, columns, r.output)  # 1: verdict --show of a NO-GO line
    return r.output


def piece(token: str, tokens: set[str]) -> bool:
    """Whether ``token`` is part of a longer token (a fold leaves pieces; a one- or two-character
    token such as '/' or '—' is too short to tell)."""
    return len(token) >= MIN_PIECE and any(token in t for t in tokens)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_table_fits_its_width_without_splitting_a_token(name, tmp_path, monkeypatch):
    args = [a.replace("{tmp}", str(tmp_path)) for a in COMMANDS[name]]
    tokens_wide = render(args, WIDE, monkeypatch).split()
    tokens = set(tokens_wide)
    for columns in WIDTHS:
        text = render(args, columns, monkeypatch)
        split = [t for t in text.split() if t not in tokens and ("…" in t or piece(t, tokens))]
        assert not split, (f"bench {' '.join(args)} at COLUMNS={columns}: tokens split or cut: {split[:10]}\n{text}")
        # Nothing cut: a narrower table wraps what it shows, it never drops characters.
        assert sum(map(len, text.split())) >= sum(map(len, tokens_wide)), (args, columns, text)
        if columns == FITS:
            # A line of one token (a path) may be longer: no wrap at spaces can shorten it.
            long = [line for line in text.splitlines() if len(line.rstrip()) > FITS and len(line.split()) > 1]
            assert not long, (f"bench {' '.join(args)} at COLUMNS={columns}: {len(long)} lines longer than {FITS}:\n"
                              + "\n".join(long[:5]))
