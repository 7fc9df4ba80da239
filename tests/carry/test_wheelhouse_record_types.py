"""A wheelhouse's own records are judged by type, and bootstrap/ holds only what its lock vouches for.

`wh verify` refuses a wh.json whose fields have the wrong type (named), and an sdist (any distribution) in the
bootstrap/ of a wheelhouse staged --no-bootstrap; `wh install` refuses the same wh.json in one line; `wh pull`
refuses such a bootstrap/ layer before fetching it.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request

import pytest

from faults import wh_command
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel


def _wh(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "NO_COLOR": "1"})


@pytest.fixture
def house(tmp_path):
    return make_wheelhouse(tmp_path / "house", [make_wheel(tmp_path / "w", "pkg", "1.0", modules={"pkg/__init__.py": ""})])


@pytest.mark.parametrize("field,value,named", [
    ("patches", "evil.toml", "patches must be a list"),
    ("count", "1", "count must be an integer"),
    ("count", True, "count must be an integer"),
    ("inputs", {"requirements": "pkg"}, "inputs.requirements must be a list"),
    ("bootstrap", ["x"], "bootstrap must be an object or null"),
    ("owned", {"a": 1}, "owned must be a list"),
])
def test_a_wh_json_field_of_the_wrong_type_is_refused_by_name(tmp_path, house, field, value, named):
    meta = json.loads((house / "wh.json").read_text())
    meta[field] = value
    (house / "wh.json").write_text(json.dumps(meta))
    r = _wh("verify", house)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and named in out and "Traceback" not in out, out
    r = _wh("install", house, "--venv", tmp_path / "venv")
    assert r.returncode == 2 and named in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "venv").exists()


def test_an_sdist_in_the_bootstrap_of_a_no_bootstrap_wheelhouse_fails_verify(house):
    assert _wh("verify", house).returncode == 0
    (house / "bootstrap").mkdir()
    (house / "bootstrap" / "evil-1.0.tar.gz").write_bytes(b"not built on the box")
    r = _wh("verify", house)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "bootstrap/evil-1.0.tar.gz" in out and "vouches for it" in out, out


def test_pull_refuses_a_distribution_in_bootstrap_without_a_bootstrap_lock(tmp_path, house):
    pytest.importorskip("oras", reason="the oci extra (oras-py) is not installed")
    from registry import start_registry

    reg = start_registry(tmp_path / "registry")
    try:
        assert _wh("push", house, reg.ref("ml/stack:v1")).returncode == 0
        req = urllib.request.Request(f"http://{reg.host}/v2/ml/stack/manifests/v1",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            manifest = json.loads(resp.read())
        extra = dict(manifest["layers"][0])
        extra["annotations"] = {**extra.get("annotations", {}), "org.opencontainers.image.title": "bootstrap/evil-1.0.tar.gz"}
        manifest["layers"].append(extra)
        put = urllib.request.Request(f"http://{reg.host}/v2/ml/stack/manifests/evil", method="PUT",
                                     data=json.dumps(manifest).encode(),
                                     headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
        urllib.request.urlopen(put, timeout=10).close()
        r = _wh("pull", reg.ref("ml/stack:evil"), "-o", tmp_path / "pulled")
        assert r.returncode != 0 and "bootstrap/evil-1.0.tar.gz" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (tmp_path / "pulled").exists()
    finally:
        reg.stop()
