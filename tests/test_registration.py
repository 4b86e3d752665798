"""Registration schema: accept the shipped example, reject bad input with a clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import UserError
from harness.governance import registration
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
    assert reg.timing["lead_calls"] == 3


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
