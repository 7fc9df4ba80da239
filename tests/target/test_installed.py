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


def _no_importlib_metadata(tmp_path: Path) -> dict[str, str]:
    """An environment whose interpreter fails on ``import importlib.metadata`` (a sitecustomize on PYTHONPATH
    blocks it): a listing that imports it when there is nothing to find fails."""
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text("import sys\nsys.modules['importlib.metadata'] = None\n")
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(guard)}


def test_an_environment_with_nothing_installed_is_listed_without_importlib_metadata(tmp_path):
    py = make_venv(tmp_path / "venv")
    assert installed_distributions(str(py), env=_no_importlib_metadata(tmp_path)) == {}


def test_the_quick_empty_answer_still_finds_a_distribution_on_pythonpath_or_in_a_zip(tmp_path):
    py = make_venv(tmp_path / "venv")
    extra = tmp_path / "extra"
    _unpack(make_wheel(tmp_path / "w1", "onpath", "1.0"), extra)
    zipped = make_wheel(tmp_path / "w2", "zipped", "2.0")  # a wheel is a zip: importlib.metadata reads it
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{extra}:{zipped}"}
    view = installed_distributions(str(py), env=env)
    assert view["onpath"].version == "1.0" and view["zipped"].version == "2.0"


def test_a_distribution_finder_installed_by_a_pth_is_still_asked(tmp_path):
    py = make_venv(tmp_path / "venv")
    (site_packages(py) / "finder.pth").write_text("import _wh_test_finder\n")
    (site_packages(py) / "_wh_test_finder.py").write_text(
        "import sys, importlib.metadata as m\n"
        "class D(m.Distribution):\n"
        "    def read_text(self, name):\n"
        "        return 'Metadata-Version: 2.1\\nName: virtual\\nVersion: 3.0\\n' if name == 'METADATA' else None\n"
        "    def locate_file(self, path):\n"
        "        return path\n"
        "class F:\n"
        "    @staticmethod\n"
        "    def find_spec(*a, **k):\n"
        "        return None\n"
        "    @staticmethod\n"
        "    def find_distributions(context=None):\n"
        "        return iter([D()])\n"
        "sys.meta_path.append(F)\n")
    assert installed_distributions(str(py))["virtual"].version == "3.0"
