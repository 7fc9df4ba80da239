"""A patch's conditions see the GPUs the doctor sees: one query (target.gpu), the same test hook."""

import json
import sys

from wheelhouse.patch.conditions import check_conditions, gather_facts


def test_patch_conditions_see_the_doctors_gpus(tmp_path, monkeypatch):
    fake = tmp_path / "gpus.json"
    fake.write_text(json.dumps({"gpus": [{"index": 0, "name": "NVIDIA L4", "compute_capability": "8.9"},
                                         {"index": 1, "name": "NVIDIA L4", "compute_capability": "8.9"}]}))
    monkeypatch.setenv("WH_DOCTOR_FAKE_GPUS", str(fake))
    facts = gather_facts(sys.executable, [])
    assert facts["sm"] == ["8.9", "8.9"]
    assert check_conditions({"sm": ["8.9"]}, facts) == (True, [])


def test_no_gpu_means_an_unknown_compute_capability(tmp_path, monkeypatch):
    monkeypatch.delenv("WH_DOCTOR_FAKE_GPUS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    facts = gather_facts(sys.executable, [])
    ok, why = check_conditions({"sm": ["8.9"]}, facts)
    assert not ok and "unknown" in why[0]
