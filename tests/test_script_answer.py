"""An interpreter that prints at every start (a .pth banner, a sitecustomize) still answers wh.

``site`` runs every ``.pth`` line that starts with ``import`` before any script: a vendor's banner there
lands on stdout ahead of what wh asked the interpreter for. That answer must still be read (a doctor
``deps`` error or a refused ``wh install`` over a greeting would be a false red).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broken_packages import make_venv, site_packages
from wheelhouse.doctor import run_doctor
from wheelhouse.doctor.drop import find_spec_many
from wheelhouse.stage.bytecode import _ask
from wheelhouse.patch.conditions import gather_facts
from wheelhouse.target.installed import installed_distributions
from wheelhouse.target.interpreter import inspect_interpreter

_BANNERS = {
    "line": "import sys; print('welcome to the cluster')\n",
    "no newline": "import sys; sys.stdout.write('welcome {\"to\": [\"the cluster\"]}')\n",
}


@pytest.fixture(params=sorted(_BANNERS))
def noisy_venv(request, tmp_path):
    py = make_venv(tmp_path / "venv")
    (site_packages(py) / "banner.pth").write_text(_BANNERS[request.param])
    return py


def test_inspect_interpreter_reads_its_answer_after_a_banner(noisy_venv):
    it = inspect_interpreter(noisy_venv)
    assert it.is_venv and it.purelib


def test_installed_distributions_reads_its_answer_after_a_banner(noisy_venv):
    dists = installed_distributions(str(noisy_venv))
    assert "pip" not in dists or dists["pip"].version  # a real list, not an error


def test_the_doctors_deps_check_is_green_after_a_banner(noisy_venv):
    r = run_doctor(str(noisy_venv), checks=["deps"], timeout=30).get("deps:requirements")
    assert r is not None and r.verdict == "ok", r


def test_drop_reads_find_spec_after_a_banner(noisy_venv):
    assert find_spec_many(str(noisy_venv), ["json", "no_such_module_wh"]) == {"json": True, "no_such_module_wh": False}


def test_stage_bytecode_reads_the_compilers_facts_after_a_banner(noisy_venv):
    facts = _ask(str(noisy_venv))
    assert facts is not None and facts["cache_tag"].startswith("cpython-")


def test_patch_reads_installed_versions_after_a_banner(noisy_venv):
    info = Path(inspect_interpreter(noisy_venv).purelib) / "demo_dist-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: demo-dist\nVersion: 1.2\n")
    facts = gather_facts(str(noisy_venv), ["demo-dist", "absent-dist"])
    assert facts["demo-dist"] == "1.2" and facts["absent-dist"] is None


def test_an_interpreter_that_prints_after_the_answer_is_one_clear_drop_error(tmp_path):
    # The answer must be the last line; what an atexit hook prints after it leaves no answer to trust.
    from wheelhouse.doctor.drop import DropFailed

    py = make_venv(tmp_path / "venv")
    (site_packages(py) / "bye.pth").write_text("import atexit; atexit.register(print, 'goodbye')\n")
    with pytest.raises(DropFailed, match="did not answer find_spec on a line of its own"):
        find_spec_many(str(py), ["json"])
