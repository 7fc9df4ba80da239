"""The layers of docs/design.md, checked by import-linter from the contracts in pyproject.toml.

grimp (import-linter's graph) reads every import statement of every module, those inside functions
too: a late import is no way around a contract. The scratch package and the damaged copy below show it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# cwd goes first on sys.path (import-linter's own CLI does the same), so a copy there is the package grimp reads.
_LINT = ("import sys; from importlinter.cli import lint_imports; "
         "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True, no_logo=True))")


def _lint(root: Path, config: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "300"}  # one line per contract in the report
    return subprocess.run([sys.executable, "-c", _LINT, str(config)], cwd=root, capture_output=True, text=True,
                          timeout=120, env=env)


def _broken(report: str) -> set[str]:
    return {line.rsplit(" ", 1)[0].strip() for line in report.splitlines() if line.endswith(" BROKEN")}


def test_wh_keeps_its_contracts():
    r = _lint(REPO, REPO / "pyproject.toml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout, r.stdout


def _scratch(tmp_path: Path, files: dict[str, str], contract: str) -> subprocess.CompletedProcess:
    pkg = tmp_path / "scratch"
    for name, text in {"__init__.py": "", **files}.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(textwrap.dedent(text))
    config = tmp_path / "contracts.toml"
    config.write_text('[tool.importlinter]\nroot_package = "scratch"\n\n[[tool.importlinter.contracts]]\n'
                      + textwrap.dedent(contract))
    return _lint(tmp_path, config)


def test_an_upward_import_inside_a_function_breaks_a_layers_contract(tmp_path):
    r = _scratch(tmp_path, {
        "high.py": "from scratch import low\n",
        "low.py": """
            def late():
                from scratch import high  # only when called: still an import of high by low
                return high
            """,
    }, 'name = "layers"\ntype = "layers"\nlayers = ["scratch.high", "scratch.low"]\n')
    assert r.returncode == 1 and _broken(r.stdout) == {"layers"}, r.stdout + r.stderr
    assert "scratch.low -> scratch.high" in r.stdout, r.stdout


def test_a_cycle_closed_inside_a_function_breaks_the_acyclic_contract(tmp_path):
    r = _scratch(tmp_path, {
        "a/__init__.py": "",
        "b/__init__.py": "",
        "a/one.py": "from scratch.b import two\n",
        "b/two.py": "def late():\n    from scratch.a import one\n    return one\n",
    }, 'name = "no cycles"\ntype = "acyclic_siblings"\nancestors = ["scratch"]\ndepth = 0\n')
    assert r.returncode == 1 and _broken(r.stdout) == {"no cycles"}, r.stdout + r.stderr


def _copy_of_wh(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "wheelhouse", tmp_path / "wheelhouse", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_wh_s_contracts_catch_a_late_upward_import(tmp_path):
    """The index importing fetch inside a function (the index <-> fetch cycle this repository had)."""
    root = _copy_of_wh(tmp_path)
    with (root / "wheelhouse" / "index" / "pip_config.py").open("a") as f:
        f.write("\n\ndef _late_cache_dir():\n    from wheelhouse.fetch.cache import place\n    return place\n")
    r = _lint(root, root / "pyproject.toml")
    assert r.returncode == 1, r.stdout + r.stderr
    assert _broken(r.stdout) == {"Layers: an import only goes down (docs/design.md, lowest last)",
                                 "No import cycle between sibling packages"}, r.stdout
    assert "wheelhouse.index.pip_config -> wheelhouse.fetch.cache" in r.stdout, r.stdout


def test_wh_s_contracts_catch_the_box_side_reaching_the_host_side(tmp_path):
    """install is above stage in the one order, so only the box-side contract stops this import."""
    root = _copy_of_wh(tmp_path)
    with (root / "wheelhouse" / "install" / "state.py").open("a") as f:
        f.write("\n\ndef _late():\n    from wheelhouse.stage import bootstrap\n    return bootstrap\n")
    r = _lint(root, root / "pyproject.toml")
    assert r.returncode == 1, r.stdout + r.stderr
    assert _broken(r.stdout) == {"The box side (patch, carry, install, doctor, serve) loads nothing of the host side"}, \
        r.stdout


def test_a_new_top_level_module_must_be_given_a_layer(tmp_path):
    root = _copy_of_wh(tmp_path)
    (root / "wheelhouse" / "helpers.py").write_text('"""Placed nowhere."""\n')
    r = _lint(root, root / "pyproject.toml")
    assert r.returncode == 1 and "wheelhouse.helpers" in r.stdout, r.stdout + r.stderr


def test_wh_stage_loads_nothing_of_install_or_doctor():
    """Every module of the stage pipeline and its command, imported: no install, doctor, carry or patch among them."""
    code = textwrap.dedent("""
        import importlib, pkgutil, sys
        import wheelhouse.cli.stage, wheelhouse.stage
        for m in pkgutil.walk_packages(wheelhouse.stage.__path__, "wheelhouse.stage."):
            importlib.import_module(m.name)
        print("\\n".join(sorted(sys.modules)))
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    loaded = r.stdout.split()
    assert "wheelhouse.stage.kernels" in loaded and "wheelhouse.fatbin" in loaded
    box = [m for m in loaded if m.split(".")[:2] in (["wheelhouse", s] for s in ("install", "doctor", "carry", "patch"))]
    assert box == [], box


# A package's face (its __init__.py) holds a docstring, re-exports and __all__; the code lives in named modules
# (issue 31). The packages below are not thinned yet: the list can only shrink, an entry leaves once its face fits.
FACE_LINES = 80
FACES_NOT_YET_THIN: set[str] = set()


def _faces() -> dict[str, int]:
    pkg = REPO / "wheelhouse"
    return {init.parent.relative_to(pkg).as_posix(): len(init.read_text().splitlines())
            for init in pkg.rglob("__init__.py")}


def test_every_package_face_is_re_exports_only():
    faces = _faces()
    over = {name: n for name, n in faces.items() if n > FACE_LINES and name not in FACES_NOT_YET_THIN}
    assert over == {}, f"over {FACE_LINES} lines: move the code into a module named by its concept"
    thin = sorted(name for name in FACES_NOT_YET_THIN if faces.get(name, 0) <= FACE_LINES)
    assert thin == [], "thinned (or gone): take them off FACES_NOT_YET_THIN"
