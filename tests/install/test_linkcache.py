"""The verified extraction cache end to end: real wheelhouses, real venvs, the real CLI in a subprocess.

A second install of the same wheels into another venv hardlinks their files from the cache; a
cache file or manifest that changed is never what lands in a venv; a kill while linking is
rolled back; a cache on another filesystem is not used; installs at the same time stay safe.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from faults import run_with_fault
from nvidia_fixtures import make_wheelhouse, tree_listing
from wheelmaker import make_wheel

from wheelhouse.install.transaction import recover

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"
LIB_SRC = "VALUE = 42\n" + "# padding\n" * 50


def site(venv: Path) -> Path:
    return venv / "lib" / PY / "site-packages"


@pytest.fixture
def env(tmp_path):
    """The environment for wh: a private cache folder (the extraction cache lives in ``unpacked/``), the
    cache turned on (it is opt-in)."""
    return {**os.environ, "WH_CACHE_DIR": str(tmp_path / "cache"), "WH_LINK_CACHE": "1"}


def wh(env, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def install(env, house, venv, *extra) -> dict:
    r = wh(env, "install", house, "--venv", venv, "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def house(tmp_path):
    """app (a console script, a .data script, data, a shipped .pyc) and lib (several modules)."""
    w = tmp_path / "w"
    app = make_wheel(
        w, "app", "1.0", modules={"app/__init__.py": 'def main():\n    print("hello from app")\n'},
        entry_points={"console_scripts": {"app-hello": "app:main"}},
        files={"app-1.0.data/scripts/app-raw": "#!python\nimport app; app.main()\n",
               "app-1.0.data/data/share/app/app.txt": "data file\n",
               "app/__pycache__/shipped.cpython-399.pyc": b"\x00" * 16},
    )
    lib = make_wheel(w, "lib", "2.0", modules={"lib/__init__.py": LIB_SRC, "lib/more.py": "MORE = 1\n",
                                               "lib/sub/__init__.py": "SUB = 2\n"})
    return make_wheelhouse(tmp_path / "house", [app, lib])


def entry(env, house, wheel: str) -> Path:
    sha = sha256(house / "wheels" / wheel)
    return Path(env["WH_CACHE_DIR"]) / "unpacked" / sha[:2] / sha


LIB = "lib-2.0-py3-none-any.whl"
APP = "app-1.0-py3-none-any.whl"


def wheel_bytes(house: Path, wheel: str, member: str) -> bytes:
    with zipfile.ZipFile(house / "wheels" / wheel) as zf:
        return zf.read(member)


def assert_lib_right(house: Path, venv: Path) -> None:
    """Every file of lib in ``venv`` is the wheel's, and it imports."""
    for member in ("lib/__init__.py", "lib/more.py", "lib/sub/__init__.py", "lib-2.0.dist-info/METADATA"):
        assert (site(venv) / member).read_bytes() == wheel_bytes(house, LIB, member), member
    r = subprocess.run([venv / "bin" / "python", "-c", "import lib, lib.sub, lib.more; print(lib.VALUE)"],
                       capture_output=True, text=True)
    assert r.stdout.strip() == "42", r.stderr


def test_second_install_links_from_the_cache_and_imports(house, tmp_path, env):
    a, b = tmp_path / "a", tmp_path / "b"
    first = install(env, house, a)
    assert first["linked"] == {"wheels": 0, "files": 0}
    cached = entry(env, house, LIB) / "files" / "lib" / "__init__.py"
    assert cached.stat().st_ino == (site(a) / "lib" / "__init__.py").stat().st_ino  # populated by link, not copy

    second = install(env, house, b)
    assert second["linked"] == {"wheels": 2, "files": 10}  # app: module, data, 3 dist-info; lib: 5
    assert {d["name"]: d["linked_files"] for d in second["installed"]}["lib"] == 5  # 3 modules, METADATA, WHEEL
    st = (site(b) / "lib" / "__init__.py").stat()
    assert st.st_ino == cached.stat().st_ino and st.st_nlink == 3  # the cache, a and b
    assert_lib_right(house, b)
    r = subprocess.run([b / "bin" / "app-hello"], capture_output=True, text=True)
    assert r.stdout.strip() == "hello from app"
    # What differs per venv is written per venv: launchers, .data scripts (shebang), bytecode, the install's own files.
    for rel in ("bin/app-hello", "bin/app-raw"):
        assert (a / rel).stat().st_ino != (b / rel).stat().st_ino
        assert (b / rel).stat().st_nlink == 1
        assert str(b / "bin" / "python") in (b / rel).read_text().splitlines()[0]
    for name in ("INSTALLER", "REQUESTED", "RECORD"):
        assert (site(b) / "app-1.0.dist-info" / name).stat().st_nlink == 1
    assert (site(b) / "app" / "__pycache__" / "shipped.cpython-399.pyc").stat().st_nlink == 1
    # The RECORD still lists what is installed, with the wheel's hashes.
    assert "lib/__init__.py," in (site(b) / "lib-2.0.dist-info" / "RECORD").read_text()
    r = wh(env, "install", house, "--venv", tmp_path / "c")  # people read it too
    assert r.returncode == 0 and "linked 10 files of 2 wheels from the extraction cache" in r.stderr, r.stderr


def test_off_by_default_and_no_link_cache_writes_everything(house, tmp_path, env):
    default = {k: v for k, v in env.items() if k != "WH_LINK_CACHE"}
    install(default, house, tmp_path / "a")
    install(env, house, tmp_path / "b", "--no-link-cache")
    assert not (Path(env["WH_CACHE_DIR"]) / "unpacked").exists()
    install(default, house, tmp_path / "c", "--link-cache")  # the flag alone turns it on
    report = install(env, house, tmp_path / "d", "--no-link-cache")  # and off, over the variable
    assert report["linked"]["files"] == 0
    assert (site(tmp_path / "d") / "lib" / "__init__.py").stat().st_nlink == 1
    assert install(default, house, tmp_path / "e")["linked"]["files"] == 0
    assert install(env, house, tmp_path / "f")["linked"]["wheels"] == 2


def test_an_in_place_write_makes_the_next_install_extract_that_wheel_afresh(house, tmp_path, env):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    install(env, house, a)
    target = site(a) / "lib" / "__init__.py"
    with open(target, "r+b") as fh:  # an editor saving in place: the cache's inode is this one
        fh.write(b"VALUE = 13")
    report = install(env, house, b)
    assert_lib_right(house, b)
    assert (site(b) / "lib" / "__init__.py").stat().st_ino != target.stat().st_ino
    linked = {d["name"]: d["linked_files"] for d in report["installed"]}
    assert linked["app"] > 0 and linked["lib"] < 5
    # The entry was replaced by b's checked files: c links all of lib again, and gets the right bytes.
    fresh = entry(env, house, LIB) / "files" / "lib" / "__init__.py"
    assert fresh.read_bytes() == wheel_bytes(house, LIB, "lib/__init__.py")
    report = install(env, house, c)
    assert {d["name"]: d["linked_files"] for d in report["installed"]}["lib"] == 5
    assert_lib_right(house, c)


def _tamper_file(e: Path, how: str) -> None:
    f = e / "files" / "lib" / "__init__.py"
    if how == "replaced":  # same size, other bytes, another inode
        tmp = f.with_name("x")
        tmp.write_bytes(b"VALUE = 13\n".ljust(f.stat().st_size, b"#"))
        os.replace(tmp, f)
    elif how == "symlink":
        evil = e.parent / "evil.py"
        evil.write_text("VALUE = 13\n")
        f.unlink()
        f.symlink_to(evil)
    elif how == "chmod":
        f.chmod(0o777)
    elif how == "appended":  # a longer file, and the manifest made to agree with it
        with open(f, "ab") as fh:
            fh.write(b"VALUE = 13\n")
        m = json.loads((e / "manifest.json").read_text())
        st = f.stat()
        m["files"]["lib/__init__.py"] = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, 0o644]
        (e / "manifest.json").write_text(json.dumps(m))


def _tamper_manifest(e: Path, how: str) -> None:
    path = e / "manifest.json"
    m = json.loads(path.read_text())
    rows = m["files"]
    if how == "torn":
        path.write_bytes(path.read_bytes()[:40])
        return
    if how == "swapped":  # two files' rows exchanged: each name now claims the other's inode
        x, y = rows["lib/__init__.py"], rows["lib/more.py"]
        rows["lib/__init__.py"], rows["lib/more.py"] = y, x
    elif how == "inode":
        rows["lib/__init__.py"][2] += 1
    elif how == "other-wheel":
        m["sha256"] = "0" * 64
    elif how == "escaping":  # a row outside the entry: names come from the wheel, never from the manifest
        rows["../../../evil.py"] = rows.pop("lib/__init__.py")
    elif how == "types":
        rows["lib/__init__.py"] = ["1", 2, 3, 4, 5]
    path.write_text(json.dumps(m))


@pytest.mark.parametrize("how", ["replaced", "symlink", "chmod", "appended"])
def test_a_changed_cache_file_never_lands_in_a_venv(house, tmp_path, env, how):
    install(env, house, tmp_path / "a")
    _tamper_file(entry(env, house, LIB), how)
    install(env, house, tmp_path / "b")
    assert_lib_right(house, tmp_path / "b")
    assert (site(tmp_path / "b") / "lib" / "__init__.py").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("how", ["torn", "swapped", "inode", "other-wheel", "escaping", "types"])
def test_a_tampered_manifest_never_yields_a_wrong_file(house, tmp_path, env, how):
    install(env, house, tmp_path / "a")
    _tamper_manifest(entry(env, house, LIB), how)
    report = install(env, house, tmp_path / "b")
    assert_lib_right(house, tmp_path / "b")
    assert not (tmp_path / "evil.py").exists()
    # the entry is usable again afterwards (replaced, or never the problem)
    install(env, house, tmp_path / "c")
    assert_lib_right(house, tmp_path / "c")
    assert report["linked"]["files"] >= 0


def _flip_byte(wheel: Path, at: int = 100) -> None:
    """One byte of the wheel changed in place: its sha256 is no longer the lock's."""
    data = bytearray(wheel.read_bytes())
    data[at] ^= 0xFF
    wheel.write_bytes(bytes(data))


def test_a_wrong_wheel_is_refused_even_when_its_files_are_cached(house, tmp_path, env):
    """The lock's sha256 is still checked for a linked wheel: the wheelhouse on the box must be the lock's."""
    install(env, house, tmp_path / "a")
    _flip_byte(house / "wheels" / LIB)
    r = wh(env, "install", house, "--venv", tmp_path / "b")
    assert r.returncode == 1 and LIB in r.stderr
    assert not (tmp_path / "b").exists()


def test_kill_while_linking_is_rolled_back_to_the_venv_as_before(house, tmp_path, env):
    install(env, house, tmp_path / "a")
    b = tmp_path / "b"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", b], check=True)
    before = tree_listing(b)
    cached = entry(env, house, LIB) / "files" / "lib" / "__init__.py"
    proc = run_with_fault(["install", house, "--venv", b], "install.link.3", env=env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert tree_listing(b) != before  # links were made, and the journal says so
    recover(site(b))
    assert tree_listing(b) == before
    assert cached.stat().st_nlink == 2  # the cache and a: b's links are gone, the entry is intact
    report = install(env, house, b)
    assert report["linked"]["wheels"] == 2
    assert_lib_right(house, b)


def test_kill_while_adding_an_entry_leaves_no_entry_and_the_next_run_adds_it(house, tmp_path, env):
    proc = run_with_fault(["install", house, "--venv", tmp_path / "a"], "install.linkcache.before-rename", env=env)
    assert proc.returncode == -signal.SIGKILL
    assert not entry(env, house, LIB).exists() and not entry(env, house, APP).exists()
    leftovers = Path(env["WH_CACHE_DIR"]) / "unpacked" / ".tmp"
    assert any(leftovers.iterdir())
    install(env, house, tmp_path / "b")  # sweeps the dead run's folder, adds the entries
    assert not [p for p in leftovers.iterdir() if str(os.getpid()) not in p.name]
    report = install(env, house, tmp_path / "c")
    assert report["linked"]["wheels"] == 2
    assert_lib_right(house, tmp_path / "c")


def _other_filesystem(tmp_path: Path) -> Path | None:
    for root in (Path("/dev/shm"), Path("/run/user") / str(os.getuid())):
        try:
            if root.is_dir() and os.access(root, os.W_OK) and root.stat().st_dev != tmp_path.stat().st_dev:
                return root
        except OSError:
            continue
    return None


def test_a_cache_on_another_filesystem_is_silently_not_used(house, tmp_path, env):
    other = _other_filesystem(tmp_path)
    if other is None:
        pytest.skip("no writable folder on another filesystem")
    cache = other / f"wh-linkcache-test-{os.getpid()}"
    env = {**env, "WH_CACHE_DIR": str(cache)}
    try:
        install(env, house, tmp_path / "a")
        report = install(env, house, tmp_path / "b")
        assert report["linked"]["files"] == 0
        assert_lib_right(house, tmp_path / "b")
    finally:
        subprocess.run(["rm", "-rf", str(cache)], check=False)


def test_two_installs_at_once_populate_and_link_safely(house, tmp_path, env):
    venvs = [tmp_path / f"v{i}" for i in range(4)]
    with ThreadPoolExecutor(2) as pool:  # both find no entry and both add one: one rename wins
        results = list(pool.map(lambda v: wh(env, "install", house, "--venv", v), venvs[:2]))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    assert not any((Path(env["WH_CACHE_DIR"]) / "unpacked" / ".tmp").iterdir())
    with ThreadPoolExecutor(2) as pool:  # both link from the same entry
        results = list(pool.map(lambda v: wh(env, "install", house, "--venv", v, "--json"), venvs[2:]))
    assert all(json.loads(r.stdout)["linked"]["wheels"] == 2 for r in results), [r.stderr for r in results]
    for v in venvs:
        assert_lib_right(house, v)


def test_a_batch_with_a_wrong_wheel_adds_no_entry(house, tmp_path, env):
    """Entries are put in place only once every wheel of the batch had the lock's sha256."""
    _flip_byte(house / "wheels" / APP)
    r = wh(env, "install", house, "--venv", tmp_path / "a")
    assert r.returncode == 1 and APP in r.stderr
    unpacked = Path(env["WH_CACHE_DIR"]) / "unpacked"
    assert not list(unpacked.glob("*/*/manifest.json"))  # not even lib's, whose bytes were right
    assert not (unpacked / ".tmp").exists() or not any((unpacked / ".tmp").iterdir())


# ---- a wheel file unchanged since its sha256 matched is not read again -----------------------------------

HASHING = "install.wheel-sha256"  # the point where an install reads a whole wheel for the lock's sha256


def test_a_wheel_file_unchanged_since_its_hash_matched_is_not_read_again(house, tmp_path, env):
    """The entry remembers the identity of the wheel file whose sha256 matched; the next install passes it
    without reading it whole (an I/O error injected where a wheel is hashed does not happen)."""
    failed = run_with_fault(["install", house, "--venv", tmp_path / "x"], HASHING, "eio", env=env)
    assert failed.returncode != 0  # the point is reached when a wheel is hashed
    install(env, house, tmp_path / "a")
    remembered = json.loads((entry(env, house, LIB) / "manifest.json").read_text())["wheel_files"]
    st = (house / "wheels" / LIB).stat()
    assert remembered == [[st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]]
    warm = run_with_fault(["install", house, "--venv", tmp_path / "b", "--json"], HASHING, "eio", env=env)
    assert warm.returncode == 0, warm.stderr
    assert json.loads(warm.stdout)["linked"]["wheels"] == 2
    assert_lib_right(house, tmp_path / "b")


def _flip_in_place_keeping_size_and_mtime(wheel: Path, at: int = 100) -> None:
    st = wheel.stat()
    with open(wheel, "r+b") as fh:
        fh.seek(at)
        old = fh.read(1)
        fh.seek(at)
        fh.write(bytes([old[0] ^ 0xFF]))
    os.utime(wheel, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back: only the ctime says it changed


def _replace_by_rename_keeping_size_and_mtime(wheel: Path, at: int = 100) -> None:
    st = wheel.stat()
    data = bytearray(wheel.read_bytes())
    data[at] ^= 0xFF
    tmp = wheel.with_name("tampered.tmp")
    tmp.write_bytes(bytes(data))
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, wheel)  # another inode at the path


@pytest.mark.parametrize("tamper", [_flip_in_place_keeping_size_and_mtime, _replace_by_rename_keeping_size_and_mtime],
                         ids=["in-place-mtime-set-back", "renamed-over"])
def test_a_wheel_changed_since_its_hash_matched_is_hashed_and_refused(house, tmp_path, env, tamper):
    install(env, house, tmp_path / "a")
    wheel = house / "wheels" / LIB
    size, mtime = wheel.stat().st_size, wheel.stat().st_mtime_ns
    tamper(wheel)
    assert (wheel.stat().st_size, wheel.stat().st_mtime_ns) == (size, mtime)
    r = wh(env, "install", house, "--venv", tmp_path / "b")
    assert r.returncode == 1 and LIB in r.stderr and "sha256" in r.stderr, r.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("how", ["touch", "chmod"])
def test_a_touched_wheel_is_hashed_again_then_remembered(house, tmp_path, env, how):
    install(env, house, tmp_path / "a")
    wheel = house / "wheels" / LIB
    if how == "touch":
        os.utime(wheel)
    else:
        wheel.chmod(0o600)
    again = run_with_fault(["install", house, "--venv", tmp_path / "b"], HASHING, "eio", env=env)
    assert again.returncode != 0  # its identity moved: it is read whole again
    install(env, house, tmp_path / "c")  # hashed, right: the entry learns the file as it is now
    warm = run_with_fault(["install", house, "--venv", tmp_path / "d"], HASHING, "eio", env=env)
    assert warm.returncode == 0, warm.stderr
    assert_lib_right(house, tmp_path / "d")


def test_a_copy_of_the_wheelhouse_is_hashed_once_then_trusted_too(house, tmp_path, env):
    install(env, house, tmp_path / "a")
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", house, copy], check=True)  # other inodes, the same sha256s
    assert run_with_fault(["install", copy, "--venv", tmp_path / "b"], HASHING, "eio", env=env).returncode != 0
    install(env, copy, tmp_path / "c")
    for h, v in ((house, "d"), (copy, "e")):  # both files remembered
        r = run_with_fault(["install", h, "--venv", tmp_path / v], HASHING, "eio", env=env)
        assert r.returncode == 0, r.stderr


def test_linked_files_get_no_digest_entry_so_the_doctor_hashes_what_it_did_not_read(house, tmp_path, env):
    """Hostile round 9: a --link-cache install wrote the stack check's digest entries for files it linked and never
    read; one edited in place (same size, its mtime set back) in another venv then passed `stack:files` unhashed."""
    a, b = tmp_path / "a", tmp_path / "b"
    install(env, house, a)
    target = site(a) / "lib" / "__init__.py"
    st = target.stat()
    evil = b"VALUE = 66" + target.read_bytes()[len(b"VALUE = 66"):]
    with open(target, "r+b") as fh:
        fh.write(evil)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    install(env, house, b)
    if (site(b) / "lib" / "__init__.py").read_bytes() != evil:
        pytest.skip("the link cache extracted lib afresh: nothing linked carries the edit")
    digests = json.loads((site(b) / ".wh" / "digests.json").read_text())
    assert "lib/__init__.py" not in json.dumps(digests)
    r = wh({k: v for k, v in env.items() if k != "WH_LINK_CACHE"}, "doctor", "--python", b / "bin" / "python",
           "--check", "stack:files", "--json")
    [res] = json.loads(r.stdout)["results"]
    assert r.returncode == 1 and res["verdict"] == "fail" and "lib/__init__.py" in res["evidence"], res
