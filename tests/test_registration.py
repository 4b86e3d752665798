"""Registration schema: accept the shipped example, reject bad input with a clear line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.registration import line_ids, schema as registration
from harness.workloads.shipped import ATTENTION
from tests.conftest import REPO, TINY


def _write(tmp_path: Path, text: str, name: str = "line.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_shipped_example_is_valid():
    reg = registration.load(REPO / "registrations" / "example.toml")
    registration.check_kernels(reg)
    assert reg.line == "example" and len(reg.configs) >= 2
    assert len(reg.sha256) == 64


def test_lead_calls_accepted_in_cold_mode(tmp_path):
    reg = registration.load(_write(tmp_path, TINY.replace("timeout_s = 5", "timeout_s = 5\nlead_calls = 3")))
    assert reg.timing.lead_calls == 3


def test_tiny_expands_grid_and_defaults(tmp_path):
    reg = registration.load(_write(tmp_path, TINY))
    assert [c.seq_len for c in reg.configs] == [32, 48]
    assert all(c.kv_heads == c.heads for c in reg.configs)
    assert reg.primary == "geomean(speedup)" and reg.prediction == 1.5
    assert reg.atol["float32"] == 1e-5
    assert reg.min_coverage == 1.0 and reg.accept_weak == ()  # every pair decided, no canary waived
    allow = registration.load(_write(tmp_path, TINY.replace("include_noisy = true", "allow_missing = true"), "a.toml"))
    assert allow.min_coverage == 0.0  # the older key: decide on what was measured


@pytest.mark.parametrize("edit, message", [
    (("schema = 1", "schema = 99"), "newer than this bench understands"),
    (('candidate = "sdpa"', 'candidate = "sdpa"\ncolour = "red"'), "unknown field colour"),
    (("seq_len = [32, 48]", "seq_len = [32, -1]"), "must be > 0"),
    (('dtype = ["float32"]', 'dtype = ["float8"]'), "unknown dtype"),
    (("atol = 1e-5", "atol = 2.0"), "outside"),
    (("seeds = [0]", "seeds = []"), "seeds"),
    (('go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"', 'go = "__import__(\'os\')"'), "column"),
    (('go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"', 'go = "geomean(sped) > 1"'), "unknown metric"),
    (("prediction = 1.5", 'prediction = "fast"'), "prediction must be a number"),
    (('families = ["normal", "large_logits"]', 'families = ["gaussian"]'), "unknown input family"),
    (("heads = [2]", "heads = [3]\nkv_heads = [2]"), "not a multiple of kv_heads"),
    (('baseline = "torch_stack"', 'baseline = "sdpa"'), "both baseline and candidate"),
    (("timeout_s = 5", "timeout_s = -5"), "timeout_s"),
    (("timeout_s = 5", 'timeout_s = 5\nmode = "graph"\nlead_calls = 2'), "lead_calls.*graph"),
    (("timeout_s = 5", "timeout_s = 5\nlead_calls = 65"), "lead_calls"),
])
def test_bad_registrations_rejected_with_the_key(tmp_path, edit, message):
    old, new = edit
    assert old in TINY
    with pytest.raises(UserError, match=message):
        registration.load(_write(tmp_path, TINY.replace(old, new)))


def test_unknown_kernel_rejected(tmp_path):
    reg = registration.load(_write(tmp_path, TINY.replace('candidate = "sdpa"', 'candidate = "fastest"')))
    with pytest.raises(UserError, match="unknown kernel 'fastest'"):
        registration.check_kernels(reg)


def test_kernel_without_grid_dtype_rejected(tmp_path):
    reg = registration.load(_write(tmp_path, TINY.replace('candidate = "sdpa"', 'candidate = "sdpa_flash"')))
    with pytest.raises(UserError, match="does not support dtype float32"):
        registration.check_kernels(reg)


def test_decode_cannot_be_causal(tmp_path):
    text = TINY.replace('workload = "attention"', 'workload = "decode"').replace("causal = [false]", "causal = [true]")
    with pytest.raises(UserError, match="causal"):
        registration.load(_write(tmp_path, text))


def test_bad_line_id_and_toml(tmp_path):
    with pytest.raises(UserError, match="line id"):
        registration.load(_write(tmp_path, TINY, "bad name.toml"))
    with pytest.raises(UserError, match="not valid TOML"):
        registration.load(_write(tmp_path, "schema = = 1"))


@pytest.mark.parametrize("edit, message", [
    (('families = ["normal", "large_logits"]', 'families = [["normal"]]'), "list of family names"),
    (('families = ["normal", "large_logits"]', 'families = ["normal", "normal"]'), "family twice"),
    (("seeds = [0]", "seeds = 100000000"), "more than 1000"),
    (("prediction = 1.5", "prediction = nan"), "prediction must be a number"),
    (('candidate = "sdpa"', 'candidate = "sdpa"\nnotes = { a = 1 }'), "'notes' must be a string"),
    (('go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"',
      '''go = "geomean(speedup where candidate == 'sdpaa') >= 0.01"'''), "candidate == 'sdpaa'"),
    (('go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"',
      '''go = "pass_rate(where dtype == 'float16') == 1.0"'''), "dtype == 'float16'"),
    (("include_noisy = true", "include_noisy = true\nmin_coverage = 1.5"), "min_coverage must be a number in"),
    (("include_noisy = true", "include_noisy = true\nmin_coverage = true"), "min_coverage must be a number in"),
    (("seeds = [0]", "seeds = [0]\naccept_weak = \"tf32\""), "accept_weak must be a list"),
    # a key newer than the schema the file declares: an older bench must say "upgrade", not misread it
    (("include_noisy = true", "include_noisy = true\nmixed_devices = true"), "mixed_devices needs schema = 2"),
])
def test_more_bad_registrations(tmp_path, edit, message):
    old, new = edit
    assert old in TINY
    with pytest.raises(UserError, match=message):
        registration.load(_write(tmp_path, TINY.replace(old, new)))


def test_a_config_a_kernel_refuses_is_caught_at_register_time(tmp_path):
    text = TINY.replace('candidate = "sdpa"', 'candidate = "triton_flash"').replace("head_dim = [16]",
                                                                                 "head_dim = [96]")
    reg = registration.load(_write(tmp_path, text))
    with pytest.raises(UserError, match="cannot run"):
        registration.check_kernels(reg)


def test_every_shipped_registration_is_valid_and_fits_a_known_device():
    shipped = sorted((REPO / "registrations").glob("*.toml"))
    assert shipped
    for path in shipped:
        registration.check_kernels(registration.load(path))


@pytest.mark.parametrize("bar, primary, message", [
    ("min(speedup where seq_len >= 4096) >= 1.0 and pass_rate == 1.0", None,
     r"clause `min\(speedup where seq_len >= 4096\) >= 1.0` filters out every registered config \(2 pairs"),
    ("pass_rate(where seq_len == 33) == 1.0", None, "clause `pass_rate.where seq_len == 33. == 1.0`"),
    ("count(where causal) >= 1", None, "can never be decided"),
    ("geomean(speedup) >= 1.0", "geomean(speedup where heads > 2)", "primary `geomean.speedup where heads > 2.`"),
])
def test_a_bar_filter_that_matches_no_registered_config_is_refused(tmp_path, bar, primary, message):
    old = 'go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"'
    text = TINY.replace(old, f'go = "{bar}"' + (f'\nprimary = "{primary}"' if primary else ""))
    with pytest.raises(UserError, match=message):
        registration.load(_write(tmp_path, text))


def test_a_filter_matching_some_registered_config_is_accepted(tmp_path):
    old = 'go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"'
    reg = registration.load(_write(tmp_path, TINY.replace(old, 'go = "min(speedup where seq_len == 33 or '
                                                                    'seq_len >= 48) >= 1.0"')))
    assert reg.go.startswith("min(speedup where seq_len == 33")


def test_a_grid_point_no_known_device_holds_is_refused_by_name_and_by_how_much(tmp_path):
    text = TINY.replace("seq_len = [32, 48]", "seq_len = [32, 1048576]").replace("heads = [2]", "heads = [64]")
    reg = registration.load(_write(tmp_path, text))
    with pytest.raises(UserError) as info:
        registration.check_kernels(reg)
    msg = str(info.value)
    assert "[grid] point attention/b1/h64/kv64/n1048576/d16/float32/full needs a predicted " in msg
    assert "GiB more than the largest known device that runs its kernels holds" in msg
    assert "shrink the grid" in msg and "n32/" not in msg


def test_unholdable_names_the_closest_known_device_that_runs_the_kernels():
    from harness import get_kernel
    from harness.measurement.memory import KnownDevice, MEMORY_MARGIN, predict, unholdable
    from harness.measurement.timing import TimingPolicy
    from harness.workloads import Config

    cfg = Config("attention", 1, 2, 2, 4096, 64, "float32", False)
    specs = [get_kernel("torch_stack"), get_kernel("sdpa")]
    policy = TimingPolicy()
    peak = predict(cfg, specs, policy, "cuda", workload=ATTENTION, l2_bytes=2**20).peak_bytes
    small = KnownDevice("small", "cuda", peak // 2, 2**20)
    smaller = KnownDevice("smaller", "cuda", peak // 4, 2**20)
    why = unholdable(cfg, specs, policy, (smaller, small), workload=ATTENTION)
    short = (peak - int(small.memory_bytes * (1 - MEMORY_MARGIN))) / 2**30
    assert f"small: " in why and "smaller" not in why and f"{short:.1f} GiB more" in why
    assert unholdable(cfg, specs, policy, (small, KnownDevice("big", "cuda", 4 * peak, 2**20)),
                      workload=ATTENTION) is None
    # No known device runs cublas_stack on the CPU: nothing to say about a CPU-only table.
    assert unholdable(cfg, [get_kernel("cublas_stack"), get_kernel("sdpa")], policy,
                      (KnownDevice("host", "cpu", 1, 0),), workload=ATTENTION) is None


def test_wording_and_encodings(tmp_path):
    with pytest.raises(UserError, match=r"\[grid\] batch = 'x' is not an integer$"):
        registration.load(_write(tmp_path, TINY.replace("batch = [1]", 'batch = ["x"]')))
    with pytest.raises(UserError, match=r"causal = 'no' is not true or false$"):
        registration.load(_write(tmp_path, TINY.replace("causal = [false]", 'causal = ["no"]')))
    with pytest.raises(UserError, match=r"is not UTF-8 text \(byte 0xe9 at offset \d+\): save it as UTF-8"):
        p = tmp_path / "latin.toml"
        p.write_bytes(TINY.encode().replace(b"SDPA", b"SDP\xe9"))
        registration.load(p)
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + TINY.encode())
    assert registration.load(bom).line == "bom"  # an editor's byte-order mark is not an error
    with pytest.raises(UserError, match=r"\[bar\] go: expected"):
        registration.load(_write(tmp_path, TINY.replace("geomean(speedup) >= 0.01", "geomean(speedup >= 1")))


def test_resolve_takes_a_path_as_given_and_a_line_id_under_registrations(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "registrations").mkdir()
    (tmp_path / "some").mkdir()
    assert line_ids.resolve(tmp_path, "x") == tmp_path / "registrations" / "x.toml"
    assert line_ids.resolve(tmp_path, "some/dir/x.toml") == tmp_path / "some" / "dir" / "x.toml"
    for arg, message in (("some", "some is a directory, not a registration"),
                         ("some/", "is a directory, not a registration"),
                         ("registrations/x.txt", "is not a registration \\(a .toml file\\)"),
                         ("bad id!", "neither a line id")):
        with pytest.raises(UserError, match=message):
            line_ids.resolve(tmp_path, arg)
    with pytest.raises(UserError, match="no registration file at some/dir/x.toml"):
        line_ids.line_of(tmp_path, "some/dir/x.toml")
    assert line_ids.line_of(tmp_path, "x") == ("x", None)


def test_mixed_devices_needs_schema_2_and_excludes_verify(tmp_path):
    text = TINY.replace("schema = 1", "schema = 2").replace("include_noisy = true",
                                                            "include_noisy = true\nmixed_devices = true")
    reg = registration.load(_write(tmp_path, text))
    assert reg.mixed_devices and reg.summary()["mixed_devices"] is True
    assert not registration.load(_write(tmp_path, TINY, "plain.toml")).mixed_devices
    assert "mixed_devices" not in registration.load(_write(tmp_path, TINY, "plain2.toml")).summary()
    with pytest.raises(UserError, match=r"\[verify\] with \[bar\] mixed_devices"):
        registration.load(_write(tmp_path, text + '\n[verify]\nclauses = ["dram_read_bytes <= 2 * min_bytes"]\n',
                                 "verify.toml"))
    with pytest.raises(UserError, match="upgrade bench"):
        newer = f"schema = {registration.REGISTRATION_SCHEMA + 1}"
        registration.load(_write(tmp_path, text.replace("schema = 2", newer), "newer.toml"))


def _round_trip(ctx):
    """In a spawned process (as the sweep's workers receive it): what it reads of the context."""
    return (ctx.reg.timing, ctx.reg.numerics.as_dict(), [c.text for c in ctx.reg.bar.clauses()],
            [c.text for c in ctx.reg.verify_clauses], ctx.rate_bar, ctx.device)


def test_the_parsed_registration_travels_to_a_worker_process(tmp_path):
    # The sweep sends its SweepContext, registration included, to spawned workers
    # (execution/workers.py): every parsed table must survive pickling unchanged.
    import multiprocessing as mp
    import pickle

    from harness.pipeline.context import SweepContext

    text = TINY.replace("timeout_s = 5", "timeout_s = 5\nlead_calls = 2") + textwrap.dedent('''\
        [numerics]
        allow_tf32 = false

        [verify]
        clauses = ["dram_read_bytes <= 1.2 * min_bytes"]
        ''')
    reg = registration.load(_write(tmp_path, text.replace("geomean(speedup) >= 0.01", "min(tflops) >= 0.001")))
    ctx = SweepContext(reg=reg, device="cpu", ceilings=None, root=str(tmp_path))
    assert pickle.loads(pickle.dumps(ctx)) == ctx
    with mp.get_context("spawn").Pool(1) as pool:
        timing, numerics, clauses, verify, rate_bar, device = pool.apply(_round_trip, (ctx,))
    assert timing == reg.timing and timing.lead_calls == 2
    assert numerics == {"allow_tf32": False}
    assert clauses == ["min(tflops) >= 0.001", "pass_rate == 1.0"]
    assert verify == ["dram_read_bytes <= 1.2 * min_bytes"]
    assert rate_bar is True and device == "cpu"


def test_the_ledger_keeps_the_tables_as_written(tmp_path):
    # The registered row carries [timing] and [numerics] as the file gives them (defaults
    # are not written in): a reader sees what was registered, not what this bench fills in.
    text = TINY + "\n[numerics]\nfloat32_matmul_precision = \"highest\"\n"
    s = registration.load(_write(tmp_path, text)).summary()
    assert s["timing"] == {"warmup_ms": 5, "min_samples": 5, "max_samples": 40, "min_time_ms": 5, "timeout_s": 5}
    assert s["numerics"] == {"float32_matmul_precision": "highest"}


# -- [timing] stop = "statistic" (schema 6): stop on the bar's quantities -------------------------
STAT = TINY.replace("schema = 1", "schema = 6").replace("min_samples = 5", "min_samples = 10")


def test_the_statistic_stop_is_accepted_at_schema_6_with_its_defaults_and_its_keys(tmp_path):
    reg = registration.load(_write(tmp_path, STAT.replace("timeout_s = 5", 'timeout_s = 5\nstop = "statistic"\n'
                                                          "precision = 0.01\nalpha = 0.01")))
    assert (reg.timing.stop, reg.timing.precision, reg.timing.alpha) == ("statistic", 0.01, 0.01)
    assert reg.summary()["timing"]["stop"] == "statistic" and reg.summary()["timing"]["precision"] == 0.01
    assert {"stop": "statistic", "precision": 0.01, "alpha": 0.01}.items() <= reg.timing.as_dict().items()
    plain = registration.load(_write(tmp_path, STAT.replace("timeout_s = 5", 'timeout_s = 5\nstop = "statistic"'),
                                     "plain.toml"))
    assert (plain.timing.precision, plain.timing.alpha) == (0.005, 0.05)  # the named defaults
    noise = registration.load(_write(tmp_path, STAT.replace("timeout_s = 5", 'timeout_s = 5\nstop = "noise"'),
                                     "noise.toml"))
    old = registration.load(_write(tmp_path, TINY.replace("min_samples = 5", "min_samples = 10"), "old.toml"))
    assert noise.timing == old.timing and noise.timing.precision is None
    assert noise.timing.as_dict() == old.timing.as_dict() and "stop" not in old.timing.as_dict()  # rows as before


@pytest.mark.parametrize("key", ['stop = "statistic"', 'stop = "noise"', 'stop = "statistic"\nprecision = 0.01',
                                 'stop = "statistic"\nalpha = 0.01'])
def test_a_statistic_stop_key_needs_schema_6(tmp_path, key):
    text = STAT.replace("schema = 6", "schema = 5").replace("timeout_s = 5", f"timeout_s = 5\n{key}")
    with pytest.raises(UserError, match=r"\[timing\] (stop|precision|alpha) needs schema = 6 .*set schema = 6"):
        registration.load(_write(tmp_path, text))


@pytest.mark.parametrize("edit, message", [
    ('stop = "fast"', "'stop' = 'fast': must be one of 'noise', 'statistic'"),
    ('stop = 1', "'stop' = 1: must be one of"),
    ('stop = "statistic"\nprecision = 0', "'precision' = 0: must lie in"),
    ('stop = "statistic"\nprecision = 1.5', "'precision' = 1.5: must lie in"),
    ('stop = "statistic"\nprecision = "tight"', "'precision' = 'tight': must be a number"),
    ('stop = "statistic"\nalpha = 0', "'alpha' = 0: must lie in"),
    ('stop = "statistic"\nalpha = 0.6', "'alpha' = 0.6: must lie in"),
    ('stop = "statistic"\nalpha = true', "'alpha' = True: must be a number"),
    ("precision = 0.01", "'precision' belongs to the statistic stop: set stop = \"statistic\""),
    ('stop = "noise"\nalpha = 0.01', "'alpha' belongs to the statistic stop"),
    ('stop = "statistic"\nnoise_target = 0.01', "'noise_target' is the noise stop's target"),
])
def test_bad_statistic_stop_values_are_refused_naming_the_key(tmp_path, edit, message):
    text = STAT.replace("timeout_s = 5", f"timeout_s = 5\n{edit}")
    with pytest.raises(UserError) as exc:
        registration.load(_write(tmp_path, text))
    assert message in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_a_statistic_stop_needs_min_samples_enough_for_its_first_look(tmp_path):
    # 5 to 40 rounds: looks at 5, 10, 20 and the end, each at 1 - 0.05/4 = 98.75%, which needs 8
    text = STAT.replace("min_samples = 10", "min_samples = 5").replace("timeout_s = 5", 'timeout_s = 5\nstop = "statistic"')
    with pytest.raises(UserError, match="'min_samples' = 5 is too few for the statistic stop's first look: its "
                                        "98.7500% interval needs 8 rounds — raise min_samples to 8"):
        registration.load(_write(tmp_path, text))
    assert registration.load(_write(tmp_path, text.replace("min_samples = 5", "min_samples = 8"), "ok.toml"))


def test_bench_register_refuses_a_statistic_stop_without_schema_6_in_one_line_and_writes_nothing(tmp_path):
    from tests.conftest import init_repo, run_bench

    old = STAT.replace("schema = 6", "schema = 5").replace("timeout_s = 5", 'timeout_s = 5\nstop = "statistic"')
    bad = STAT.replace("timeout_s = 5", 'timeout_s = 5\nstop = "statistic"\nalpha = 2')
    repo = init_repo(tmp_path / "proj", {"old": old, "bad": bad})
    for line, message in (("old", "[timing] stop needs schema = 6"), ("bad", "'alpha' = 2: must lie in")):
        r = run_bench(repo, "register", line)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in (repo / "ledger").iterdir()) == [".gitkeep"]
