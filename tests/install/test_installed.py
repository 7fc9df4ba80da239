"""The installed side: finding distributions, their RECORD's paths, the one guard on what may be removed."""

from __future__ import annotations

import os
from pathlib import Path

from wheelhouse.install.installed import (
    canonical_name,
    drop_bytecode,
    find_installed,
    inside_scheme,
    installed_paths,
    prune_empty_dirs,
)


def _dist(site: Path, folder: str, record: str) -> Path:
    info = site / folder
    info.mkdir(parents=True)
    (info / "RECORD").write_text(record)
    return info


def test_find_installed_matches_normalised_names_in_every_site(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _dist(a, "My_Pkg-1.0.dist-info", "")
    _dist(b, "my.pkg-2.0.dist-info", "")
    _dist(b, "other-1.0.dist-info", "")
    assert canonical_name("My_Pkg") == "my-pkg"
    assert find_installed([a, b, a, tmp_path / "missing"], "MY-pkg") == [
        (a / "My_Pkg-1.0.dist-info", "1.0"), (b / "my.pkg-2.0.dist-info", "2.0")]


def test_installed_paths_are_absolute_and_the_dist_info_comes_whole(tmp_path):
    info = _dist(tmp_path, "p-1.0.dist-info", "p/__init__.py,sha256=x,1\np-1.0.dist-info/METADATA,,\n"
                                              "../../bin/p,,\n\"odd,name.py\",,\n")
    assert installed_paths(info) == [str(info), str(tmp_path / "p" / "__init__.py"),
                                     os.path.normpath(str(tmp_path / "../../bin/p")), str(tmp_path / "odd,name.py")]
    assert installed_paths(tmp_path / "none-1.0.dist-info") == [str(tmp_path / "none-1.0.dist-info")]


def test_inside_scheme_keeps_only_the_environment_and_never_wh_state(tmp_path):
    scheme = {"purelib": str(tmp_path / "site"), "platlib": str(tmp_path / "site"), "scripts": str(tmp_path / "bin"),
              "data": str(tmp_path / "data"), "headers": str(tmp_path / "inc")}
    paths = [str(tmp_path / "site" / "p.py"), str(tmp_path / "bin" / "p"), "/etc/passwd",
             str(tmp_path / "site-other" / "x.py"), str(tmp_path / "site" / ".wh" / "links.json"),
             str(tmp_path / "site"), str(tmp_path / "site" / ".whx" / "ok.py")]
    assert inside_scheme(paths, scheme) == [str(tmp_path / "site" / "p.py"), str(tmp_path / "bin" / "p"),
                                            str(tmp_path / "site" / ".whx" / "ok.py")]


def test_drop_bytecode_and_prune_empty_dirs(tmp_path):
    mod = tmp_path / "site" / "pkg" / "sub" / "m.py"
    mod.parent.mkdir(parents=True)
    (mod.parent / "__pycache__").mkdir()
    for name in ("m.cpython-311.pyc", "m.cpython-312.opt-1.pyc", "mm.cpython-311.pyc"):
        (mod.parent / "__pycache__" / name).write_bytes(b"")
    drop_bytecode(str(mod))
    assert os.listdir(mod.parent / "__pycache__") == ["mm.cpython-311.pyc"]
    (mod.parent / "__pycache__" / "mm.cpython-311.pyc").unlink()
    prune_empty_dirs([str(mod)], {str(tmp_path / "site")})
    assert not (tmp_path / "site" / "pkg").exists() and (tmp_path / "site").is_dir()
