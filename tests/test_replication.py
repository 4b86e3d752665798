"""Replication recorded in the ledger (issue 48, item 3): `bench replicate` sweeps a line again on
another device instance, its rows beside the line's, never changing the verdict; `bench status`
and `bench report` show clause by clause whether each replicate agrees, with the spread; a
registration with ``[replication] instances = N`` waits for N instances and combines them by its
rule (all, pooled, worst).

On the CPU a device instance is its host. The line's own rows are built as the sweep builds
them (``run_config``) and appended by the ledger's writer, stamped with this host's env where
only the host differs — the rows another machine would have written, as tests/test_cycles.py
builds rows of two software stacks; the replicate is then a real `bench replicate` on this
host, through the CLI, in a real git repository. Every refusal: one line, exit 2, the ledger's
bytes and git's HEAD as they were.
"""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.registration import schema as registration
from harness.ledger.format import read_rows
from harness.registration.schema import from_table
from tests.conftest import MEASURE_ATTEMPTS, TINY, git, init_repo, run_bench

# TINY with room for the refresh checks on a loaded 2-core host (a replicate that leaves a pair
# skipped is a grid a [replication] verdict cannot count).
LINE = TINY.replace("max_samples = 40", "max_samples = 200").replace("timeout_s = 5", "timeout_s = 30")
OTHER_HOST = "machine-id:00000000000000aa"  # another machine's host hash: its rows are another instance
TINY_GO = 'go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"'


def _line(go: str | None = None, replication: str | None = None) -> str:
    text = LINE if go is None else LINE.replace(TINY_GO, f"go = {json.dumps(go)}")
    if replication is not None:
        text = text.replace("schema = 1", "schema = 7") + f"\n[replication]\n{replication}\n"
    return text


def _reg(text: str, name: str = "t"):
    return from_table(tomllib.loads(text), Path(f"registrations/{name}.toml"), "0" * 64)


def _here_env(**changes) -> dict:
    from harness.measurement.device import env_summary

    return {**env_summary("cpu"), **changes}


# What run_config measured per config key: every line of this module registers LINE's grid,
# kernels and timing (only its bar and [replication] differ), so the other machine's sweep is
# measured once for the module and its rows written to each line that needs them.
_MEASURED: dict[str, list] = {}


def _measured(ln, cfg) -> list:
    """run_config's outcomes at ``cfg``: measured on first use, again (up to MEASURE_ATTEMPTS
    times) while a pair is skipped or throttled on a loaded host, as a user re-measures; kept
    for the module's other lines only once every pair was measured."""
    from harness.commands.sweep import context
    from harness.pipeline.run import run_config
    from harness.vocab.outcomes import MISSING_KINDS, UNSUPPORTED

    outcomes = _MEASURED.get(cfg.key())
    if outcomes is None:
        for _ in range(1 + MEASURE_ATTEMPTS):
            outcomes = run_config(cfg, ln.reg.candidates, context(ln, "cpu", None))
            if not any(o.kind in MISSING_KINDS and o.kind != UNSUPPORTED for o in outcomes):
                _MEASURED[cfg.key()] = outcomes
                break
    return [(o.kind, copy.deepcopy(o.payload)) for o in outcomes]


def _own_rows(repo: Path, line: str, env: dict, *, wrong: int | None = None) -> None:
    """Register ``line`` and write its own sweep's rows as ``env``'s machine would (run_config,
    appended by the ledger's writer), committed; with ``wrong``, that config's candidate is an
    `incorrect` row (a card whose output fails the gate there)."""
    from harness.governance.line import open_line, register

    register(line, root=repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"registered {line}")
    with open_line(line, root=repo, action="a test") as ln:
        for i, cfg in enumerate(ln.reg.configs):
            stamp = ln.stamp(env).fields()
            for kind, payload in _measured(ln, cfg):
                if i == wrong and kind == "result":
                    payload = {k: payload[k] for k in ("config", "config_key", "candidate", "baseline",
                                                       "kernel_sources")}
                    payload.update(tag="mismatch", reason="max abs err 0.5 > atol 1e-05 (this card computes wrong)")
                    ln.ledger.append("incorrect", {**stamp, **payload})
                    continue
                ln.ledger.append(kind, {**stamp, **payload})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"rows of {line}")


def _bench(repo: Path, *args: str, rc: int = 0):
    r = run_bench(repo, *args)
    assert r.returncode == rc, (args, r.stdout[-3000:], r.stderr[-3000:])
    return r


def _refused(repo: Path, line: str, *args: str) -> str:
    """``bench *args`` refused: one line, exit 2, the ledger and HEAD as they were."""
    ledger = repo / "ledger" / f"{line}.jsonl"
    before, head = ledger.read_bytes(), git(repo, "rev-parse", "HEAD")
    r = run_bench(repo, *args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert ledger.read_bytes() == before and git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "status", "--porcelain", "--", "ledger") == ""
    return r.stderr


def _rep(row) -> dict | None:
    """A row's ``replicate`` (None on the line's own rows and on kinds that never hold it)."""
    return getattr(row, "replicate", None)


def _rows(repo: Path, line: str) -> list:
    return read_rows(repo / "ledger" / f"{line}.jsonl")


# ----------------------------------------------------------------------------- the registration


def test_the_replication_table_needs_schema_7_and_is_checked(tmp_path, monkeypatch):
    reg = _reg(_line(replication='instances = 3\ncombine = "worst"'))
    assert reg.schema == 7 and reg.replication.instances == 3 and reg.replication.combine == "worst"
    assert reg.summary()["replication"] == {"instances": 3, "combine": "worst"}
    assert _reg(_line(replication="instances = 2")).replication.combine == "all"
    assert _reg(LINE).replication is None and "replication" not in _reg(LINE).summary()
    old = _line(replication="instances = 2").replace("schema = 7", "schema = 6")
    with pytest.raises(UserError, match=r"\[replication\] instances needs schema = 7"):
        _reg(old)
    for table, why in (("instances = 0", r"instances = 0: give an integer in \[1, 16\]"),
                       ("instances = 17", "instances = 17"), ('instances = "2"', "instances = '2'"),
                       ("instances = true", "instances = True"), ("combine = \"all\"", "needs instances = N"),
                       ('instances = 2\ncombine = "mean"', "combine = 'mean': use 'all', 'pooled', 'worst'"),
                       ("instances = 2\nhosts = 2", "unknown field hosts")):
        with pytest.raises(UserError, match=r"\[replication\] " + why):
            _reg(_line(replication=table))
    # An older bench (schema 6) refuses the file instead of closing the line without its replicates.
    path = tmp_path / "t.toml"
    path.write_text(_line(replication="instances = 2"))
    assert registration.load(path).replication.required
    monkeypatch.setattr(registration, "REGISTRATION_SCHEMA", 6)
    with pytest.raises(UserError, match="registration schema 7 is newer than this bench understands .*upgrade bench"):
        registration.load(path)


# ----------------------------------------------------------------------------- combining instances


def _bar_rows(correct: list[bool], speedup: float = 1.2) -> list[dict]:
    return [{"workload": "attention", "batch": 1, "heads": 2, "kv_heads": 2, "seq_len": n, "head_dim": 16,
             "dtype": "float32", "causal": False, "candidate": "sdpa", "correct": ok,
             **({"speedup": speedup} if ok else {})} for n, ok in zip((32, 48), correct)]


@pytest.mark.parametrize("go,rule,go_expected,values", [
    # The line's own instance: one pair fails (pass rate 0.5); the replicate: both pass (1.0).
    ("pass_rate >= 0.7", "all", False, [0.5]),  # the own instance's bar fails
    ("pass_rate >= 0.7", "worst", False, [0.5]),
    ("pass_rate >= 0.7", "pooled", True, [0.75]),  # 3 of the 4 rows pass
    # Each instance passes its bar through another branch: all passes, the worst clauses do not (a bar
    # that is GO whatever is measured, such as `pass_rate >= 0.7 or pass_rate <= 0.6`, is refused at register).
    ("pass_rate >= 0.7 or (pass_rate <= 0.6 and geomean(speedup) >= 0.01)", "all", True, [0.5, 1.0, 1.2]),
    ("pass_rate >= 0.7 or (pass_rate <= 0.6 and geomean(speedup) >= 0.01)", "worst", False, [0.5, 1.0, 1.2]),
    ("pass_rate >= 0.7 or (pass_rate <= 0.6 and geomean(speedup) >= 0.01)", "pooled", True, [0.75, 0.75, 1.2]),
    # Under `not` the worst value of a clause is the one that passes it.
    ("not (pass_rate < 0.7)", "worst", False, [0.5]),
    ("not (pass_rate > 0.7)", "worst", False, [1.0]),
])
def test_all_pooled_and_worst_combine_instances_as_documented(go, rule, go_expected, values):
    from harness.registration.replication import combined

    reg = _reg(_line(go=go, replication=f'instances = 2\ncombine = "{rule}"'))
    own, rep = {"host": "a"}, {"host": "b"}
    out = combined(reg, [(own, [1, 2], _bar_rows([True, False])), (rep, [7, 8], _bar_rows([True, True]))])
    assert out.passed is go_expected
    assert [c.value for c in out.clauses] == pytest.approx(values)
    first, second = out.record["per_instance"]
    assert out.record["combine"] == rule and out.record["instances"] == 2
    assert first["original"] and first["instance"] == own and first["decided_on"] == [1, 2]
    assert second["instance"] == rep and not second["original"]
    assert first["clauses"][0]["value"] == pytest.approx(0.5) and second["clauses"][0]["value"] == pytest.approx(1.0)


def test_instances_are_the_host_and_the_cards_uuid_or_serial():
    from harness.vocab.devices import card_told, instance, instance_key, instance_text

    card = {"device": "cuda", "gpu": "NVIDIA H200", "host": "machine-id:1", "gpu_uuid": "GPU-1", "gpu_serial": "17"}
    assert instance(card) == {"host": "machine-id:1", "gpu_uuid": "GPU-1", "gpu_serial": "17"}
    assert instance_key(card) != instance_key({**card, "gpu_uuid": "GPU-2"})  # another card of the host
    assert instance_key(card) != instance_key({**card, "host": "machine-id:2"})  # the same UUID elsewhere: not one
    assert instance_key({**card, "gpu_uuid": None}) == ("machine-id:1", "17")  # the serial where NVML gives no UUID
    assert not card_told({**card, "gpu_uuid": None, "gpu_serial": None})
    cpu = {"device": "cpu", "host": "machine-id:1", "gpu_uuid": None, "gpu_serial": None}
    assert card_told(cpu) and instance_key(cpu) == ("machine-id:1", None)
    assert instance_text(card) == "host machine-id:1 card GPU-1" and instance_text(cpu) == "host machine-id:1"


def test_a_replicate_is_at_the_closing_commit_or_a_later_one_named_as_such(tmp_path):
    from types import SimpleNamespace

    from harness.registration.replication import AT_CLOSING, AT_LATER, Target, at_commit

    repo = init_repo(tmp_path / "proj", {"t": LINE})
    closing = git(repo, "rev-parse", "HEAD")
    (repo / "a.txt").write_text("later\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-qm", "later")
    later = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "--orphan", "other")
    git(repo, "commit", "-q", "--allow-empty", "-m", "unrelated")
    unrelated = git(repo, "rev-parse", "HEAD")

    def at(here, *, decided=True, flag=False):
        tgt = Target("t", SimpleNamespace(seq=9) if decided else None, closing, (closing, "cpu", None, None), {}, ())
        return at_commit(SimpleNamespace(commit=here, root=repo), tgt, later=flag)

    assert at(closing) == AT_CLOSING and at(closing, flag=True) == AT_CLOSING
    assert at(later, flag=True) == AT_LATER
    with pytest.raises(UserError, match="pass --later to replicate at"):
        at(later)
    with pytest.raises(UserError, match="does not descend from"):
        at(unrelated, flag=True)
    with pytest.raises(UserError, match="the replicates its verdict waits for are measured at the line's commit"):
        at(later, decided=False, flag=True)


# ----------------------------------------------------------------------------- a closed line, replicated


@pytest.mark.slow
def test_a_replicate_of_a_closed_line_goes_beside_the_verdict_and_is_shown_against_it(tmp_path):
    from harness.ledger.verify import verify
    from harness.vocab.outcomes import latest_outcomes

    repo = init_repo(tmp_path / "proj", {"tiny": LINE})
    _own_rows(repo, "tiny", _here_env(host=OTHER_HOST))
    _bench(repo, "verdict", "tiny")
    closed = (repo / "ledger" / "tiny.jsonl").read_bytes()
    verdict = next(r for r in _rows(repo, "tiny") if r.kind == "verdict")

    out = _bench(repo, "replicate", "tiny", "--no-ceilings").stdout
    assert f"replicate (of verdict row {verdict.seq}, on host machine-id:" in out and "at the closing commit" in out
    now = (repo / "ledger" / "tiny.jsonl").read_bytes()
    assert now.startswith(closed) and git(repo, "status", "--porcelain", "--", "ledger") == ""  # appended, committed
    rows = _rows(repo, "tiny")
    mine = rows[verdict.seq + 1:]
    assert mine and all(r.kind in ("result", "skipped") for r in mine)
    here = _here_env()["host"]
    for r in mine:
        assert r.replicate == {"of": verdict.seq, "closing_commit": verdict.measured_at["commit"], "at": "closing",
                               "instance": {"host": here, "gpu_uuid": None, "gpu_serial": None}, "stack": "same"}
        assert r.commit == verdict.measured_at["commit"]
    # The verdict's own reading of the line is untouched: its rows are the line's own, not the replicate's.
    assert sorted(r.seq for r in latest_outcomes(rows).values()) == verdict.decided_on
    assert verify(repo / "ledger" / "tiny.jsonl").ok
    _refused(repo, "tiny", "verdict", "tiny")  # still closed, once
    _refused(repo, "tiny", "sweep", "tiny")

    # Resuming a replicate that ran to the end runs nothing and writes nothing.
    _bench(repo, "replicate", "tiny", "--no-ceilings")
    assert (repo / "ledger" / "tiny.jsonl").read_bytes() == now

    status = json.loads(_bench(repo, "status", "--format", "json").stdout)[0]
    rep = status["replication"]
    assert status["outcome"] == "GO" and rep["outcome"] == "GO" and not rep["provisional"]
    (one,) = rep["replicates"]
    assert one["of"] == verdict.seq and one["complete"] and one["in_spread"] and one["stack"] == "same"
    assert [c["text"] for c in one["clauses"]] == [c["text"] for c in verdict.clauses]
    for c, v in zip(one["clauses"], verdict.clauses):
        assert c["agrees"] == (c["passed"] == v["passed"])
    assert one["agrees"] == one["passed"]  # against GO
    speed = rep["spread"][0]
    assert speed["n"] == 2 and speed["min"] <= verdict.clauses[0]["value"] <= speed["max"]
    assert speed["relative"] == pytest.approx((speed["max"] - speed["min"]) / verdict.clauses[0]["value"])
    assert "1 replicate" in rep["short"] and "replicates" in _bench(repo, "status").stdout

    data = json.loads(_bench(repo, "report", "tiny", "--format", "json").stdout)["replication"]
    assert data["header"][5:7] == [c["text"] for c in verdict.clauses]
    assert len(data["rows"]) == 2 and data["rows"][0]["cells"][0].endswith("(the line's own)")
    assert not (repo / "reports").exists()  # --format json writes nothing
    _bench(repo, "report", "tiny", "--out", str(tmp_path / "report"))
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Replication" in md and f"host {here}" in md and "relative spread" in md
    assert "replicate of verdict row" in _bench(repo, "ledger", "show", "tiny").stdout

    # A later commit: refused unless named as such, then replicated there beside the first.
    (repo / "NOTES.md").write_text("a later commit\n")
    git(repo, "add", "NOTES.md")
    git(repo, "commit", "-qm", "later")
    err = _refused(repo, "tiny", "replicate", "tiny", "--no-ceilings")
    assert "is not" in err and "pass --later to replicate at" in err
    _bench(repo, "replicate", "tiny", "--no-ceilings", "--later")
    later = [r for r in _rows(repo, "tiny") if _rep(r) and _rep(r)["at"] == "later"]
    assert later and {r.commit for r in later} == {git(repo, "log", "-1", "--format=%H", "--", "NOTES.md")}
    assert {r.replicate["closing_commit"] for r in later} == {verdict.measured_at["commit"]}
    rep = json.loads(_bench(repo, "status", "--format", "json").stdout)[0]["replication"]
    assert [(r["at"], r["in_spread"]) for r in rep["replicates"]] == [("closing", True), ("later", False)]
    assert rep["spread"][0]["n"] == 2  # a later commit is shown, not spread
    assert (repo / "ledger" / "tiny.jsonl").read_bytes().startswith(closed)

    # The chain covers replicate rows as any: one that supersedes the line's own row is refused.
    from harness.ledger.store import Ledger

    first = mine[0]
    Ledger(repo, "tiny").append("supersedes", {
        **{k: getattr(first, k) for k in ("commit", "registration_sha256", "registration_commit", "harness_version",
                                           "code", "env")},
        "config_key": first.config_key, "supersedes": [verdict.decided_on[0]], "reason": "forged",
        "replicate": first.replicate})
    res = verify(repo / "ledger" / "tiny.jsonl")
    assert not res.ok and "a replicate and the line's own rows never replace each other" in res.reason


# ----------------------------------------------------------------------------- refusals


@pytest.mark.slow
def test_a_replicate_is_refused_on_the_verdicts_instance_another_stack_or_an_open_line(tmp_path):
    repo = init_repo(tmp_path / "proj", {"mine": LINE, "stack": LINE, "open": LINE})
    _own_rows(repo, "mine", _here_env())  # measured on this very host
    _own_rows(repo, "stack", _here_env(host=OTHER_HOST, torch="0.0.1+other"))
    _own_rows(repo, "open", _here_env(host=OTHER_HOST))
    _bench(repo, "verdict", "mine")
    _bench(repo, "verdict", "stack")

    err = _refused(repo, "open", "replicate", "open", "--no-ceilings")
    assert "line 'open' is not closed: a replicate measures a decided line again" in err
    assert "bench verdict open" in err
    err = _refused(repo, "mine", "replicate", "mine", "--no-ceilings")
    assert "measured line 'mine' itself: a replicate runs on another card or host" in err
    err = _refused(repo, "mine", "replicate", "mine", "--gpus", "0,1")
    assert "a replicate runs on one device instance" in err
    err = _refused(repo, "stack", "replicate", "stack", "--no-ceilings")
    assert "software stack differs" in err and "torch 0.0.1+other there" in err and "--other-stack" in err

    # Recorded when asked: marked, shown as another stack, never in the spread.
    _bench(repo, "replicate", "stack", "--no-ceilings", "--other-stack")
    marked = [r for r in _rows(repo, "stack") if _rep(r)]
    assert marked and {r.replicate["stack"] for r in marked} == {"other"}
    lines = {s["line"]: s for s in json.loads(_bench(repo, "status", "--format", "json").stdout)}
    rep = lines["stack"]["replication"]
    assert "1 on another stack" in rep["short"] and not rep["replicates"][0]["in_spread"]
    assert all(s["n"] == 1 for s in rep["spread"])
    assert lines["mine"]["replication"] is None and lines["open"]["replication"] is None
    # The instance now holds rows of the line at this commit: replicating it again as another
    # verdict's replicate is not a replicate (its own run resumes, and runs nothing).
    _bench(repo, "replicate", "stack", "--no-ceilings", "--other-stack")
    assert [r for r in _rows(repo, "stack") if _rep(r)] == marked


# ----------------------------------------------------------------------------- a verdict that waits


@pytest.mark.slow
@pytest.mark.parametrize("rule,go,code,values", [
    ("all", "pass_rate >= 0.7 or (pass_rate <= 0.6 and geomean(speedup) >= 0.01)", 0, [0.5, 1.0]),
    ("worst", "pass_rate >= 0.7 or (pass_rate <= 0.6 and geomean(speedup) >= 0.01)", 1, [0.5, 1.0]),
    ("pooled", "pass_rate >= 0.7", 0, [0.75]),  # all and worst: NO-GO (the line's own instance fails)
])
def test_a_verdict_waits_for_its_instances_then_combines_them_by_its_rule(tmp_path, rule, go, code, values):
    text = _line(go=go, replication=f'instances = 2\ncombine = "{rule}"')
    repo = init_repo(tmp_path / "proj", {"rep": text})
    _own_rows(repo, "rep", _here_env(host=OTHER_HOST), wrong=1)  # the other machine's card fails one pair

    err = _refused(repo, "rep", "verdict", "rep")
    assert (f"line 'rep' waits for 2 device instances ([replication] instances = 2, combine = \"{rule}\") and has "
            f"1 with a complete grid at commit") in err
    assert f"host {OTHER_HOST} (its sweep)" in err and "run `bench replicate rep` on 1 other card or host" in err
    status = json.loads(_bench(repo, "status", "--format", "json").stdout)[0]
    assert status["replication"]["short"].startswith("0 of 1 replicate the verdict waits for")

    _bench(repo, "replicate", "rep", "--no-ceilings")  # before the verdict: what it waits for
    pre = [r for r in _rows(repo, "rep") if _rep(r)]
    assert pre and all(r.replicate["of"] is None and r.replicate["at"] == "closing" for r in pre)
    assert all(r.kind == "result" for r in pre), [r.reason for r in pre]

    _bench(repo, "verdict", "rep", rc=code)
    verdict = next(r for r in _rows(repo, "rep") if r.kind == "verdict")
    assert verdict.outcome == ("GO" if code == 0 else "NO-GO")
    assert [c["value"] for c in verdict.clauses][:len(values)] == pytest.approx(values)
    rec = verdict.replication
    assert rec["combine"] == rule and rec["instances"] == 2
    own, replica = rec["per_instance"]
    assert own["original"] and own["instance"]["host"] == OTHER_HOST and own["decided_on"] == verdict.decided_on
    assert own["clauses"][0]["value"] == pytest.approx(0.5) and replica["clauses"][0]["value"] == pytest.approx(1.0)
    assert replica["instance"]["host"] == _here_env()["host"] and replica["decided_on"] == [r.seq for r in pre]
    assert verdict.decided_on == sorted(r.seq for r in _rows(repo, "rep") if r.kind in ("result", "incorrect")
                                        and not _rep(r))
    # After the verdict, the instance that replicated before it is not a new replicate.
    err = _refused(repo, "rep", "replicate", "rep", "--no-ceilings")
    assert "already holds" in err and "a replicate before the verdict" in err
