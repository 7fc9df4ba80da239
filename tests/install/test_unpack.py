"""wh's parallel wheel unpacker: RECORD checks, .data folders, launchers, rollback."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from nvidia_fixtures import set_modes, tree_listing
from wheelmaker import make_wheel

from wheelhouse.install.wheel import RecordMismatch, UnsafeWheelPath, install_wheels, remove_distribution


def _rewrite(wheel: Path, change) -> Path:
    """Rewrite a wheel's members through ``change(name, data) -> data | None`` (None drops it)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = change(info.filename, src.read(info))
            if data is not None:
                dst.writestr(info.filename, data)
    wheel.write_bytes(buf.getvalue())
    return wheel


def test_files_land_in_their_scheme_with_modes(tmp_path, scheme):
    w = make_wheel(tmp_path / "w", "tool", "1.0", modules={"tool/__init__.py": "X = 1\n"},
                   files={"tool-1.0.data/headers/tool.h": "int x;\n", "tool-1.0.data/data/etc/tool.cfg": "a=1\n",
                          "tool/bin/helper": "#!/bin/sh\necho helper\n"})
    set_modes(w, {"tool/bin/helper": 0o755})
    done = install_wheels([w], scheme, sys.executable)
    assert [d.name for d in done] == ["tool"]
    assert Path(scheme["headers"], "tool", "tool.h").read_text() == "int x;\n"
    assert Path(scheme["data"], "etc", "tool.cfg").read_text() == "a=1\n"
    helper = Path(scheme["purelib"], "tool", "bin", "helper")
    assert os.access(helper, os.X_OK)
    assert subprocess.run([helper], capture_output=True, text=True).stdout == "helper\n"


def test_record_is_rewritten_with_true_hashes(tmp_path, scheme):
    w = make_wheel(tmp_path / "w", "big", "1.0", modules={f"big/m{i}.py": f"X = {i}\n" for i in range(300)},
                   pad_bytes=3 << 20, entry_points={"console_scripts": {"big-cli": "big.m1:X"}})
    install_wheels([w], scheme, sys.executable, jobs=8)
    info = Path(scheme["purelib"], "big-1.0.dist-info")
    rows = list(csv.reader(io.StringIO((info / "RECORD").read_text())))
    assert len(rows) >= 300 + 5
    for path, digest, size in rows:
        full = Path(os.path.normpath(info.parent / path))
        assert full.exists(), path
        if digest:
            data = full.read_bytes()
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)
    # Byte-identical to the archive.
    with zipfile.ZipFile(w) as zf:
        assert Path(scheme["purelib"], "big_pad", "blob.bin").read_bytes() == zf.read("big_pad/blob.bin")


def test_launcher_works_from_an_interpreter_path_with_spaces(tmp_path, scheme):
    spaced = tmp_path / "a dir with spaces"
    spaced.mkdir()
    (spaced / "python").symlink_to(sys.executable)
    w = make_wheel(tmp_path / "w", "greet", "1.0", modules={"greet.py": "def main():\n    print('hi')\n    return 3\n"},
                   entry_points={"console_scripts": {"greet": "greet:main"}})
    install_wheels([w], scheme, str(spaced / "python"))
    script = Path(scheme["scripts"], "greet")
    r = subprocess.run([script], capture_output=True, text=True, env={"PYTHONPATH": scheme["purelib"]})
    assert r.stdout == "hi\n" and r.returncode == 3


def test_bad_record_hash_rolls_back_and_keeps_old_version(tmp_path, scheme):
    old = make_wheel(tmp_path / "w1", "pkg", "1.0", modules={"pkg/__init__.py": "V = 1\n"})
    install_wheels([old], scheme, sys.executable)
    before = tree_listing(Path(scheme["purelib"]).parent)
    new = make_wheel(tmp_path / "w2", "pkg", "2.0", modules={"pkg/__init__.py": "V = 2\n", "pkg/new.py": "N = 1\n"})
    _rewrite(new, lambda n, d: b"V = 666\n" if n == "pkg/__init__.py" else d)
    other = make_wheel(tmp_path / "w2", "fine", "1.0", modules={"fine.py": "F = 1\n"})
    with pytest.raises(RecordMismatch, match="pkg/__init__.py"):
        install_wheels([other, new], scheme, sys.executable)
    assert tree_listing(Path(scheme["purelib"]).parent) == before
    assert Path(scheme["purelib"], "pkg", "__init__.py").read_text() == "V = 1\n"


def test_file_missing_from_record_is_refused(tmp_path, scheme):
    w = make_wheel(tmp_path / "w", "sneaky", "1.0", modules={"sneaky.py": "S = 1\n"})
    with zipfile.ZipFile(w, "a") as zf:
        zf.writestr("sneaky_extra.py", "import os\n")
    with pytest.raises(RecordMismatch, match="not listed in RECORD"):
        install_wheels([w], scheme, sys.executable)
    assert not list(Path(scheme["purelib"]).iterdir())


def test_unknown_data_folder_and_traversal_via_data_are_refused(tmp_path, scheme):
    w = make_wheel(tmp_path / "w", "odd", "1.0", files={"odd-1.0.data/scripts/../../../escape": "x"})
    with pytest.raises(UnsafeWheelPath):
        install_wheels([w], scheme, sys.executable)
    assert not list(Path(scheme["purelib"]).iterdir())


def test_remove_distribution_uses_record(tmp_path, scheme):
    w = make_wheel(tmp_path / "w", "gone", "1.0", modules={"gone/__init__.py": "", "gone/sub/x.py": ""},
                   entry_points={"console_scripts": {"gone-cli": "gone:main"}})
    install_wheels([w], scheme, sys.executable)
    assert Path(scheme["scripts"], "gone-cli").exists()
    assert remove_distribution("Gone", scheme) == ["1.0"]
    assert not Path(scheme["purelib"], "gone").exists()
    assert not Path(scheme["scripts"], "gone-cli").exists()
    assert not list(Path(scheme["purelib"]).glob("gone*"))


def test_many_wheels_in_parallel(tmp_path, scheme):
    wheels = [make_wheel(tmp_path / "w", f"p{i}", "1.0", modules={f"p{i}/__init__.py": f"I = {i}\n"},
                         pad_bytes=100_000) for i in range(40)]
    done = install_wheels(wheels, scheme, sys.executable, jobs=16)
    assert len(done) == 40
    r = subprocess.run([sys.executable, "-c", "import p0, p39; print(p0.I + p39.I)"], capture_output=True,
                       text=True, env={"PYTHONPATH": scheme["purelib"]})
    assert r.stdout.strip() == "39"


def test_old_record_naming_paths_outside_the_env_is_not_followed(tmp_path, scheme):
    w = make_wheel(tmp_path / "w1", "victim", "1.0", modules={"victim.py": ""})
    install_wheels([w], scheme, sys.executable)
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me\n")
    record = Path(scheme["purelib"], "victim-1.0.dist-info", "RECORD")
    record.write_text(record.read_text() + f"{outside},,\n../../precious.txt,,\n")
    install_wheels([make_wheel(tmp_path / "w2", "victim", "2.0", modules={"victim.py": "V = 2\n"})], scheme,
                   sys.executable)
    assert outside.read_text() == "keep me\n"
    assert remove_distribution("victim", scheme) == ["2.0"]
    assert outside.exists()


def test_stage_and_install_refuse_a_lying_record_with_one_error_class(tmp_path, scheme):
    """One RecordMismatch (the ground floor's, code record-mismatch) from stage's check and install's plan:
    one ``except`` catches a lying RECORD wherever it is found; install's own handlers catch it too (nothing
    written)."""
    from wheelhouse.errors import HashMismatch
    from wheelhouse.lock.records import check_record
    from wheelhouse.recordfile import RecordMismatch as Shared

    w = make_wheel(tmp_path / "w", "sneaky", "1.0", modules={"sneaky.py": "S = 1\n"})
    with zipfile.ZipFile(w, "a") as zf:
        zf.writestr("sneaky_extra.py", "import os\n")
    with pytest.raises(Shared, match="not listed in RECORD") as staged:
        check_record(w)
    with pytest.raises(Shared, match="not listed in RECORD") as installed:
        install_wheels([w], scheme, sys.executable)
    assert staged.value.code == installed.value.code == "record-mismatch"
    assert RecordMismatch is Shared
    # install's handler of a refused plan ran: a wheel that is not the lock's is named by its hash
    with pytest.raises(HashMismatch):
        install_wheels([w], scheme, sys.executable, expected={w: "0" * 64})
    assert not list(Path(scheme["purelib"]).iterdir())
