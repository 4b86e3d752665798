"""A line's history, from the ledgers and git: the lines that amend it (a changed bar is a new
line with ``amends``), the ledger a ``--reopen`` discarded, a ledger deleted since (GONE:
git holds it, the work tree does not), and the pairs measured again at the same commit
(``bench sweep --remeasure``, the sweep's own rig-noisy passes). Status, the report, `ledger
show`, `compare` and `route` all show it, so no correction or discarded run is out of sight.

Analysis only: frozen data and its sentences; renderers print them. ``follow`` is how
`compare` and `route` reach the newest line of an amendment chain.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UserError, plural
from harness.ledger.line_payloads import RegistrationSummary, Reopens
from harness.vocab.outcomes import OUTCOME_KINDS, REGISTERED, VERDICT, Remeasure, remeasures, resweeps
from harness.ledger.rows import RegisteredRow, load
from harness.provenance.git import last_commit_holding
from harness.ledger.store import missing_ledgers
from harness.ledger.verify import rows_at
from harness.reporting.analysis.lines import line_paths, split_spec
from harness.ledger.format import ledger_path, read_rows

# Re-measured pairs a note lists one per line before "and N more".
MAX_LISTED = 5


@dataclass(frozen=True)
class Reopened:
    """What ``bench register --reopen`` replaced: the old ledger's last committed version."""

    rel: str
    commit: str  # the commit holding that version (row 0's ``reopens.commit``)
    rows: int  # rows it held (declared in row 0; verify checks the declaration)
    outcomes: int | None  # outcome rows among them (None: that version could not be read here)
    measured_at: tuple[str, ...]  # commits its outcomes were measured at
    verdict: str | None  # its verdict's outcome (verify refuses a re-open of a decided line)
    earlier: int  # re-opens before that one (its own row 0 declared one, and so on)

    def describe(self) -> str:
        if self.outcomes is None:
            held = f"{plural(self.rows, 'row')}; that version is not readable in this clone"
        elif self.outcomes:
            at = ", ".join(c[:12] for c in self.measured_at)
            held = f"{plural(self.rows, 'row')}, {plural(self.outcomes, 'outcome')} measured at {at}"
        else:
            held = f"{plural(self.rows, 'row')}, no outcome"
        held += f", verdict {self.verdict}" if self.verdict else ", no verdict"
        before = f"; it was itself re-opened ({plural(self.earlier, 'earlier re-open')})" if self.earlier else ""
        return f"re-opened: discarded {self.rel} as committed at {self.commit[:12]} ({held}){before}"

    def short(self) -> str:
        return f"re-opened (discarded {plural(self.rows, 'row')} of {self.commit[:12]}" + \
            (f", verdict {self.verdict})" if self.verdict else ")")


@dataclass(frozen=True)
class Gone:
    """A line whose ledger git holds but the work tree does not."""

    rel: str
    why: str  # where it went and how to restore it (ledger.missing_ledgers)
    commit: str | None  # the newest commit holding it
    rows: tuple = ()  # its rows there, chain verified (empty: unreadable)
    problem: str | None = None  # why they could not be read back


@dataclass(frozen=True)
class Note:
    """One event of a line's history: a sentence, and the items it lists (re-measured pairs)."""

    text: str
    items: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """As plain text: the sentence (with a colon before its items), each item indented."""
        return [self.text + (":" if self.items else "")] + [f"  {i}" for i in self.items]


@dataclass(frozen=True)
class LineHistory:
    line: str
    amends: str | None = None
    amends_gone: bool = False  # the line it amends has its ledger GONE
    amended_by: tuple[str, ...] = ()  # lines whose registration says amends = this line
    gone_amenders: tuple[str, ...] = ()  # those of them whose ledger is GONE
    reopened: Reopened | None = None
    remeasured: tuple[Remeasure, ...] = ()
    resweeps: int = 0  # outcome rows superseded by a later sweep at another commit or device
    gone: Gone | None = None

    def _amenders(self) -> str:
        return ", ".join(a + (" (GONE)" if a in self.gone_amenders else "") for a in self.amended_by)

    def short(self) -> list[str]:
        """Fragments for one status cell: 'amended by X', 're-opened (…)', '2 pairs re-measured'."""
        out = []
        if self.amended_by:
            out.append(f"amended by {self._amenders()}")
        if self.amends:
            out.append(f"amends {self.amends}" + (" (GONE)" if self.amends_gone else ""))
        if self.reopened:
            out.append(self.reopened.short())
        if self.remeasured:
            out.append(f"{plural(len(self.remeasured), 'pair')} re-measured")
        return out

    def notes(self, max_listed: int | None = None) -> list[Note]:
        """One note per event, newest correction first; the re-measured pairs as its items
        (``max_listed`` of them, then a count)."""
        out = []
        if self.gone:
            out.append(f"GONE: {self.gone.rel} is {self.gone.why}")
        if self.amended_by:
            one = len(self.amended_by) == 1
            out.append(f"amended by {self._amenders()}: its bar was changed and registered again as "
                       f"{'a new line that supersedes' if one else 'new lines that supersede'} this one"
                       + (f" (bench report {self.amended_by[0]})" if one and not self.gone_amenders else ""))
        if self.amends:
            out.append(f"amends {self.amends}" + (" (GONE)" if self.amends_gone else "")
                       + ": registered as a changed bar of that line")
        if self.reopened:
            out.append(self.reopened.describe())
        notes = [Note(text) for text in out]
        if self.remeasured:
            shown = self.remeasured if max_listed is None else self.remeasured[:max_listed]
            more = len(self.remeasured) - len(shown)
            notes.append(Note(f"{plural(len(self.remeasured), 'pair')} re-measured at the commit and device they "
                              f"were measured at; the newest measurement stands",
                              tuple(m.describe() for m in shown)
                              + ((f"and {more} more (bench ledger show {self.line})",) if more else ())))
        if self.resweeps:
            notes.append(Note(f"{plural(self.resweeps, 'outcome row')} of earlier sweeps (another commit or device) "
                              f"superseded by later ones"))
        return notes


@dataclass(frozen=True)
class Index:
    """Row 0 of every line's ledger — present or GONE — and the GONE ledgers: who amends whom."""

    root: Path
    first: dict = field(default_factory=dict)  # line -> row 0 of its ledger in the work tree (empty: unreadable)
    gone: dict = field(default_factory=dict)  # line -> Gone

    def row0(self, line: str) -> RegisteredRow:
        if line in self.first:
            return self.first[line]
        g = self.gone.get(line)
        return g.rows[0] if g is not None and g.rows and g.rows[0].kind == REGISTERED else RegisteredRow()

    def lines(self) -> list[str]:
        return sorted(set(self.first) | set(self.gone))

    def amends(self, line: str) -> str | None:
        row = self.row0(line)
        reg = RegistrationSummary.from_row(row.registration)
        amends = row.amends or (reg.amends if reg is not None else None)
        return amends if isinstance(amends, str) and amends else None

    def amended_by(self, line: str) -> tuple[str, ...]:
        return tuple(x for x in self.lines() if x != line and self.amends(x) == line)


def _row0(path: Path) -> RegisteredRow:
    """A ledger's first row, read leniently (an empty row where it is not a `registered` row)."""
    try:
        with open(path, "rb") as fh:
            row = load(json.loads(fh.readline()))
    except (OSError, ValueError, AttributeError):
        return RegisteredRow()
    return row if row.kind == REGISTERED else RegisteredRow()


def index(root: Path) -> Index:
    """Every line's row 0 from the work tree, and each GONE ledger read back from git."""
    root = Path(root)
    first = {p.stem: _row0(p) for p in line_paths(root)}
    gone = {}
    for rel, why in missing_ledgers(root):
        name = Path(rel).stem
        if name.startswith("_"):  # device data, not a line
            continue
        commit = last_commit_holding(root, rel)
        found = rows_at(root, commit, rel) if commit else None
        problem = None
        if found is None:
            rows = ()
            problem = "no commit of this clone holds it"
        else:
            rows, res = tuple(found[0]), found[1]
            problem = None if res.ok else f"its last version fails verification ({res.reason})"
        gone[name] = Gone(rel, why, commit, rows, problem)
    return Index(root, first, gone)


def _reopened(idx: Index, line: str, row0: RegisteredRow, rel: str) -> Reopened | None:
    """Row 0's ``reopens`` declaration, with what the replaced version held (read from git)."""
    declared = Reopens.from_row(row0.reopens)
    if declared is None or not isinstance(declared.commit, str):
        return None
    commit = declared.commit
    found = rows_at(idx.root, commit, rel)
    old = found[0] if found is not None and found[1].ok else None
    # Re-opens before that one: the replaced version's own row 0, and so on back (as far as
    # this clone holds the versions).
    earlier, prev, seen = 0, old, {commit}
    while prev and prev[0].kind == REGISTERED and isinstance(prev[0].reopens, dict):
        before = Reopens.from_row(prev[0].reopens).commit
        if not isinstance(before, str) or before in seen:
            break
        seen.add(before)
        earlier += 1
        back = rows_at(idx.root, before, rel)
        prev = back[0] if back is not None and back[1].ok else None
    outcomes = None if old is None else [r for r in old if r.kind in OUTCOME_KINDS]
    verdict = next((r.outcome for r in old or () if r.kind == VERDICT), None)
    measured = tuple(dict.fromkeys(str(r.commit) for r in outcomes or () if r.commit))
    rows = declared.rows if isinstance(declared.rows, int) else len(old or ())
    return Reopened(rel, commit, rows, None if outcomes is None else len(outcomes), measured, verdict, earlier)


def line_history(idx: Index, line: str, rows=None, measured: tuple | None = None) -> LineHistory:
    """``line``'s history; ``rows``: its ledger rows where the caller has read them (the
    re-measures come from them), else read here (a GONE line: its last committed rows);
    ``measured``: (remeasured, resweeps) where the caller has them from those rows already
    (`bench status`'s cache), so the rows are not read at all."""
    rel = f"ledger/{line}.jsonl"
    gone = idx.gone.get(line)
    if measured is not None:
        by = idx.amended_by(line)
        amends = idx.amends(line)
        return LineHistory(line=line, amends=amends, amends_gone=amends in idx.gone, amended_by=by,
                           gone_amenders=tuple(a for a in by if a in idx.gone),
                           reopened=_reopened(idx, line, idx.row0(line), rel),
                           remeasured=tuple(measured[0]), resweeps=int(measured[1]), gone=gone)
    if rows is None:
        if gone is not None:
            rows = gone.rows
        else:
            try:
                rows = read_rows(ledger_path(idx.root, line))
            except UserError:
                rows = []  # a broken ledger: status says BROKEN; its history is what row 0 says
    rows = list(rows)
    by = idx.amended_by(line)
    amends = idx.amends(line)
    return LineHistory(line=line, amends=amends, amends_gone=amends in idx.gone, amended_by=by,
                       gone_amenders=tuple(a for a in by if a in idx.gone),
                       reopened=_reopened(idx, line, idx.row0(line), rel),
                       remeasured=remeasures(rows), resweeps=resweeps(rows), gone=gone)


def follow(idx: Index, line: str, stop: frozenset = frozenset()) -> tuple[str, tuple[str, ...]]:
    """The newest line of ``line``'s amendment chain whose ledger is here, and the lines
    passed on the way (``line`` first); it goes no further than a line of ``stop`` (compare's
    other side). A line amended by two lines has no newest one: refused."""
    path = [line]
    while True:
        if len(path) > 1 and path[-1] in stop:
            return path[-1], tuple(path)
        nxt = [a for a in idx.amended_by(path[-1]) if a not in idx.gone and a not in path]
        if not nxt:
            return path[-1], tuple(path)
        if len(nxt) > 1:
            raise UserError(f"line '{path[-1]}' is amended by {len(nxt)} lines ({', '.join(nxt)}): no one line is "
                            f"the newest — name the one to use, or pass --exact to use '{line}' as named")
        path.append(nxt[0])


def _descends(idx: Index, older: str, newer: str) -> bool:
    """Whether ``newer`` amends ``older``, directly or through other lines."""
    seen, at = set(), newer
    while at is not None and at not in seen:
        seen.add(at)
        at = idx.amends(at)
        if at == older:
            return True
    return False


@dataclass(frozen=True)
class Resolved:
    """The lines (specs) a command uses after following amendment chains, and why."""

    specs: tuple[str, ...]
    notes: tuple[str, ...]


def resolve(root: Path, specs: list[str], *, exact: bool, one_side_each: bool = False) -> Resolved:
    """Each spec's newest line (``follow``), unless ``exact`` or the spec names a commit
    (LINE@COMMIT is that line's measurement). ``one_side_each`` (compare, two sides): where
    following would put two differently named sides on one line, both stay as named;
    otherwise (route) a line reached twice is used once. Notes say what was followed, then
    each used line's history (amended, re-opened, re-measured)."""
    idx = index(root)
    named = [split_spec(s) for s in specs]
    # Compare's sides: one side's chain is followed no further than the other named side, so
    # comparing a line with its amendment never depends on what amends that one.
    sides = frozenset(line for line, _ in named) if one_side_each else frozenset()
    on_one_chain = one_side_each and any(_descends(idx, a, b) for a in sides for b in sides if a != b)
    followed = [(line, (line,)) if exact or commit or on_one_chain or line not in idx.first else
                follow(idx, line, sides - {line}) for line, commit in named]
    notes: list[str] = []
    if on_one_chain or (one_side_each and len({to for to, _ in followed}) < len({line for line, _ in named})):
        notes.append(f"{' and '.join(line for line, _ in named)} are one amendment chain: compared as named")
        followed = [(line, (line,)) for line, _ in named]
    out: list[str] = []
    for spec, (line, _), (to, path) in zip(specs, named, followed):
        if to != line:
            notes.append(f"{line} is amended by {' → '.join(path[1:])}: using {to} (--exact uses {line} as named)")
            spec = to
        if one_side_each or spec not in out:
            out.append(spec)
    for line in dict.fromkeys(split_spec(s)[0] for s in out):
        if line in idx.first:
            for n in line_history(idx, line).notes(max_listed=MAX_LISTED):
                notes += [f"{line}: {n.lines()[0]}", *n.lines()[1:]]
    return Resolved(tuple(out), tuple(notes))


def chains(idx: Index) -> list[list[tuple[int, str]]]:
    """Every amendment chain as a tree, depth-first: [(depth, line), ...] per root, roots
    being the lines that amend no line known here. A cycle (never made by `bench register`)
    is broken at its first line by name."""
    known = set(idx.lines())
    roots = [x for x in idx.lines() if idx.amends(x) not in known]
    seen: set[str] = set()
    out = []

    def walk(line: str, depth: int, tree: list) -> None:
        seen.add(line)
        tree.append((depth, line))
        for child in idx.amended_by(line):
            if child not in seen:
                walk(child, depth + 1, tree)

    for r in roots + [x for x in idx.lines()]:
        if r not in seen:
            tree: list = []
            walk(r, 0, tree)
            out.append(tree)
    return out
