"""A line's history everywhere (issue 27 items 4 and 5): `bench sweep --remeasure` measures
again what the verdict cannot use, recorded by `supersedes` rows that `ledger verify` checks;
amendments, re-opens, deleted ledgers (GONE) and re-measures appear in status, the report,
`ledger show`, `compare` and `route`, which follow an amendment chain unless `--exact`."""

from __future__ import annotations

import json

import pytest

from harness.ledger.store import Ledger
from harness.ledger.format import read_rows
from harness.ledger.verify import verify
from harness.vocab.outcomes import OUTCOME_KINDS, state_of
from tests.conftest import REPO, TINY, git, run_bench

# The fields that place an outcome row: where it was measured, under which bar, of which pair.
PLACE = ("commit", "registration_sha256", "registration_commit", "harness_version", "code", "env", "config", "config_key",
         "candidate", "baseline")
CPU = {"device": "cpu", "gpu": None, "host": "test"}


def rows(root, line="tiny"):
    return read_rows(root / "ledger" / f"{line}.jsonl")


def commit_all(root, msg):
    git(root, "add", "-A")
    git(root, "commit", "-qm", msg)


def registered(repo, *lines):
    for line in lines:
        r = run_bench(repo, "register", line)
        assert r.returncode == 0, r.stderr
    commit_all(repo, f"register {', '.join(lines)}")


def amending(repo, line, old, text=TINY):
    (repo / "registrations" / f"{line}.toml").write_text(f'amends = "{old}"\n' + text.replace(">= 0.01", ">= 0.5"))
    commit_all(repo, f"{line} amends {old}")


def outcome(led, kind, key, *, commit="c" * 40, **fields):
    """An outcome row of sdpa at config ``key`` measured at ``commit`` on the CPU."""
    return led.append(kind, {"commit": commit, "env": CPU, "config_key": key, "candidate": "sdpa",
                             "config": {"seq_len": 32}, **fields})


# --- 4. re-measure -----------------------------------------------------------------------------

@pytest.mark.slow
def test_remeasure_settles_a_pair_the_verdict_cannot_use_and_every_view_shows_it(repo, tmp_path):
    registered(repo, "tiny")
    assert run_bench(repo, "sweep", "tiny").returncode == 0
    swept = [r for r in rows(repo) if r.kind in OUTCOME_KINDS and r.candidate == "sdpa"]
    assert len(swept) == 2, [(r.kind, r.reason) for r in swept]
    last = swept[-1]
    # A pair that could not be judged where it was measured: not retried by a plain sweep.
    skipped = Ledger(repo, "tiny").append("skipped", {**{k: getattr(last, k) for k in PLACE},
                                                      "reason": "the memory-of-inputs check could not be judged"})
    commit_all(repo, "a skip at the sweep's commit")
    refused = run_bench(repo, "verdict", "tiny")
    assert refused.returncode == 2 and "`bench sweep tiny --remeasure`" in refused.stderr, refused.stderr
    plain = run_bench(repo, "sweep", "tiny")
    assert plain.returncode == 0 and "nothing run" in plain.stdout
    assert "1 pair (skipped: 1) here the verdict cannot use: run `bench sweep tiny --remeasure`" in plain.stdout

    n = len(rows(repo))
    s = run_bench(repo, "sweep", "tiny", "--remeasure")
    assert s.returncode == 0, s.stderr
    assert "--remeasure: 1 pair (skipped: 1) the verdict could not use, measured again" in s.stdout
    new = rows(repo)[n:]
    (sup,) = [r for r in new if r.kind == "supersedes"]
    assert skipped.seq in sup.supersedes and "--remeasure" in sup.reason
    (res,) = [r for r in new if r.kind in OUTCOME_KINDS]
    assert (res.config_key, res.candidate, res.commit) == (last.config_key, last.candidate,
                                                                     last.commit)
    now = f"skipped (row {skipped.seq}) → {state_of(res)} (row {res.seq})"

    v = run_bench(repo, "ledger", "verify", "tiny")
    assert v.returncode == 0 and "1 pair re-measured at the same commit" in v.stdout and now in v.stdout, v.stdout
    d = run_bench(repo, "verdict", "tiny")
    assert d.returncode in (0, 1), d.stderr
    verdict = rows(repo)[-1]
    (m,) = verdict.remeasured
    assert m["current"] == {"seq": res.seq, "state": state_of(res)}
    assert {"seq": skipped.seq, "state": "skipped"} in m["replaced"]
    assert res.seq in verdict.decided_on and skipped.seq not in verdict.decided_on
    assert "re-measured at the same commit, decided on the newest measurement (1 pair)" in d.stdout and now in d.stdout

    st = run_bench(repo, "status")
    assert st.returncode == 0 and "1 pair re-measured" in st.stdout
    show = run_bench(repo, "ledger", "show", "tiny")
    assert f"(superseded by row {sup.seq})" in show.stdout and now in show.stdout
    rep = run_bench(repo, "report", "tiny", "--out", str(tmp_path / "rep"))
    assert rep.returncode == 0, rep.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert md.index("**History.**") < md.index("## Bar and verdict") and now in md
    assert now in (tmp_path / "rep" / "report.html").read_text()


@pytest.mark.slow
def test_remeasure_runs_rig_noisy_pairs_again_where_a_plain_sweep_runs_nothing(repo):
    from harness.cli.sweep import EXIT_NOTHING_USABLE
    from harness.commands.sweep import NOISY_REMEASURES

    noisy = TINY.replace("timeout_s = 5", "timeout_s = 5\ncontrol_tolerance = 1e-12").replace(
        "include_noisy = true", "include_noisy = false").replace("seq_len = [32, 48]", "seq_len = [32]")
    (repo / "registrations" / "noisy.toml").write_text(noisy)
    commit_all(repo, "a line no rig can hold to its control tolerance")
    registered(repo, "noisy")
    # Nothing the verdict can use, so each sweep of this line says so by its exit code.
    assert run_bench(repo, "sweep", "noisy").returncode == EXIT_NOTHING_USABLE
    refused = run_bench(repo, "verdict", "noisy")
    assert refused.returncode == 2 and "(rig-noisy)" in refused.stderr
    assert "`bench sweep noisy --remeasure`" in refused.stderr
    plain = run_bench(repo, "sweep", "noisy")
    assert plain.returncode == EXIT_NOTHING_USABLE and "nothing run; 1 already done" in plain.stdout
    assert "1 pair (rig-noisy: 1) here the verdict cannot use" in plain.stdout
    n = len(rows(repo, "noisy"))
    s = run_bench(repo, "sweep", "noisy", "--remeasure")
    assert s.returncode == EXIT_NOTHING_USABLE, s.stderr
    new = rows(repo, "noisy")[n:]
    assert sum(r.kind == "result" for r in new) == 1 + NOISY_REMEASURES
    assert sum(r.kind == "supersedes" for r in new) == 1 + NOISY_REMEASURES
    res = verify(repo / "ledger" / "noisy.jsonl")
    assert res.ok and len(res.remeasured) == 1
    assert [state for _, state in res.remeasured[0].replaced] == ["rig-noisy"] * (2 * (1 + NOISY_REMEASURES) - 1)


def test_a_supersedes_row_that_rerolls_a_decided_outcome_fails_verification(repo, monkeypatch):
    from harness.governance import line as gl

    monkeypatch.chdir(repo)
    gl.register("tiny", env={"host": "test"})
    led = Ledger(repo, "tiny")
    failed = outcome(led, "incorrect", "a", role="candidate", tag="mismatch", reason="wrong")
    noisy = outcome(led, "skipped", "b", reason="could not be judged")
    elsewhere = outcome(led, "result", "c", commit="d" * 40, metrics={}, rig_noisy=False)
    at = {"commit": "c" * 40, "env": CPU}
    led.append("supersedes", {**at, "config_key": "b", "supersedes": [noisy.seq], "reason": "re-measured"})
    again = outcome(led, "result", "b", metrics={}, rig_noisy=False)
    led.append("supersedes", {**at, "config_key": "c", "supersedes": [elsewhere.seq], "reason": "a new commit"})
    good = verify(led.path)
    assert good.ok, good.reason
    (m,) = good.remeasured
    assert (m.config_key, m.replaced, m.current) == ("b", ((noisy.seq, "skipped"),), (again.seq, "result"))
    commit_all(repo, "a line whose re-measures are sound")
    ok = run_bench(repo, "ledger", "verify", "tiny")
    assert ok.returncode == 0 and "1 pair re-measured" in ok.stdout, ok.stdout + ok.stderr

    reroll = led.append("supersedes", {**at, "config_key": "a", "supersedes": [failed.seq], "reason": "again"})
    bad = verify(led.path)
    assert not bad.ok and bad.bad_row == reroll.seq
    assert f"supersedes row {failed.seq} (sdpa @ a: incorrect)" in bad.reason and "never re-rolled" in bad.reason
    r = run_bench(repo, "ledger", "verify", "tiny")
    assert r.returncode == 1 and "never re-rolled" in r.stdout


@pytest.mark.parametrize("named, why", [("other", "not its own config"), ("later", "which is a later row"),
                                        ("twice", "already superseded"), ("registered", "a registered row")])
def test_a_supersedes_row_names_earlier_outcomes_of_its_own_config_once(tmp_path, named, why):
    (tmp_path / "ledger").mkdir()
    led = Ledger(tmp_path, "x")
    led.append("registered", {"registration": {"include_noisy": False}})
    first = outcome(led, "throttled", "a", reason="clocks dropped")
    at = {"commit": "c" * 40, "env": CPU}
    seq = {"other": first.seq, "later": 9, "twice": first.seq, "registered": 0}[named]
    if named == "twice":
        led.append("supersedes", {**at, "config_key": "a", "supersedes": [first.seq], "reason": "retried"})
    led.append("supersedes", {**at, "config_key": "b" if named == "other" else "a", "supersedes": [seq],
                              "reason": "retried"})
    res = verify(led.path)
    assert not res.ok and why in res.reason, res.reason


# --- 5. history everywhere ---------------------------------------------------------------------

def test_the_shipped_amendment_shows_in_status_lineage_report_route_and_compare(tmp_path):
    st = run_bench(REPO, "status")
    assert st.returncode == 0, st.stderr
    (flash,) = [x for x in st.stdout.splitlines() if x.startswith("flash-h200 ")]  # piped: plain columns
    assert "closed GO — amended by flash-h200-v2" in flash
    lineage = run_bench(REPO, "status", "--lineage")
    text = lineage.stdout
    assert lineage.returncode == 0 and text.index("flash-h200 — closed GO") < text.index(
        "amended by flash-h200-v2 — closed GO")
    rep = run_bench(REPO, "report", "flash-h200", "--out", str(tmp_path / "rep"))
    assert rep.returncode == 0 and "history: amended by flash-h200-v2" in rep.stdout
    md = (tmp_path / "rep" / "report.md").read_text()
    assert md.index("amended by flash-h200-v2") < md.index("## Bar and verdict")
    # flash-h200-v2 is amended twice (the peer line, and flash-h200-v3: its bar under the current
    # harness): the chain has no one newest line, so following it is refused, naming both.
    route = run_bench(REPO, "route", "flash-h200", "--out", str(tmp_path / "r1"))
    assert route.returncode == 2 and not (tmp_path / "r1").exists(), route.stderr
    assert "amended by 2 lines (flash-h200-peers, flash-h200-v3)" in route.stderr and "--exact" in route.stderr
    peers = run_bench(REPO, "route", "flash-h200-peers", "--out", str(tmp_path / "r1"))
    assert peers.returncode == 0, peers.stderr
    assert json.loads((tmp_path / "r1" / "route.json").read_text())["lines"] == ["flash-h200-peers"]
    exact = run_bench(REPO, "route", "flash-h200", "--exact", "--out", str(tmp_path / "r2"))
    assert exact.returncode == 0 and "flash-h200: amended by flash-h200-v2" in exact.stdout
    assert json.loads((tmp_path / "r2" / "route.json").read_text())["lines"] == ["flash-h200"]
    both = run_bench(REPO, "compare", "flash-h200", "flash-h200-v2")
    assert both.returncode == 0, both.stderr
    assert "flash-h200 and flash-h200-v2 are one amendment chain: compared as named" in both.stdout
    assert "flash-h200-v2 against flash-h200" in both.stdout


def test_status_shows_amendments_and_lineage_and_route_refuses_a_fork(repo):
    registered(repo, "tiny")
    Ledger(repo, "tiny").append("verdict", {"outcome": "GO", "measured_at": {"commit": "c" * 40, "device": "cpu"}})
    commit_all(repo, "a decided line")
    amending(repo, "tiny2", "tiny")
    registered(repo, "tiny2")
    st = run_bench(repo, "status")
    assert st.returncode == 0 and "closed GO — amended by tiny2" in st.stdout and "amends tiny" in st.stdout
    amending(repo, "tiny3", "tiny")
    registered(repo, "tiny3")
    lineage = run_bench(repo, "status", "--lineage").stdout
    assert lineage.index("tiny — closed GO") < lineage.index("amended by tiny2") < lineage.index("amended by tiny3")
    assert "closed GO — amended by tiny2, tiny3" in run_bench(repo, "status").stdout
    r = run_bench(repo, "route", "tiny")
    assert r.returncode == 2 and "amended by 2 lines (tiny2, tiny3)" in r.stderr and "--exact" in r.stderr


def test_a_reopened_line_shows_what_it_discarded_in_status_report_and_ledger_show(repo, tmp_path):
    registered(repo, "tiny")
    led = Ledger(repo, "tiny")
    outcome(led, "throttled", "a", reason="clocks dropped")
    outcome(led, "skipped", "b", reason="could not be judged")
    commit_all(repo, "a sweep that looked bad")
    at = git(repo, "rev-parse", "HEAD")
    git(repo, "rm", "-q", "ledger/tiny.jsonl")
    git(repo, "commit", "-qm", "drop the ledger")
    gone = run_bench(repo, "status")
    assert gone.returncode == 0 and "GONE" in gone.stdout and "was swept 2 of 2 pairs" in gone.stdout
    assert "deleted in commit" in gone.stdout
    refused = run_bench(repo, "report", "tiny")
    assert refused.returncode == 2 and "line 'tiny' is GONE" in refused.stderr
    r = run_bench(repo, "register", "tiny", "--reopen")
    assert r.returncode == 0, r.stderr
    commit_all(repo, "re-open tiny")
    discarded = f"re-opened: discarded ledger/tiny.jsonl as committed at {at[:12]} (3 rows, 2 outcomes measured at " \
                f"{'c' * 12}, no verdict)"
    st = run_bench(repo, "status")
    assert f"registered — re-opened (discarded 3 rows of {at[:12]})" in st.stdout, st.stdout
    assert "GONE" not in st.stdout
    show = run_bench(repo, "ledger", "show", "tiny")
    assert show.returncode == 0 and discarded in show.stdout.replace("\n", "")
    rep = run_bench(repo, "report", "tiny", "--out", str(tmp_path / "rep"))
    assert rep.returncode == 0 and discarded in (tmp_path / "rep" / "report.md").read_text()
    assert "re-opened" in run_bench(repo, "status", "--lineage").stdout


def test_a_deleted_ledger_is_gone_not_dropped(repo):
    registered(repo, "tiny")
    amending(repo, "tiny2", "tiny")
    registered(repo, "tiny2")
    (repo / "ledger" / "tiny.jsonl").unlink()
    st = run_bench(repo, "status")
    assert st.returncode == 0, st.stderr
    (line,) = [x for x in st.stdout.splitlines() if x.startswith("tiny ")]  # piped: plain columns
    assert "GONE" in line and "amended by tiny2" in st.stdout
    assert "committed at HEAD but deleted from the work tree" in st.stdout.replace("\n", "")
    assert "GONE" in run_bench(repo, "status", "--lineage").stdout
    r = run_bench(repo, "route", "tiny")
    assert r.returncode == 2 and "line 'tiny' is GONE" in r.stderr
    show = run_bench(repo, "ledger", "show", "tiny")
    assert show.returncode == 2 and "line 'tiny' is GONE" in show.stderr


def test_a_chain_is_followed_to_its_newest_line_unless_exact_or_pinned_to_a_commit(tmp_path):
    from harness.reporting.analysis.history import chains, index, resolve

    (tmp_path / "ledger").mkdir()
    for line, amends in (("a", None), ("b", "a"), ("c", "b"), ("z", None)):
        Ledger(tmp_path, line).append("registered", {"amends": amends, "registration": {"amends": amends}})
    got = resolve(tmp_path, ["a", "z"], exact=False)
    assert got.specs == ("c", "z") and "a is amended by b → c: using c (--exact uses a as named)" in got.notes
    assert resolve(tmp_path, ["a", "b", "c"], exact=False).specs == ("c",)  # one chain routes once
    assert resolve(tmp_path, ["a", "z"], exact=True).specs == ("a", "z")
    pinned = resolve(tmp_path, ["a@abc123", "c"], exact=False, one_side_each=True)
    assert pinned.specs == ("a@abc123", "c") and "a: amended by b: its bar was changed" in " ".join(pinned.notes)
    assert [[line for _, line in tree] for tree in chains(index(tmp_path))] == [["a", "b", "c"], ["z"]]
