"""Hostile round 9: a copy of a package that shadows the installed one.

The engine imports whichever copy comes first on ``sys.path`` (PYTHONPATH, a second site folder, a
checkout): the doctor must judge that copy, not call the installed distribution's extension modules
"loaded by its package" because ``find_spec`` resolves their names to the other copy's files.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig

import pytest

from broken_packages import have_toolchain, install_dist, make_venv
from wheelhouse.doctor import run_doctor

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


def _shadowed_install(tmp_path, exts, shadow_ext: bytes | None):
    """``shadowed`` installed whole (a good lazily loaded ``shadowed.sub._ext``), and a bare copy of the
    package in another folder, with ``shadow_ext`` as its ``_ext`` (None: none); the copy's folder, as
    PYTHONPATH puts it first, is in the returned environment."""
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "shadowed", {"shadowed/__init__.py": "X = 1\n", "shadowed/sub/__init__.py": ""},
                 {f"shadowed/sub/_ext{SUFFIX}": exts["ok"]})
    stray = tmp_path / "checkout"
    (stray / "shadowed" / "sub").mkdir(parents=True)
    (stray / "shadowed" / "__init__.py").write_text("X = 2\n")
    (stray / "shadowed" / "sub" / "__init__.py").write_text("")
    if shadow_ext is not None:
        (stray / "shadowed" / "sub" / f"_ext{SUFFIX}").write_bytes(shadow_ext)
    return py, {**os.environ, "PYTHONPATH": str(stray)}


@pytest.mark.parametrize("shadow", ["undef", None])
def test_an_extension_served_by_a_broken_shadowing_copy_is_a_fail(tmp_path, exts, shadow):
    # The shadowing copy's lazily loaded module has an undefined symbol, or is missing: the engine's
    # `import shadowed.sub._ext` fails. The doctor said ok ("loaded by its package, not by name").
    py, env = _shadowed_install(tmp_path, exts, exts[shadow] if shadow else None)
    engine = subprocess.run([str(py), "-c", "import shadowed.sub._ext"], env=env, capture_output=True, text=True)
    assert engine.returncode != 0  # (what the engine sees)
    r = run_doctor(str(py), checks=["native"], timeout=20, environ=env).get("native:shadowed")
    assert r is not None and r.verdict == "fail", r
    assert "shadowed.sub._ext" in r.evidence and str(tmp_path / "checkout") in r.evidence


def test_a_working_shadowing_copy_passes(tmp_path, exts):
    py, env = _shadowed_install(tmp_path, exts, exts["ok"])
    r = run_doctor(str(py), checks=["native"], timeout=20, environ=env).get("native:shadowed")
    assert r is not None and r.verdict == "ok", r
