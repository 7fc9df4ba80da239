"""One view of "installed": what an interpreter imports, first on its sys.path wins (issue 10.7).

Real venvs whose site folder has a .pth adding two more folders, as a venv made with
--system-site-packages from an image venv sees the image venv's packages before the
base system's: ``import setuptools`` gives 81.0 there, and every part of wh must say 81.0.
"""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from broken_packages import make_venv, site_packages
from wheelmaker import make_wheel
from wheelhouse.target.installed import installed_distributions


def _unpack(wheel: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(into)


@pytest.fixture
def layered(tmp_path) -> Path:
    """A venv whose .pth puts an 'image venv' folder (setuptools 81.0) before a 'base' folder (68.1.2)."""
    py = make_venv(tmp_path / "venv")
    image, base = tmp_path / "image-site", tmp_path / "base-site"
    _unpack(make_wheel(tmp_path / "w81", "setuptools", "81.0", modules={"setuptools/__init__.py": "V = '81.0'\n"}),
            image)
    _unpack(make_wheel(tmp_path / "w68", "setuptools", "68.1.2", modules={"setuptools/__init__.py": "V = '68'\n"},
                       requires=["zmq-missing-dep"]), base)
    _unpack(make_wheel(tmp_path / "wt", "tool", "1.0", requires=["setuptools>=77", "pyzmq; sys_platform == 'win32'"]),
            base)
    (site_packages(py) / "parent.pth").write_text(f"{image}\n{base}\n")
    return py


def _asked(py: Path, code: str) -> str:
    return subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True, cwd="/").stdout.strip()


def test_installed_distributions_agrees_with_importlib_metadata_in_the_interpreter(layered):
    view = installed_distributions(str(layered))
    assert _asked(layered, "import importlib.metadata as m; print(m.version('setuptools'))") == "81.0"
    assert _asked(layered, "import setuptools; print(setuptools.V)") == "81.0"
    assert view["setuptools"].version == "81.0"
    assert view["setuptools"].location.endswith("image-site")
    assert view["setuptools"].requires == ()  # the shadowed copy's requirements are not this one's
    assert view["tool"].requires == ("setuptools>=77", "pyzmq; sys_platform == 'win32'")


def test_the_engine_build_requirement_check_sees_what_the_interpreter_imports(layered, tmp_path):
    from wheelhouse.engine.pep517 import _installed, missing_build_requirements

    # Was "setuptools>=77 (installed: 68.1.2)": the base copy, which the interpreter never imports.
    assert missing_build_requirements(["setuptools>=77"], _installed(str(layered), {})) == []


def test_a_broken_interpreter_is_a_clear_error(tmp_path):
    from wheelhouse.errors import WhError

    bad = tmp_path / "python"
    bad.write_text("#!/bin/sh\necho nope >&2\nexit 4\n")
    bad.chmod(0o755)
    with pytest.raises(WhError) as exc:
        installed_distributions(str(bad))
    assert str(bad) in exc.value.message and exc.value.hint


def test_a_relative_interpreter_path_is_the_one_from_the_current_folder(layered, monkeypatch):
    import os

    monkeypatch.chdir(layered.parent.parent.parent)
    assert installed_distributions(os.path.relpath(layered))["setuptools"].version == "81.0"


def test_the_doctors_facts_agree_with_the_one_view(layered):
    from wheelhouse.doctor import gather_context

    ctx = gather_context(str(layered), checks=["deps"], facts_override={"gpu": {"gpus": []}})
    view = installed_distributions(str(layered))
    assert {k: d.version for k, d in ctx.distributions.items()} == {k: d.version for k, d in view.items()}
    assert ctx.distributions["setuptools"].version == "81.0"
