"""Hostile wheels, round 8: paths that reach the venv's own files, or a second distribution, by a detour
(``./``, ``.data/data/bin/``, ``.data/purelib/``), METADATA that names another distribution, and entry
point names no file can have. Each is refused before the first write, with one line naming it."""

from __future__ import annotations

import base64
import os
import hashlib
import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from faults import wh_command
from nvidia_fixtures import make_wheelhouse, tree_listing
from wheelmaker import make_wheel

from wheelhouse.install.uninstall import remove_distribution
from wheelhouse.install.wheel import install_wheels
from wheelhouse.install.wheel.plan import plan_wheel
from wheelhouse.install.wheel.record import UnpackError, UnsafeWheelPath
from wheelhouse.target.interpreter import inspect_interpreter

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def wh(*args):
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def rewrite(wheel: Path, replace: dict[str, bytes]) -> Path:
    """Replace members of ``wheel`` and rewrite its RECORD to match (a wheel consistent with itself)."""
    with zipfile.ZipFile(wheel) as zf:
        items = {n: zf.read(n) for n in zf.namelist()}
    items.update(replace)
    record = next(n for n in items if n.endswith(".dist-info/RECORD") and n.count("/") == 1)
    rows = [f"{n},sha256={_b64(d)},{len(d)}" for n, d in items.items() if n != record] + [f"{record},,"]
    items[record] = ("\n".join(rows) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in items.items():
            zf.writestr(n, d)
    wheel.write_bytes(buf.getvalue())
    return wheel


def _venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    base = make_wheelhouse(tmp_path / "base", [make_wheel(tmp_path / "w0", "ok", "1.0", modules={"ok.py": ""})])
    r = wh("install", base, "--venv", venv)
    assert r.returncode == 0, r.stderr
    return venv


# ---- the venv's interpreter and activation scripts, by a detour --------------------------------------


@pytest.mark.parametrize("member", [
    "evil-1.0.data/scripts/./python",          # scripts/sub/x is allowed; ./x is not a sub folder
    "evil-1.0.data/scripts/.//activate",
    "evil-1.0.data/data/bin/python",           # the data scheme is the venv's root: bin/ is in it
    f"evil-1.0.data/data/bin/python{sys.version_info[0]}",
    "evil-1.0.data/data/bin/activate",
    "evil-1.0.data/scripts/.",                 # the folder itself
])
def test_a_script_reaching_the_interpreter_by_a_detour_is_refused(tmp_path, scheme, member):
    w = make_wheel(tmp_path, "evil", "1.0", files={member: "#!/bin/sh\necho PWNED\n"})
    with pytest.raises(UnsafeWheelPath, match="would replace the environment's"):
        plan_wheel(w, scheme)


def test_pyvenv_cfg_is_not_a_wheels_to_write(tmp_path, scheme):
    """Python reads pyvenv.cfg beside or above its executable: it says which interpreter the venv is."""
    for i, member in enumerate(["evil-1.0.data/data/pyvenv.cfg", "evil-1.0.data/scripts/pyvenv.cfg"]):
        w = make_wheel(tmp_path / str(i), "evil", "1.0", files={member: "home = /tmp/evil\n"})
        with pytest.raises(UnsafeWheelPath, match="pyvenv.cfg"):
            plan_wheel(w, scheme)


def test_end_to_end_the_venvs_python_survives_a_dot_slash_script(tmp_path):
    venv = _venv(tmp_path)
    before = tree_listing(venv)
    w = make_wheel(tmp_path / "w", "evil", "1.0", files={"evil-1.0.data/scripts/./python": "#!/bin/sh\necho PWNED\n"})
    r = wh("install", make_wheelhouse(tmp_path / "h", [w]), "--venv", venv)
    assert r.returncode == 1 and "error:" in r.stderr and "evil" in r.stderr and "hint:" in r.stderr, r.stderr
    assert tree_listing(venv) == before
    out = subprocess.run([venv / "bin" / "python", "-c", "print('alive')"], capture_output=True, text=True)
    assert out.stdout.strip() == "alive"


def test_a_record_naming_pyvenv_cfg_never_removes_it(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    scheme = inspect_interpreter(venv / "bin" / "python").scheme()
    install_wheels([make_wheel(tmp_path / "w", "victim", "1.0", modules={"victim.py": ""})], scheme,
                   str(venv / "bin" / "python"))
    record = Path(scheme["purelib"]) / "victim-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + "../../../pyvenv.cfg,,\n../../../bin/pyvenv.cfg,,\n")
    (venv / "bin" / "pyvenv.cfg").write_text("# a second one Python would read\n")
    assert remove_distribution("victim", scheme) == ["1.0"]
    assert (venv / "pyvenv.cfg").is_file() and (venv / "bin" / "pyvenv.cfg").is_file()


# ---- a second distribution's .dist-info, by a detour -------------------------------------------------


@pytest.mark.parametrize("member", [
    "./numpy-1.0.dist-info/METADATA",
    "evil-1.0.data/purelib/numpy-1.0.dist-info/METADATA",
    "evil-1.0.data/platlib/numpy-1.0.dist-info/RECORD",
])
def test_a_second_dist_info_by_a_detour_is_refused(tmp_path, scheme, member):
    w = make_wheel(tmp_path, "evil", "1.0", files={member: "Metadata-Version: 2.1\nName: numpy\nVersion: 1.0\n"})
    with pytest.raises(UnpackError, match="numpy-1.0.dist-info"):
        plan_wheel(w, scheme)


# ---- METADATA that names another distribution --------------------------------------------------------


def test_metadata_naming_another_distribution_is_refused(tmp_path, scheme):
    w = rewrite(make_wheel(tmp_path, "evil", "1.0", modules={"evil.py": ""}),
                {"evil-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: torch\nVersion: 2.5\n"})
    with pytest.raises(UnpackError, match="METADATA names torch 2.5"):
        plan_wheel(w, scheme)


def test_a_fake_provider_does_not_satisfy_a_requirement(tmp_path):
    """app needs torch; evil-1.0's METADATA says it is torch 2.5: the requirements check must not believe it
    (the installed evil-1.0.dist-info is not torch to importlib.metadata, pip, or the doctor)."""
    app = make_wheel(tmp_path / "w", "app", "1.0", requires=["torch>=2"], modules={"app.py": ""})
    evil = rewrite(make_wheel(tmp_path / "w", "evil", "1.0", modules={"torch/__init__.py": ""}),
                   {"evil-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: torch\nVersion: 2.5\n"})
    venv = tmp_path / "venv"
    r = wh("install", make_wheelhouse(tmp_path / "h", [app, evil]), "--venv", venv)
    assert r.returncode != 0, r.stderr
    assert "error:" in r.stderr and "hint:" in r.stderr and "internal error" not in r.stderr, r.stderr
    assert not venv.exists()


# ---- entry point names no file can have --------------------------------------------------------------


@pytest.mark.parametrize("script", ["a\x00b", "x" * 300])
def test_an_entry_point_name_no_file_can_have_is_one_clear_error(tmp_path, script):
    venv = _venv(tmp_path)
    before = tree_listing(venv)
    w = make_wheel(tmp_path / "w", "evil", "1.0", modules={"evil.py": "def main(): pass\n"},
                   entry_points={"console_scripts": {script: "evil:main"}})
    r = wh("install", make_wheelhouse(tmp_path / "h", [w]), "--venv", venv)
    assert r.returncode == 1, r.stderr
    assert "internal error" not in r.stderr and "evil" in r.stderr and "hint:" in r.stderr, r.stderr
    assert tree_listing(venv) == before


# ---- a backup across filesystems that a full disk cuts short ------------------------------------------


def test_a_backup_cut_short_by_a_full_disk_never_replaces_the_original(tmp_path, monkeypatch):
    """A scripts folder on another filesystem than the site folder: its files are copied into the backup
    folder, not renamed. When the disk fills in the middle of that copy, the rollback must not take the
    partial copy for the previous content (it removed the intact original and put half a file there)."""
    import errno
    import shutil

    from wheelhouse.install import transaction as txn_mod
    from wheelhouse.install.transaction import Transaction

    site_dir, other = tmp_path / "site", tmp_path / "bin"
    site_dir.mkdir()
    other.mkdir()
    script = other / "tool"
    script.write_bytes(b"#!/bin/sh\n" + b"echo intact\n" * 1000)
    before = script.read_bytes()
    real_rename, real_copy2 = os.rename, shutil.copy2

    def rename(src, dst):  # the backup folder is on another filesystem than bin/
        if str(src).startswith(str(other)) or str(dst).startswith(str(other)):
            if (str(site_dir) in str(dst)) != (str(site_dir) in str(src)):
                raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_rename(src, dst)

    def copy2(src, dst, follow_symlinks=True):  # the disk fills half way through the copy
        with open(src, "rb") as fh, open(dst, "wb") as out:
            out.write(fh.read()[:100])
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(txn_mod.os, "rename", rename)
    monkeypatch.setattr(shutil, "copy2", copy2)
    txn = Transaction(site_dir, ["x.whl"])
    with pytest.raises(OSError):
        txn.begin([str(script)])
    monkeypatch.setattr(shutil, "copy2", real_copy2)  # the disk has room again
    txn.rollback()
    assert script.read_bytes() == before


# ---- killed just after the commit ---------------------------------------------------------------------


def test_an_upgrade_killed_just_after_its_commit_leaves_no_folder_of_the_old_version(tmp_path):
    """1.0 ships oldonly/sub/, 2.0 does not. Killed right after the commit, the replaced version's folders
    stayed, empty, for good (the next run found nothing to do): ``import oldonly.sub`` still worked, as a
    namespace package, so find_spec said a module of the old version was there."""
    import signal

    from faults import run_with_fault

    def stack(folder: Path, version: str, extra: bool) -> list[Path]:
        mods = {"pkg/__init__.py": f"V = '{version}'\n", **({"oldonly/sub/__init__.py": "X = 1\n"} if extra else {})}
        return [make_wheel(folder, "pkg", version, modules=mods)]

    old = make_wheelhouse(tmp_path / "old", stack(tmp_path / "w1", "1.0", True))
    new = make_wheelhouse(tmp_path / "new", stack(tmp_path / "w2", "2.0", False))
    venv, clean = tmp_path / "venv", tmp_path / "clean"
    assert wh("install", old, "--venv", venv, "--no-links").returncode == 0
    killed = run_with_fault(["install", new, "--venv", venv, "--no-links"], "install.committed")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert wh("install", new, "--venv", venv, "--no-links").returncode == 0
    assert wh("install", new, "--venv", clean, "--no-links").returncode == 0
    site = f"lib/{PY}/site-packages"
    names = lambda v: sorted(p[0] for p in tree_listing(v / site) if not p[0].startswith(".wh"))  # noqa: E731
    assert names(venv) == names(clean)
    out = subprocess.run([venv / "bin" / "python", "-c", "import importlib.util as u; print(u.find_spec('oldonly'))"],
                         capture_output=True, text=True)
    assert out.stdout.strip() == "None", out.stderr


# ---- a wheel swapped after it was verified ------------------------------------------------------------


def test_a_wheel_swapped_after_its_hash_was_checked_is_not_installed(tmp_path):
    """Into an environment that holds distributions every wheel is hashed before the first write; a
    wheelhouse another user can write to may have a wheel replaced right after (a rename over it).
    What is extracted must be the bytes that were hashed, not whatever the path names later."""
    from wheelhouse.install import InstallOptions, install_wheelhouses
    from wheelhouse.progress import RecordingReporter

    venv = _venv(tmp_path)
    good = make_wheel(tmp_path / "good", "app", "1.0", modules={"app.py": "WHO = 'good'\n"})
    house = make_wheelhouse(tmp_path / "h", [good])
    evil = make_wheel(tmp_path / "evil", "app", "1.0", modules={"app.py": "WHO = 'evil'\n"})
    target = house / "wheels" / good.name

    class Swapper(RecordingReporter):
        def finish(self, task, message=""):
            super().finish(task, message)
            if task.startswith("verifying"):  # just after the hashes matched
                os.replace(evil, target)

    try:
        install_wheelhouses([house], InstallOptions(venv=venv, links=False), reporter=Swapper())
    except Exception as exc:  # refused: fine, if nothing landed
        assert "app" in str(exc)
    out = subprocess.run([venv / "bin" / "python", "-c", "import app; print(app.WHO)"], capture_output=True,
                         text=True)
    assert out.stdout.strip() in ("good", ""), out.stdout


# ---- a venv's headers stay in the venv ------------------------------------------------------------------


def test_headers_installed_into_a_venv_land_in_the_venv_not_the_base_interpreter(tmp_path):
    """greenlet (and others) ship .data/headers/. Into a venv they went to the BASE interpreter's include
    folder: outside the venv, shared by every venv of that base, and read-only for a user installing into
    their own venv from a system Python (the whole install then failed). pip puts them under
    <venv>/include/site/pythonX.Y/<dist>/."""
    import shutil
    import sysconfig

    name = f"hdrleak{os.getpid()}"
    base_include = Path(sysconfig.get_paths(vars={"installed_base": sys.base_prefix,
                                                  "installed_platbase": sys.base_prefix})["include"]) / name
    w = make_wheel(tmp_path / "w", name, "1.0", modules={f"{name}.py": ""},
                   files={f"{name}-1.0.data/headers/{name}.h": "#define X 1\n"})
    venv = tmp_path / "venv"
    try:
        r = wh("install", make_wheelhouse(tmp_path / "h", [w]), "--venv", venv, "--no-links")
        assert r.returncode == 0, r.stderr
        leaked = base_include.exists()
    finally:
        shutil.rmtree(base_include, ignore_errors=True)
    assert not leaked
    ver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    assert (venv / "include" / "site" / ver / name / f"{name}.h").is_file()


# ---- a file where a folder is ---------------------------------------------------------------------------


@pytest.mark.parametrize("member", ["okpkg", "evil-1.0.data/data/bin", "evil-1.0.data/scripts/."])
def test_a_file_member_where_a_folder_is_is_refused_and_the_folder_kept(tmp_path, member):
    """evil's file ``okpkg`` over okpkg's package folder: the whole folder was moved aside, the file written,
    and on the commit okpkg's modules were gone for good while its .dist-info said it was installed
    (pip refuses: it cannot open a folder for writing). Over bin/: a wrong hint about free space."""
    venv = tmp_path / "venv"
    base = make_wheelhouse(tmp_path / "base", [make_wheel(tmp_path / "w0", "okpkg", "1.0",
                                                          modules={"okpkg/__init__.py": "", "okpkg/core.py": ""})])
    assert wh("install", base, "--venv", venv, "--no-links").returncode == 0
    before = tree_listing(venv)
    w = make_wheel(tmp_path / "w1", "evil", "1.0", files={member: "x"}, modules={"evil.py": ""})
    r = wh("install", make_wheelhouse(tmp_path / "h1", [w]), "--venv", venv, "--no-links")
    assert r.returncode == 1, r.stderr
    assert "evil-1.0-py3-none-any.whl" in r.stderr and "folder" in r.stderr and "free space" not in r.stderr, r.stderr
    assert tree_listing(venv) == before


# ---- a full disk names the file -------------------------------------------------------------------------


def test_a_full_disk_while_extracting_names_the_file_it_could_not_write(tmp_path, scheme, monkeypatch):
    """os.write says ENOSPC without a file name: the error read 'could not write a file'."""
    import errno

    from wheelhouse.install.wheel import extract

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(extract, "_write_all", full)
    w = make_wheel(tmp_path, "big", "1.0", modules={"big/data.py": "X = 1\n" * 100})
    with pytest.raises(UnpackError) as err:
        install_wheels([w], scheme, sys.executable)
    assert "big/data.py" in str(err.value) and "No space left" in str(err.value), str(err.value)
    assert not any(Path(scheme["purelib"]).rglob("*.py"))


# ---- an entry point reference that is not a dotted name -------------------------------------------------


@pytest.mark.parametrize("ref", ["m:main\n  import os", "m:ma in", "os; import evil:main", "m:main()"])
def test_a_reference_that_is_not_a_dotted_name_is_skipped_like_other_bad_ones(ref):
    """Bad references are skipped (test_launchers); these became launchers that are not Python (a
    continuation line, spaces, code), or code spliced into the launcher."""
    from wheelhouse.install.wheel.launchers import console_launchers

    eps = "[console_scripts]\nfoo = " + ref.replace("\n", "\n") + "\ngood = pkg.cli:main\n"
    assert [name for name, _ in console_launchers(eps)] == ["good"]
    for _, body in console_launchers(eps):
        compile(body, "launcher", "exec")


def test_virtualenvs_activate_this_is_an_activation_script_too(tmp_path, scheme):
    """virtualenv (not venv) writes bin/activate_this.py, which people exec() to activate the env."""
    w = make_wheel(tmp_path, "evil", "1.0", files={"evil-1.0.data/scripts/activate_this.py": "import os\n"})
    with pytest.raises(UnsafeWheelPath, match="activation script"):
        plan_wheel(w, scheme)


# ---- a wheelhouse change whose rollback is killed half way ---------------------------------------------


def test_a_wheelhouse_rollback_killed_half_way_is_finished_without_losing_the_lock(tmp_path, monkeypatch):
    """`wh build` changes a wheelhouse in place under an undo journal. The rollback puts pylock.toml back
    (a rename out of the journal folder), then wh.json; killed between the two, the next recovery removed the
    restored pylock.toml and found nothing to put in its place: the wheelhouse had no lock at all."""
    from wheelhouse.lock import journal as journal_mod
    from wheelhouse.lock.journal import UndoJournal, recover_journals

    root = tmp_path / "house"
    (root / "simple").mkdir(parents=True)
    (root / "pylock.toml").write_text("original lock\n")
    (root / "wh.json").write_text("original meta\n")
    (root / "simple" / "index.html").write_text("original index\n")
    undo = UndoJournal(root, ("pylock.toml", "wh.json", "simple"))
    (root / "pylock.toml").write_text("new lock\n")
    (root / "wh.json").write_text("new meta\n")

    class Killed(BaseException):
        pass

    real_replace = os.replace
    calls = []

    def replace_then_die(src, dst):
        real_replace(src, dst)
        calls.append(dst)
        if len(calls) == 1:
            raise Killed  # SIGKILL right after the first index file was put back

    monkeypatch.setattr(journal_mod.os, "replace", replace_then_die)
    with pytest.raises(Killed):
        undo.rollback()
    monkeypatch.setattr(journal_mod.os, "replace", real_replace)
    recover_journals(root)  # the next run, under the wheelhouse's lock
    assert (root / "pylock.toml").read_text() == "original lock\n"
    assert (root / "wh.json").read_text() == "original meta\n"
    assert (root / "simple" / "index.html").read_text() == "original index\n"
    assert not list(root.glob(".wh-undo-*"))


# ---- a journal that names paths outside the environment -------------------------------------------------


def test_a_planted_journal_never_makes_the_rollback_touch_anything_outside_the_environment(tmp_path):
    """The next `wh install` rolls back whatever <site>/.wh/journal.json says. Anyone who can write into the
    venv (a group-writable /opt/venv) could plant one naming a folder outside it, as the transaction id
    (whose backup folder is removed after the rollback) or as a path the install 'created': the rollback
    removed them. Like the wheelhouse's undo journal (lock.journal), it acts only inside its environment."""
    import json

    venv = _venv(tmp_path)
    site = venv / "lib" / PY / "site-packages"
    victim, victim2 = tmp_path / "victim", tmp_path / "victim2"
    for v in (victim, victim2):
        v.mkdir()
        (v / "precious.txt").write_text("keep me\n")
    txn_root = site / ".wh" / "txn"
    journal = {"schema": "wh-install-journal/1", "id": os.path.relpath(victim, txn_root), "pid": 1,
               "started": "2020-01-01T00:00:00Z", "wheels": ["x.whl"], "dirs": [],
               "entries": [[str(victim2), False, None], [str(site / "ok.py"), True, "../../../../../../victim"]]}
    (site / ".wh").mkdir(exist_ok=True)
    (site / ".wh" / "journal.json").write_text(json.dumps(journal))
    w = make_wheel(tmp_path / "w", "other", "1.0", modules={"other.py": ""})
    wh("install", make_wheelhouse(tmp_path / "h", [w]), "--venv", venv, "--no-links")
    assert (victim / "precious.txt").read_text() == "keep me\n"
    assert (victim2 / "precious.txt").read_text() == "keep me\n"


def test_a_planted_journal_cannot_reach_out_through_a_link_inside_the_environment(tmp_path):
    import json

    venv = _venv(tmp_path)
    site = venv / "lib" / PY / "site-packages"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me\n")
    (site / "door").symlink_to(victim)
    journal = {"schema": "wh-install-journal/1", "id": "1-1", "pid": 1, "started": "x", "wheels": [], "dirs": [],
               "entries": [[str(site / "door" / "precious.txt"), False, None]]}
    (site / ".wh").mkdir(exist_ok=True)
    (site / ".wh" / "journal.json").write_text(json.dumps(journal))
    w = make_wheel(tmp_path / "w", "other", "1.0", modules={"other.py": ""})
    wh("install", make_wheelhouse(tmp_path / "h", [w]), "--venv", venv, "--no-links")
    assert (victim / "precious.txt").read_text() == "keep me\n"
