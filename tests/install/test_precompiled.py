"""Bytecode compiled at stage time (`wh stage --bytecode`, `wh bytecode`), written by `wh install --compile`.

The promise: a .pyc written from the wheelhouse's bytecode is one the interpreter accepts for the
installed source, and is never stale: a pack that does not fit (another wheel, another Python,
damaged bytes, an environment that writes other .pyc files) is not used, and the module is
compiled on the box as before. Real wheels, real venvs, the real CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from faults import run_with_fault
from index_fixtures import pyindex  # noqa: F401  (fixture)
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel

from pyc_helpers import TAG, install, loaded_from_pyc, site, wh




def modules(x: int) -> dict[str, str]:
    return {"app/__init__.py": f"X = {x}\ndef f():\n    return X + 1\n",
            "app/sub/deep.py": "def boom():\n    raise ValueError('from deep')\n",
            "app/py2.py": "print 'a Python 2 file'\n"}


def house_with_bytecode(tmp_path: Path, x: int = 41) -> Path:
    w = tmp_path / "w"
    wheels = [make_wheel(w, "app", "1.0", modules=modules(x)),
              make_wheel(w, "lib", "2.0", modules={"lib/__init__.py": "VALUE = 42\n"},
                         files={"lib-2.0.data/purelib/libextra.py": "E = 'extra'\n",
                                "lib-2.0.data/scripts/tool.py": "print('a script')\n"})]
    house = make_wheelhouse(tmp_path / "house", wheels)
    r = wh("bytecode", house, "--json")
    assert r.returncode == 0, r.stderr
    return house




def test_bytecode_from_the_wheelhouse_is_what_the_box_would_compile(tmp_path):
    house = house_with_bytecode(tmp_path)
    record = json.loads((house / "wh.json").read_text())["bytecode"]
    assert record["cache_tag"] == TAG and set(record["packs"]) == {"app-1.0-py3-none-any.whl",
                                                                   "lib-2.0-py3-none-any.whl"}
    assert "bytecode" in json.loads((house / "wh.json").read_text())["owned"]  # `wh pack` carries it
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    a = install(house, fast)
    b = install(house, slow, "--recompile")
    # app/__init__, app/sub/deep, lib/__init__, libextra from packs; the Python 2 file compiles nowhere
    assert a["precompiled"] == 4 and b["precompiled"] == 0
    assert a["compiled"] == b["compiled"]
    for venv in (fast, slow):
        py = venv / "bin" / "python"
        for module in ("app", "app.sub.deep", "lib", "libextra"):
            assert loaded_from_pyc(py, module), (venv, module)
        got = subprocess.run([py, "-B", "-c", "import app, app.sub.deep as d, libextra\nprint(app.f(), libextra.E)\n"
                              "d.boom()"], capture_output=True, text=True)
        assert got.stdout.split() == ["42", "extra"]
        # the traceback names the installed file, not where the wheelhouse was compiled
        assert f'File "{site(venv) / "app" / "sub" / "deep.py"}", line 2' in got.stderr
    pyc = f"__pycache__/__init__.{TAG}.pyc"
    a_bytes, b_bytes = (site(fast) / "app" / pyc).read_bytes(), (site(slow) / "app" / pyc).read_bytes()
    assert a_bytes[:4] == b_bytes[:4] and a_bytes[12:16] == b_bytes[12:16]  # magic, source size
    assert (site(fast) / "app" / pyc).stat().st_mode & 0o777 == (site(slow) / "app" / pyc).stat().st_mode & 0o777


def test_a_pack_made_from_another_wheel_is_never_used(tmp_path):
    """The stale-bytecode attack: packs made for app 1.0 with X = 41, then the wheel is rebuilt (same name,
    X = 99) and the lock updated. The old pack must not run: the install compiles the new source."""
    house = house_with_bytecode(tmp_path, x=41)
    meta = json.loads((house / "wh.json").read_text())
    newer = make_wheel(tmp_path / "w2", "app", "1.0", modules=modules(99))
    make_wheelhouse(house, [newer, house / "wheels" / "lib-2.0-py3-none-any.whl"], extra_meta={
        k: meta[k] for k in ("bytecode", "owned")})
    venv = tmp_path / "v"
    report = install(house, venv)
    assert report["precompiled"] == 2  # lib's two modules only
    out = subprocess.run([venv / "bin" / "python", "-B", "-c", "import app; print(app.f())"], capture_output=True,
                         text=True)
    assert out.stdout.strip() == "100"
    assert loaded_from_pyc(venv / "bin" / "python", "app")
    verify = wh("verify", house)
    assert "was compiled from a app-1.0-py3-none-any.whl the lock does not hold" in verify.stdout + verify.stderr


def test_a_damaged_pack_is_named_and_its_wheel_compiled_on_the_box(tmp_path):
    house = house_with_bytecode(tmp_path)
    pack = house / "bytecode" / TAG / "app-1.0-py3-none-any.zip"
    data = bytearray(pack.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only its sha256 tells
    pack.write_bytes(bytes(data))
    venv = tmp_path / "v"
    report = install(house, venv)
    assert report["precompiled"] == 2
    assert any("app-1.0-py3-none-any.zip is not the pack wh.json records" in n for n in report["notes"])
    out = subprocess.run([venv / "bin" / "python", "-B", "-c", "import app; print(app.f())"], capture_output=True,
                         text=True)
    assert out.stdout.strip() == "42"
    verify = wh("verify", house)
    assert verify.returncode == 1 and "app-1.0-py3-none-any.zip: sha256" in verify.stdout + verify.stderr


def test_a_missing_pack_makes_the_wheelhouse_incomplete(tmp_path):
    house = house_with_bytecode(tmp_path)
    (house / "bytecode" / TAG / "lib-2.0-py3-none-any.zip").unlink()
    r = wh("install", house, "--venv", tmp_path / "v", "--compile")
    assert r.returncode != 0 and "lib-2.0-py3-none-any.zip is missing" in r.stderr
    assert not (tmp_path / "v").exists()


def test_bytecode_for_another_python_is_not_used(tmp_path):
    house = house_with_bytecode(tmp_path)
    meta = json.loads((house / "wh.json").read_text())
    meta["bytecode"]["magic"], meta["bytecode"]["cache_tag"] = "0d0d0d0a", "cpython-399"
    (house / "wh.json").write_text(json.dumps(meta))
    report = install(house, tmp_path / "v")
    assert report["precompiled"] == 0 and report["compiled"] >= 4
    assert any("its bytecode is for cpython-399" in n for n in report["notes"])
    assert loaded_from_pyc(tmp_path / "v" / "bin" / "python", "app")


def test_source_date_epoch_means_hash_checked_pycs_so_packs_stand_aside(tmp_path):
    house = house_with_bytecode(tmp_path)
    report = install(house, tmp_path / "v", env={"SOURCE_DATE_EPOCH": "315532800"})
    assert report["precompiled"] == 0
    assert any("SOURCE_DATE_EPOCH" in n for n in report["notes"])
    pyc = (site(tmp_path / "v") / "app" / f"__pycache__/__init__.{TAG}.pyc").read_bytes()
    assert int.from_bytes(pyc[4:8], "little") & 0b1  # hash-based, as py_compile writes it then


def test_no_python_of_the_targets_version_is_refused_before_anything_is_written(tmp_path):
    w = tmp_path / "w"
    house = make_wheelhouse(tmp_path / "house", [make_wheel(w, "lib", "2.0", modules={"lib/__init__.py": "V = 1\n"})])
    meta = json.loads((house / "wh.json").read_text())
    meta["target"]["python_version"] = "3.99"
    (house / "wh.json").write_text(json.dumps(meta))
    before = (house / "wh.json").read_bytes()
    r = wh("bytecode", house)
    assert r.returncode == 2
    assert "no CPython 3.99 here" in r.stderr and "--python" in r.stderr
    assert not (house / "bytecode").exists() and (house / "wh.json").read_bytes() == before


@pytest.mark.parametrize("point,action", [("bytecode.pack", "kill"), ("bytecode.before-record", "kill"),
                                          ("bytecode.write", "enospc")])
def test_an_interrupted_bytecode_run_leaves_the_wheelhouse_installable_and_the_rerun_clean(tmp_path, point, action):
    w = tmp_path / "w"
    house = make_wheelhouse(tmp_path / "house", [make_wheel(w, "app", "1.0", modules=modules(41)),
                                                 make_wheel(w, "lib", "2.0", modules={"lib/__init__.py": "V = 1\n"})])
    before = (house / "wh.json").read_bytes()
    r = run_with_fault(["bytecode", house], point, action)
    assert r.returncode != 0
    if action == "enospc":
        assert "could not write" in r.stderr and "re-run `wh bytecode" in r.stderr
    assert (house / "wh.json").read_bytes() == before  # the record is written last, or not at all
    leftovers = [p.name for p in (house / "bytecode").rglob("*")] if (house / "bytecode").exists() else []
    assert not [n for n in leftovers if n.endswith(".tmp")]
    assert wh("verify", house).returncode == 0
    report = install(house, tmp_path / "v")  # nothing recorded: compiled on the box, as without packs
    assert report["precompiled"] == 0
    again = wh("bytecode", house, "--json")
    assert again.returncode == 0, again.stderr
    listed = {p["path"] for p in json.loads((house / "wh.json").read_text())["bytecode"]["packs"].values()}
    assert {p.relative_to(house).as_posix() for p in (house / "bytecode").rglob("*") if p.is_file()} == listed


def test_rerun_keeps_packs_of_unchanged_wheels(tmp_path):
    house = house_with_bytecode(tmp_path)
    pack = house / "bytecode" / TAG / "lib-2.0-py3-none-any.zip"
    inode = pack.stat().st_ino
    r = wh("bytecode", house, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["reused"] == 2 and json.loads(r.stdout)["compiled"] == 0
    assert pack.stat().st_ino == inode


def test_stage_with_bytecode_from_a_loopback_index(pyindex, tmp_path):
    pub = tmp_path / "pub"
    make_wheel(pub, "web", "1.0", requires=["core>=2"], modules={"web/__init__.py": "import core\nV = core.V\n"})
    make_wheel(pub, "core", "2.0", modules={"core/__init__.py": "V = 2\n"})
    idx = pyindex(pub)
    out = tmp_path / "staged"
    r = wh("stage", "web", "-i", idx.url, "-o", out, "--no-bootstrap", "--cache-dir", tmp_path / "cache",
           "--bytecode")
    assert r.returncode == 0, r.stderr
    assert wh("verify", out).returncode == 0
    report = install(out, tmp_path / "v")
    assert report["precompiled"] == 2
    assert loaded_from_pyc(tmp_path / "v" / "bin" / "python", "web")
    # restaged: the unchanged wheels' packs are taken from the previous wheelhouse, not compiled again
    r = wh("stage", "web", "-i", idx.url, "-o", out, "--no-bootstrap", "--cache-dir", tmp_path / "cache",
           "--bytecode")
    assert r.returncode == 0, r.stderr
    assert "bytecode of 2 wheel(s) taken from" in r.stderr
    bad = wh("stage", "web", "-i", idx.url, "-o", tmp_path / "other", "--no-bootstrap", "--cache-dir",
             tmp_path / "cache", "--bytecode-python", tmp_path / "nope")
    assert bad.returncode == 2 and "no CPython" in bad.stderr and not (tmp_path / "other").exists()


def test_a_packed_wheelhouse_carries_its_bytecode_to_the_box(tmp_path):
    house = house_with_bytecode(tmp_path)
    verify = wh("verify", house, "--json")
    assert json.loads(verify.stdout)["bytecode"] == {"cache_tag": TAG, "python": sys.version.split()[0],
                                                               "packs": 2}
    archive = tmp_path / "carry" / "wh.tar"
    r = wh("pack", house, "-o", archive)
    assert r.returncode == 0, r.stderr
    report = install(archive, tmp_path / "v")
    assert report["precompiled"] == 4
    assert loaded_from_pyc(tmp_path / "v" / "bin" / "python", "app.sub.deep")
