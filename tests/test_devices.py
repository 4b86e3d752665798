"""Device identity is read one way (vocab/devices.py): the same env names the same
model, person-facing name and lock key wherever rows, ceilings and locks are compared."""

from __future__ import annotations

from harness.vocab import devices
from harness.ledger.rows import load
from harness.vocab.outcomes import measured_on

H200 = {"device": "cuda", "gpu": "NVIDIA H200", "gpu_uuid": "GPU-1234-abcd", "gpu_index": 3}
CPU = {"device": "cpu"}


def test_a_gpu_is_its_model_its_name_and_its_uuid_lock():
    assert devices.model(H200) == ("cuda", "NVIDIA H200")
    assert devices.device_of(load({"kind": "result", "env": H200})) == ("cuda", "NVIDIA H200")
    assert devices.device_name(H200) == "NVIDIA H200"
    assert devices.device_key(H200) == "GPU-1234-abcd"
    assert devices.device_key({**H200, "gpu_uuid": None}) == "cuda-index-3"
    assert devices.device_key({"device": "cuda", "gpu_uuid": "GPU/with spaces"}) == "GPU_with_spaces"


def test_the_host_cpu_is_one_device_named_cpu():
    assert devices.model(CPU) == ("cpu", None)
    assert devices.device_of(load({"kind": "result"})) == (None, None)
    assert devices.device_name(CPU) == "cpu"
    assert devices.device_key(CPU) == "cpu"


def test_rows_and_ceilings_compare_by_gpu_model():
    fingerprint = {"device": "cuda", "name": "NVIDIA H200", "driver": "580", "cuda": "12.8", "torch": "2.8"}
    assert devices.same_gpu_model(H200, fingerprint)
    assert not devices.same_gpu_model({**H200, "gpu": "NVIDIA H100"}, fingerprint)
    assert not devices.same_gpu_model(CPU, {"device": "cpu", "name": "some CPU"})
    assert devices.ceilings_name(load({"kind": "ceilings", "device": "cuda", "fingerprint": fingerprint})) == "NVIDIA H200"
    assert devices.ceilings_name(load({"kind": "ceilings", "device": "cpu"})) == "cpu"


def test_the_resume_key_names_the_model_unless_the_line_mixes_devices():
    row = load({"kind": "result", "commit": "c0ffee", "env": H200})
    assert measured_on(row) == ("c0ffee", "cuda", "NVIDIA H200", None)
    assert measured_on(row, any_gpu=True) == ("c0ffee", "cuda", None, None)
