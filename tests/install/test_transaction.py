"""An install is a transaction: killed anywhere, failed anywhere, the environment is what it was or what the
lock says, never in between, and the next run repairs what a killed one left (issue 11.1, 11.2, 11.16)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from faults import run_with_fault, wh_command
from nvidia_fixtures import make_wheelhouse, tree_listing
from venv_check import lock_problems
from wheelmaker import make_wheel

from wheelhouse.install import InstallOptions, install_wheelhouses, read_install_state, unfinished_transaction
from wheelhouse.install.transaction import Transaction, clean_leftovers, journal_path, recover

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def site(venv: Path) -> Path:
    return venv / "lib" / PY / "site-packages"


def wh(*args, **kw):
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300, **kw)


def installed(house: Path, venv: Path, compile: bool = False) -> None:
    """What `wh install HOUSE --venv VENV [--compile]` does, in this process: the setup before the command under
    test (a killed or failing one, which runs as a real `wh`)."""
    install_wheelhouses([house], InstallOptions(venv=venv, compile=compile))


def _stack(folder: Path, version: str = "1.0") -> list[Path]:
    """Three wheels, ~90 files: enough for a kill in the middle of extraction."""
    return [
        make_wheel(folder, "big", version, modules={f"big/m{i}.py": f"X = {i}  # {version}\n" for i in range(80)},
                   entry_points={"console_scripts": {"big-run": "big:main"}}),
        make_wheel(folder, "upa", version, modules={"upa/__init__.py": f"V = '{version}'\n"}),
        make_wheel(folder, "lib", version, modules={"lib/__init__.py": f"L = '{version}'\n"},
                   files={f"lib-{version}.data/data/share/lib.txt": "data\n"}),
    ]


def _corrupt_member(wheel: Path, member: str) -> Path:
    """Change one member's stored bytes but keep its CRC-32 and RECORD: the wheel passes the lock's hash
    (made after) and fails extraction, in the middle of a batch (the bytes are not the ones the archive
    describes: what a bad re-read of the medium gives)."""
    data = {}
    with zipfile.ZipFile(wheel) as zf:
        for n in zf.namelist():
            data[n] = zf.read(n)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in data.items():
            zf.writestr(n, d, compress_type=zipfile.ZIP_STORED if n == member else zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(member)
    raw = bytearray(wheel.read_bytes())
    at = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + info.file_size - 2
    raw[at] = ord("#") if raw[at] != ord("#") else ord("!")  # same size, other bytes
    wheel.write_bytes(bytes(raw))
    return wheel


KILL_POINTS = ["install.journal-written", "install.backed-up", "install.file.1", "install.file.45",
               "install.files-done", "install.before-state", "install.before-commit"]


@pytest.mark.parametrize("point", KILL_POINTS)
def test_killed_fresh_install_is_never_taken_as_installed_and_the_next_run_repairs_it(tmp_path, point):
    house = make_wheelhouse(tmp_path / "house", _stack(tmp_path / "w"))
    venv = tmp_path / "venv"
    killed = run_with_fault(["install", house, "--venv", venv], point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # What a doctor asks: the journal is there, its process is gone; nothing is recorded as installed.
    unfinished = unfinished_transaction(site(venv))
    assert unfinished is not None and not unfinished.running and "did not finish" in unfinished.describe()
    assert read_install_state(site(venv))["packages"] == {}
    r = wh("install", house, "--venv", venv)
    assert r.returncode == 0, r.stderr
    assert "note: rolled back an unfinished install" in r.stderr and "did not finish" in r.stderr
    assert "still running" not in r.stderr
    assert "installed 3, already there 0" in r.stderr
    assert lock_problems(venv / "bin" / "python", site(venv), house) == []
    assert unfinished_transaction(site(venv)) is None
    assert not (site(venv) / ".wh" / "txn").exists()
    run = subprocess.run([venv / "bin" / "python", "-c", "import big.m79, upa, lib; print(upa.V)"],
                         capture_output=True, text=True)
    assert run.stdout.strip() == "1.0", run.stderr


def test_killed_after_the_commit_is_complete_and_leftovers_are_cleaned(tmp_path):
    house = make_wheelhouse(tmp_path / "house", _stack(tmp_path / "w"))
    venv = tmp_path / "venv"
    assert run_with_fault(["install", house, "--venv", venv], "install.committed").returncode == -signal.SIGKILL
    assert unfinished_transaction(site(venv)) is None  # committed: the record vouches, rightly
    assert lock_problems(venv / "bin" / "python", site(venv), house) == []
    assert (site(venv) / ".wh" / "txn").exists()  # the backups folder it had no time to remove
    r = wh("install", house, "--venv", venv)
    assert r.returncode == 0 and "installed 0, already there 3" in r.stderr, r.stderr
    assert not (site(venv) / ".wh" / "txn").exists()


@pytest.mark.parametrize("point", ["install.backed-up", "install.file.30", "install.before-commit"])
def test_killed_upgrade_is_rolled_back_to_the_exact_previous_tree(tmp_path, point):
    old = make_wheelhouse(tmp_path / "old", _stack(tmp_path / "w1", "1.0"))
    new = make_wheelhouse(tmp_path / "new", _stack(tmp_path / "w2", "2.0"))
    venv = tmp_path / "venv"
    installed(old, venv, compile=True)
    before = tree_listing(venv)
    assert run_with_fault(["install", new, "--venv", venv], point).returncode == -signal.SIGKILL
    assert tree_listing(venv) != before
    assert recover(site(venv)) is not None
    assert tree_listing(venv) == before  # byte for byte, bytecode and installed.json included
    r = wh("install", new, "--venv", venv)
    assert r.returncode == 0, r.stderr
    assert lock_problems(venv / "bin" / "python", site(venv), new) == []


def test_failed_install_leaves_every_byte_as_it_was_even_files_another_dist_owns(tmp_path):
    """issue 11.2: two wheels ship upa/__init__.py; the batch fails; upa's file must survive the rollback."""
    venv = tmp_path / "venv"
    first = make_wheelhouse(tmp_path / "first", [make_wheel(tmp_path / "w", "upa", "1.0",
                                                            modules={"upa/__init__.py": "OWNER = 'upa'\n"})])
    installed(first, venv, compile=True)
    clash = make_wheel(tmp_path / "w2", "upb", "1.0", modules={"upa/__init__.py": "OWNER = 'upb'\n", "upb.py": ""})
    bad = _corrupt_member(make_wheel(tmp_path / "w2", "zbad", "1.0", modules={"zbad.py": "Z = 1\n"}), "zbad.py")
    second = make_wheelhouse(tmp_path / "second", [clash, bad])
    before = tree_listing(venv)
    r = wh("install", second, "--venv", venv)
    assert r.returncode == 1 and "zbad.py does not match its CRC-32" in r.stderr, r.stderr
    assert tree_listing(venv) == before
    assert (site(venv) / "upa" / "__init__.py").read_text() == "OWNER = 'upa'\n"


def test_a_crash_during_a_rollback_is_finished_by_the_next_run(tmp_path):
    venv = tmp_path / "venv"
    installed(make_wheelhouse(tmp_path / "a", _stack(tmp_path / "w1", "1.0")), venv)
    before = tree_listing(venv)
    bad = _corrupt_member(make_wheel(tmp_path / "w2", "zbad", "1.0", modules={"zbad.py": "Z = 1\n"}), "zbad.py")
    house = make_wheelhouse(tmp_path / "b", [*_stack(tmp_path / "w2", "2.0"), bad])
    assert run_with_fault(["install", house, "--venv", venv, "-j", "1"],
                          "install.rollback-step").returncode == -signal.SIGKILL
    assert unfinished_transaction(site(venv)) is not None
    recover(site(venv))
    assert tree_listing(venv) == before


def test_transaction_begin_moves_aside_and_rollback_restores(tmp_path):
    site_dir = tmp_path / "site"
    (site_dir / "pkg").mkdir(parents=True)
    (site_dir / "pkg" / "a.py").write_text("old\n")
    txn = Transaction(site_dir, ["x.whl"])
    txn.begin([str(site_dir / "pkg" / "a.py"), str(site_dir / "new" / "b.py")], [str(site_dir / "new")])
    assert journal_path(site_dir).exists() and not (site_dir / "pkg" / "a.py").exists()
    (site_dir / "new").mkdir()
    (site_dir / "new" / "b.py").write_text("new\n")
    (site_dir / "pkg" / "a.py").write_text("replaced\n")
    txn.rollback()
    assert (site_dir / "pkg" / "a.py").read_text() == "old\n"
    assert not (site_dir / "new").exists() and not (site_dir / ".wh").exists()


def test_transaction_commit_forgets_the_journal_and_the_backups(tmp_path):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "a.py").write_text("old\n")
    txn = Transaction(site_dir)
    txn.begin([str(site_dir / "a.py")])
    (site_dir / "a.py").write_text("new\n")
    txn.commit()
    assert (site_dir / "a.py").read_text() == "new\n"
    assert not (site_dir / ".wh").exists() and recover(site_dir) is None


def test_leftover_trash_backups_and_half_written_records_are_cleaned(tmp_path):
    site_dir = tmp_path / "site"
    for d in (".wh/trash/123-1/0-old.py", ".wh/txn/456-2/0", ".wh/.installed.json.ab12.tmp",
              ".wh/.journal.1-2.tmp", ".wh/.links.json.cd34.tmp"):
        (site_dir / d).parent.mkdir(parents=True, exist_ok=True)
        (site_dir / d).write_text("x")
    (site_dir / ".wh" / "installed.json").write_text("{}")
    assert clean_leftovers(site_dir) == 4
    # another tool's temp file (links runs without the install lock) is not ours to remove
    assert sorted(p.name for p in (site_dir / ".wh").iterdir()) == [".links.json.cd34.tmp", "installed.json"]


def test_killed_while_writing_installed_json_leaves_nothing_after_recovery(tmp_path):
    """Seen in bench/soak.py: a kill inside write_atomic left .wh/.installed.json.XXXX.tmp behind."""
    venv = tmp_path / "venv"
    installed(make_wheelhouse(tmp_path / "a", _stack(tmp_path / "w1", "1.0")), venv)
    before = tree_listing(venv)
    (site(venv) / ".wh" / ".installed.json.k1ll3d.tmp").write_text("")  # what the kill leaves
    (site(venv) / ".wh" / "txn" / "99-1").mkdir(parents=True)  # made by begin just before its journal
    assert recover(site(venv)) is None
    assert tree_listing(venv) == before


def test_a_failing_wheelhouse_patch_leaves_the_environment_as_it_was(tmp_path):
    """issue 11.16: a patch that fails during `wh install` removes the venv this run created, and in an
    existing environment rolls the wheels back."""
    w = make_wheel(tmp_path / "w", "tinyengine", "1.0", modules={"tinyengine/__init__.py": "",
                                                                 "tinyengine/kernel.py": "X = 1\n"})
    house = make_wheelhouse(tmp_path / "house", [w], patches=["patches/fix/spec.toml"])
    spec_dir = house / "patches" / "fix"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel_fix.py").write_text("X = 2\n")
    import hashlib
    sha = lambda t: hashlib.sha256(t.encode()).hexdigest()  # noqa: E731
    payload_sha = sha("X = 2\n")
    (spec_dir / "spec.toml").write_text(  # the before hash is not the installed file's: the patch refuses
        '[patch]\nname = "tiny"\ndistribution = "tinyengine"\nfile = "tinyengine/kernel.py"\n'
        f'payload = "kernel_fix.py"\nbefore-sha256 = ["{sha("something else")}"]\npayload-sha256 = "{payload_sha}"\n')
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv)
    assert r.returncode != 0 and "drifted" in r.stderr, r.stderr
    assert not venv.exists()
    other = make_wheelhouse(tmp_path / "plain", [make_wheel(tmp_path / "w2", "plain", "1.0", modules={"plain.py": ""})])
    installed(other, venv)
    before = tree_listing(venv)
    with pytest.raises(Exception, match="drifted"):
        install_wheelhouses([house], InstallOptions(venv=venv))
    assert tree_listing(venv) == before


def test_a_second_journal_never_clobbers_an_unfinished_one_and_the_uninstaller_rolls_it_back_first(tmp_path):
    from wheelhouse.install.transaction import UnfinishedInstallError
    from wheelhouse.install.uninstall import remove_distribution
    from wheelhouse.target.interpreter import inspect_interpreter

    venv = tmp_path / "venv"
    installed(make_wheelhouse(tmp_path / "a", _stack(tmp_path / "w1", "1.0")), venv)
    before = tree_listing(venv)
    new = make_wheelhouse(tmp_path / "b", _stack(tmp_path / "w2", "2.0"))
    assert run_with_fault(["install", new, "--venv", venv], "install.file.20").returncode == -signal.SIGKILL
    with pytest.raises(UnfinishedInstallError, match="did not finish"):
        Transaction(site(venv)).begin([str(site(venv) / "x.py")])
    # `wh drop` with no pip uses this uninstaller: the killed upgrade is rolled back, then lib goes.
    scheme = inspect_interpreter(venv / "bin" / "python").scheme()
    assert remove_distribution("lib", scheme) == ["1.0"]
    assert unfinished_transaction(site(venv)) is None
    sp = f"lib/{PY}/site-packages/"
    lib_files = (sp + "lib/", sp + "lib-1.0.dist-info", sp + ".wh", "share")
    kept = [e for e in before if not (e[0] + "/").startswith(lib_files) and e[0] != sp + "lib"]
    assert [e for e in tree_listing(venv) if not (e[0] + "/").startswith(lib_files)] == kept
    assert (site(venv) / "upa" / "__init__.py").read_text() == "V = '1.0'\n"
    assert not (site(venv) / "lib").exists() and not list(site(venv).glob("lib-*.dist-info"))


def test_killed_pip_install_is_rolled_back_too(tmp_path):
    house = make_wheelhouse(tmp_path / "house", _stack(tmp_path / "w"))
    venv = tmp_path / "venv"
    assert run_with_fault(["install", house, "--venv", venv, "--installer", "pip"],
                          "install.backed-up").returncode == -signal.SIGKILL
    assert unfinished_transaction(site(venv)) is not None
    r = wh("install", house, "--venv", venv, "--installer", "pip")
    assert r.returncode == 0, r.stderr
    assert lock_problems(venv / "bin" / "python", site(venv), house) == []


@pytest.mark.parametrize("point", ["install.journal-written", "install.file.30", "install.before-state"])
def test_a_full_disk_mid_install_is_one_clear_error_and_changes_nothing(tmp_path, point):
    venv = tmp_path / "venv"
    installed(make_wheelhouse(tmp_path / "a", _stack(tmp_path / "w1", "1.0")), venv)
    before = tree_listing(venv)
    new = make_wheelhouse(tmp_path / "b", _stack(tmp_path / "w2", "2.0"))
    r = run_with_fault(["install", new, "--venv", venv], point, action="enospc")
    assert r.returncode == 1, r.stderr
    assert "No space left on device" in r.stderr and "hint:" in r.stderr and "Traceback" not in r.stderr
    assert tree_listing(venv) == before


def test_when_a_later_patch_fails_the_earlier_ones_are_reverted_with_the_wheels(tmp_path):
    import hashlib

    sha = lambda t: hashlib.sha256(t.encode()).hexdigest()  # noqa: E731
    venv = tmp_path / "venv"
    base = make_wheel(tmp_path / "w0", "baseeng", "1.0", modules={"baseeng/__init__.py": "", "baseeng/k.py": "A = 1\n"})
    installed(make_wheelhouse(tmp_path / "first", [base]), venv)
    before = tree_listing(venv)
    new = make_wheel(tmp_path / "w1", "neweng", "1.0", modules={"neweng/__init__.py": "", "neweng/k.py": "B = 1\n"})
    house = make_wheelhouse(tmp_path / "house", [base, new], patches=["patches/a/spec.toml", "patches/b/spec.toml"])
    for name, dist, file, old, payload, before_sha in (
            ("a", "baseeng", "baseeng/k.py", "A = 1\n", "A = 2\n", sha("A = 1\n")),  # applies
            ("b", "neweng", "neweng/k.py", "B = 1\n", "B = 2\n", sha("drifted"))):  # refuses
        d = house / "patches" / name
        d.mkdir(parents=True)
        (d / "payload.py").write_text(payload)
        (d / "spec.toml").write_text(
            f'[patch]\nname = "{name}"\ndistribution = "{dist}"\nfile = "{file}"\npayload = "payload.py"\n'
            f'before-sha256 = ["{before_sha}"]\npayload-sha256 = "{sha(payload)}"\n')
    r = wh("install", house, "--venv", venv)
    assert r.returncode != 0 and "drifted" in r.stderr, r.stderr
    assert tree_listing(venv) == before  # baseeng/k.py unpatched again, no .wh/patches/a, no neweng


def test_killed_just_before_the_commit_installed_json_still_names_the_previous_set(tmp_path):
    """The record of the new set lands with the commit: a kill at install.before-commit leaves the file on disk
    naming what is (still, after the rollback) installed, never the set that was being installed."""
    import json

    old = make_wheelhouse(tmp_path / "old", _stack(tmp_path / "w1", "1.0"))
    new = make_wheelhouse(tmp_path / "new", _stack(tmp_path / "w2", "2.0"))
    venv = tmp_path / "venv"
    installed(old, venv)
    record = site(venv) / ".wh" / "installed.json"
    before = record.read_text()
    assert run_with_fault(["install", new, "--venv", venv], "install.before-commit").returncode == -signal.SIGKILL
    assert record.read_text() == before
    assert {p["version"] for p in json.loads(record.read_text())["packages"].values()} == {"1.0"}
    r = wh("install", new, "--venv", venv)
    assert r.returncode == 0, r.stderr
    assert {p["version"] for p in json.loads(record.read_text())["packages"].values()} == {"2.0"}
    assert not list((site(venv) / ".wh").glob(".installed.json.*"))


@pytest.mark.parametrize("linked", [".wh", ".wh/trash", ".wh/txn"])
def test_a_state_folder_that_is_a_link_out_is_refused_and_nothing_it_points_to_is_touched(tmp_path, linked):
    """Hostile round 9: `.wh/trash` pointed at another disk was emptied by `wh drop --list` (the sweep of a killed
    run's leftovers followed the link), and installs wrote their backups there."""
    venv = tmp_path / "venv"
    house = make_wheelhouse(tmp_path / "a", _stack(tmp_path / "w1", "1.0"))
    installed(house, venv)
    outside = tmp_path / "projects"
    state = site(venv) / ".wh"
    if linked == ".wh":
        state.rename(outside)  # wh's records moved elsewhere and linked back: what they hold is kept there too
    for name in ("trash", "txn"):
        (outside / name / "thesis").mkdir(parents=True, exist_ok=True)
        (outside / name / "thesis" / "chapter1.tex").write_text("years of work")
    (outside / ".installed.json.mine.tmp").write_text("mine")  # a name the sweep removes inside .wh
    if linked != ".wh":
        shutil.rmtree(site(venv) / linked, ignore_errors=True)
    (site(venv) / linked).symlink_to(outside / Path(linked).name if linked != ".wh" else outside)
    before, venv_before = tree_listing(outside), tree_listing(venv)
    house2 = make_wheelhouse(tmp_path / "b", _stack(tmp_path / "w2", "2.0"))
    for args in (["drop", "--python", venv / "bin" / "python", "--list"],
                 ["install", house2, "--venv", venv],
                 ["drop", "--python", venv / "bin" / "python"],
                 ["drop", "--python", venv / "bin" / "python", "--restore", "upa"]):
        proc = wh(*args)
        assert tree_listing(outside) == before, args
        assert tree_listing(venv) == venv_before, args
        if args[-1] == "--list" or args[0] == "install" or "--restore" in args:
            assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
            assert f"{site(venv) / linked} is a symbolic link" in proc.stderr and "rm " in proc.stderr, proc.stderr
