"""Global numeric state: capture, pin-and-restore, registration validation, comparison."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.errors import UserError
from harness.measurement.numerics import FLAG_NAMES, NumericState, apply, capture, diff


def test_capture_reads_every_flag():
    s = capture()
    assert set(s.as_dict()) == set(FLAG_NAMES)
    assert s.float32_matmul_precision == torch.get_float32_matmul_precision()
    assert s.allow_tf32 == torch.backends.cuda.matmul.allow_tf32
    assert s.cudnn_benchmark == torch.backends.cudnn.benchmark
    assert s.flash_sdp == torch.backends.cuda.flash_sdp_enabled()
    assert isinstance(s.deterministic_algorithms, bool)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.allow_tf32 = True


def test_apply_pins_then_restores():
    before = capture()
    want = {"cudnn_benchmark": not before.cudnn_benchmark, "flash_sdp": not before.flash_sdp,
            "allow_bf16_reduced_precision_reduction": not before.allow_bf16_reduced_precision_reduction,
            "deterministic_algorithms": not before.deterministic_algorithms}
    with apply(want) as now:
        assert torch.backends.cudnn.benchmark == want["cudnn_benchmark"]
        assert torch.backends.cuda.flash_sdp_enabled() == want["flash_sdp"]
        assert torch.are_deterministic_algorithms_enabled() == want["deterministic_algorithms"]
        assert set(diff(before, now)) == set(want)
    assert capture() == before


def test_apply_restores_after_an_exception():
    before = capture()
    with pytest.raises(RuntimeError):
        with apply({"math_sdp": not before.math_sdp}):
            raise RuntimeError("kernel blew up")
    assert capture() == before


def test_apply_full_state_roundtrip():
    before = capture()
    target = dataclasses.replace(before, cudnn_deterministic=not before.cudnn_deterministic)
    with apply(target) as now:
        assert now == target
    assert capture() == before


def test_tf32_and_precision_are_one_setting():
    before = capture()
    with apply({"float32_matmul_precision": "medium"}) as now:
        assert now.allow_tf32 is True and now.float32_matmul_precision == "medium"
    with apply({"allow_tf32": True}) as now:
        assert now.float32_matmul_precision in ("high", "medium")
    assert capture() == before
    base = dataclasses.replace(before, allow_tf32=False, float32_matmul_precision="highest")
    assert NumericState.from_registration({"allow_tf32": True}, base).float32_matmul_precision == "high"
    assert NumericState.from_registration({"float32_matmul_precision": "high"}, base).allow_tf32 is True
    with pytest.raises(UserError, match="allow_tf32.*float32_matmul_precision"):
        NumericState.from_registration({"allow_tf32": False, "float32_matmul_precision": "medium"})


def test_registration_validation_names_the_key():
    with pytest.raises(UserError, match="allow_tf33"):
        NumericState.from_registration({"allow_tf33": True})
    with pytest.raises(UserError, match="cudnn_benchmark"):
        NumericState.from_registration({"cudnn_benchmark": "yes"})
    with pytest.raises(UserError, match="float32_matmul_precision"):
        NumericState.from_registration({"float32_matmul_precision": "low"})
    with pytest.raises(UserError, match="allow_tf33"):
        with apply({"allow_tf33": True}):
            pass


def test_from_registration_fills_the_rest_from_the_base():
    base = capture()
    s = NumericState.from_registration({"cudnn_benchmark": True}, base)
    assert s.cudnn_benchmark is True
    assert diff(base, s) == ({} if base.cudnn_benchmark else {"cudnn_benchmark": (False, True)})


def test_from_dict_roundtrip_and_unknown_keys():
    s = capture()
    assert NumericState.from_dict(s.as_dict()) == s
    with pytest.raises(UserError, match="bogus"):
        NumericState.from_dict({**s.as_dict(), "bogus": 1})


def test_a_registrations_pins_are_checked_at_load_and_laid_over_the_measuring_process():
    from harness.measurement.numerics import NumericPins

    pins = NumericPins.from_registration({"float32_matmul_precision": "highest"})
    assert pins.as_dict() == {"float32_matmul_precision": "highest"}
    base = capture()
    state = pins.state(base)
    assert state.float32_matmul_precision == "highest" and state.allow_tf32 is False
    assert {k: v for k, v in state.as_dict().items() if k not in ("float32_matmul_precision", "allow_tf32")} == \
        {k: v for k, v in base.as_dict().items() if k not in ("float32_matmul_precision", "allow_tf32")}
    with pytest.raises(UserError, match="unknown numerics flag 'nope'"):
        NumericPins.from_registration({"nope": True})
