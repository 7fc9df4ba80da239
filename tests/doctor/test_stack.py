"""stack: every locked distribution installed at its version, every RECORD file with its sha256 and size;
judged from a digest cache keyed by file identity, so an unchanged tree hashes nothing (issue 28.1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _ext, _tags, have_toolchain, install_wheel, site_packages
from carry_fixtures import PAYLOAD, staged_wheelhouse
from index_fixtures import pyindex  # noqa: F401  (fixture)
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
CONSOLE = "def render(x):\n    return '[' + str(x) + ']'\n" * 20


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """The doctor's digest cache of a foreign site folder goes to wh's user cache: this test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def wh(*args, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")} | {"NO_COLOR": "1", "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def doctor(py: Path, *extra: str, check: str = "stack") -> tuple[int, dict]:
    r = wh("doctor", "--python", py, "--check", check, "--json", *extra)
    assert r.stdout, r.stderr
    return r.returncode, {c["id"]: c for c in json.loads(r.stdout)["results"]}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    """richish (pure, a console script and a `#!python` .data script) and numpyish (a gcc-built core)."""
    folder = tmp_path_factory.mktemp("stack-wheels")
    core = _ext(folder, "_core")
    rich = make_wheel(folder, "richish", "1.0", modules={"richish/__init__.py": "from .console import render\n",
                                                         "richish/console.py": CONSOLE},
                      entry_points={"console_scripts": {"richish-tool": "richish:render"}},
                      files={"richish-1.0.data/scripts/richish-raw": "#!python\nimport richish\n"})
    numpy = make_wheel(folder, "numpyish", "1.0", tags=_tags(), modules={"numpyish/__init__.py": "from ._core import answer\n"},
                       files={f"numpyish/_core{SUFFIX}": core})
    return rich, numpy


@pytest.fixture
def installed(wheels, tmp_path):
    """The two installed by wh's install (in this process: the doctor is what runs as `wh`) from one wheelhouse
    into a new venv: (python, site, wheelhouse)."""
    from wheelhouse.install import InstallOptions, install_wheelhouses

    house = make_wheelhouse(tmp_path / "house", list(wheels))
    venv = tmp_path / "venv"
    install_wheelhouses([house], InstallOptions(venv=venv))
    py = venv / "bin" / "python"
    return py, site_packages(py), house


def test_a_clean_install_is_ok_and_hashes_nothing(installed):
    py, site, house = installed
    code, res = doctor(py)
    assert code == 0, res
    files = res["stack:files"]
    assert files["verdict"] == "ok" and files["data"]["hashed"] == 0, files  # install wrote the cache
    launcher_rows = [r for r in (site / "richish-1.0.dist-info" / "RECORD").read_text().splitlines()
                     if r.startswith("../")]
    assert len(launcher_rows) == 2  # the console script and the rewritten .data script are judged too
    dists = res["stack:distributions"]
    assert dists["verdict"] == "ok" and str(house) in dists["evidence"], dists
    code, res = doctor(py, "--thorough")
    assert code == 0 and res["stack:files"]["data"]["hashed"] == res["stack:files"]["data"]["files"]


def test_an_emptied_file_fails_naming_it_and_its_wheelhouse(installed):
    """Before: emptying a module passed `wh doctor --strict`."""
    py, site, house = installed
    (site / "richish" / "console.py").write_text("")
    code, res = doctor(py)
    assert code == 1
    files = res["stack:files"]
    assert files["verdict"] == "fail" and "richish/console.py: 0 bytes" in files["evidence"], files
    assert f"wheelhouse {house}" in files["evidence"] and "emptied" in files["evidence"]


def test_bytes_changed_in_place_are_found_even_with_the_old_mtime(installed):
    """Four bytes overwritten inside the extension, its size and mtime put back: the ctime still tells."""
    py, site, _ = installed
    assert doctor(py)[0] == 0  # the cache now holds every file
    so = site / "numpyish" / f"_core{SUFFIX}"
    st = so.stat()
    with open(so, "r+b") as fh:
        fh.seek(st.st_size // 2)
        old = fh.read(4)
        fh.seek(st.st_size // 2)
        fh.write(bytes(b ^ 0xFF for b in old))
    os.utime(so, ns=(st.st_atime_ns, st.st_mtime_ns))
    code, res = doctor(py)
    assert code == 1
    assert f"numpyish/_core{SUFFIX}: sha256 differs" in res["stack:files"]["evidence"], res["stack:files"]


def test_a_missing_file_and_a_changed_launcher_fail(installed):
    py, site, _ = installed
    (site / "richish" / "__init__.py").unlink()
    launcher = py.parent / "richish-tool"
    launcher.write_text(launcher.read_text() + "# edited\n")
    code, res = doctor(py)
    ev = res["stack:files"]["evidence"]
    assert code == 1 and "richish/__init__.py: missing" in ev and "bin/richish-tool" in ev, ev


def test_fix_reinstalls_a_truncated_core_and_is_green(installed):
    """Before: --fix dropped numpyish (its core truncated), the re-run found nothing broken: exit 0. A file that
    does not match RECORD is a damaged install: --fix reinstalls it from the wheelhouse, byte for byte."""
    py, site, house = installed
    so = site / "numpyish" / f"_core{SUFFIX}"
    whole = so.read_bytes()
    so.write_bytes(whole[:100])
    r = wh("doctor", "--python", py, "--fix", "--json")
    out = json.loads(r.stdout)
    assert any(f["action"] == "reinstall" and f["what"].startswith("numpyish") for f in out["fixes"]), out["fixes"]
    assert not any(f["action"] == "drop" for f in out["fixes"]), out["fixes"]
    assert so.read_bytes() == whole
    assert r.returncode == 0, r.stdout + r.stderr


def _record_as_is(site: Path, dist_info: str, rel: str) -> None:
    """Rewrite the RECORD row of ``rel`` to the file as it is now (an install whose files all match RECORD)."""
    import base64
    import hashlib

    record = site / dist_info / "RECORD"
    data = (site / rel).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rows = [f"{rel},sha256={digest},{len(data)}" if line.split(",")[0] == rel else line
            for line in record.read_text().splitlines()]
    record.write_text("\n".join(rows) + "\n")


def _as_the_locked_build(site: Path, name: str) -> None:
    """Record the installed files' build as the one wh installed (the locked wheel was itself this build)."""
    from wheelhouse.recordfile import build_digest, read_installed_record

    state_file = site / ".wh" / "installed.json"
    state = json.loads(state_file.read_text())
    [info] = site.glob(f"{name}-*.dist-info")
    state["packages"][name]["build"] = build_digest(read_installed_record(info).rows)
    state_file.write_text(json.dumps(state))


def test_fix_that_drops_a_locked_distribution_is_not_green(installed):
    """Before: --fix dropped numpyish (its core fails to load), the re-run found nothing broken: exit 0. Here every
    file matches RECORD, so the drop is the repair --fix makes; the locked distribution is then missing: red."""
    py, site, house = installed
    init = site / "numpyish" / "__init__.py"
    init.write_text("raise ImportError('numpyish: built for another numpy ABI')\n")
    _record_as_is(site, "numpyish-1.0.dist-info", "numpyish/__init__.py")  # a wheel that is itself broken
    _as_the_locked_build(site, "numpyish")  # (else: another build than the lock's, which --fix reinstalls)
    r = wh("doctor", "--python", py, "--fix", "--include-requested", "--json")
    out = json.loads(r.stdout)
    assert any(f["action"] == "drop" and f["what"].startswith("numpyish") for f in out["fixes"]), out["fixes"]
    assert r.returncode == 1, r.stderr
    [dists] = [c for c in out["results"] if c["id"] == "stack:distributions"]
    assert dists["verdict"] == "fail", dists
    assert f"numpyish 1.0 (wheelhouse {house}) is not installed: dropped by `wh drop`" in dists["evidence"]
    assert "wh drop --restore numpyish" in dists["hint"]


def test_another_version_fails_and_a_base_distribution_only_warns(installed, tmp_path):
    py, site, house = installed
    other = make_wheel(tmp_path / "w2", "richish", "2.0", modules={"richish/__init__.py": "", "richish/console.py": ""})
    r = wh("install", make_wheelhouse(tmp_path / "h2", [other]), "--python", py)
    assert r.returncode == 0, r.stderr
    state = json.loads((site / ".wh" / "installed.json").read_text())
    state["packages"]["richish"]["version"] = "1.0"  # as if pip had replaced wh's 1.0 with 2.0
    (site / ".wh" / "installed.json").write_text(json.dumps(state))
    base = make_wheel(tmp_path / "w3", "basepkg", "1.0", modules={"basepkg/__init__.py": "X = 1\n"})
    install_wheel(py, base)  # not from any wheelhouse: the base system
    (site / "basepkg" / "__init__.py").write_text("X = 2\n")
    code, res = doctor(py)
    assert code == 1
    assert "locks 1.0, 2.0 is installed" in res["stack:distributions"]["evidence"], res["stack:distributions"]
    assert "basepkg 1.0 (not part of an installed wheelhouse: a warning)" in res["stack:files"]["evidence"]
    code, res = doctor(py, check="stack:files")
    assert code == 0 and res["stack:files"]["verdict"] == "warn", res["stack:files"]


def test_a_plain_environment_is_judged_whole(wheels, tmp_path):
    from broken_packages import make_venv

    py = make_venv(tmp_path / "plain")
    install_wheel(py, wheels[0])
    code, res = doctor(py)
    assert code == 0 and res["stack:distributions"]["verdict"] == "skip" and res["stack:files"]["verdict"] == "ok"
    assert res["stack:files"]["data"]["hashed"] > 0  # nothing cached yet: hashed, then cached (user cache)
    code, res = doctor(py)
    assert code == 0 and res["stack:files"]["data"]["hashed"] == 0
    assert len(list((tmp_path / "xdg-cache" / "wh" / "digests").iterdir())) == 1
    assert not (site_packages(py) / ".wh").exists()  # a site folder wh never installed into gets no .wh/
    (site_packages(py) / "richish" / "console.py").write_text("")
    code, res = doctor(py)
    assert code == 1 and "no wheelhouse recorded" in res["stack:files"]["evidence"]


def test_an_image_that_appended_to_a_data_file_is_a_warning_not_a_fail(tmp_path):
    """The stock H200 image appends its CAs to certifi's cacert.pem (and pip's vendored copy): with no wh install
    recorded, that changed data file is a warning naming it, not a fail; a changed .py in the same place fails."""
    from broken_packages import make_venv

    wheel = make_wheel(tmp_path / "w", "certish", "1.0", modules={"certish/__init__.py": "def where():\n    return 1\n"},
                       files={"certish/cacert.pem": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"})
    py = make_venv(tmp_path / "image")
    install_wheel(py, wheel)
    pem = site_packages(py) / "certish" / "cacert.pem"
    pem.write_text(pem.read_text() + "# the image's own CA\n-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n")
    code, res = doctor(py, check="stack:files")
    assert code == 0, res
    assert res["stack:files"]["verdict"] == "warn"
    assert "certish/cacert.pem" in res["stack:files"]["evidence"]
    assert "only data files differ, no code: a warning" in res["stack:files"]["evidence"]
    (site_packages(py) / "certish" / "__init__.py").write_text("")
    code, res = doctor(py, check="stack:files")
    assert code == 1 and res["stack:files"]["verdict"] == "fail", res
    assert "wh install" in res["stack:files"]["hint"] and "--reinstall certish" in res["stack:files"]["hint"]


def test_a_file_wh_patch_changed_holds_the_payload(tmp_path, pyindex):
    """The staged wheelhouse's [[patch]] rewrites app/__init__.py at install: its patch record vouches for it."""
    house = staged_wheelhouse(tmp_path, pyindex)
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv)
    assert r.returncode == 0, r.stderr
    py = venv / "bin" / "python"
    target = site_packages(py) / "app" / "__init__.py"
    assert target.read_text() == PAYLOAD
    code, res = doctor(py)
    assert code == 0 and res["stack:files"]["verdict"] == "ok", res["stack:files"]
    assert res["stack:files"]["data"]["hashed"] == 1  # the patched file: the install left it out of the cache
    target.write_text(PAYLOAD + "# edited after the patch\n")
    code, res = doctor(py)
    assert code == 1 and "app/__init__.py" in res["stack:files"]["evidence"], res["stack:files"]


def test_a_debian_python3_package_is_dpkgs_to_judge_not_a_damaged_install(tmp_path):
    """Debian's python3-* packages: dh-python writes RECORD with hex sha256 digests and no INSTALLER, and dpkg strips
    the .so files after. Judged as a pip install, an unmodified system was a fail with a reinstall hint."""
    import hashlib

    from broken_packages import make_venv
    from wheelhouse.doctor.checks.stack import owned_by_dpkg

    py = make_venv(tmp_path / "image")
    site = site_packages(py)
    (site / "debby").mkdir()
    body = b"VALUE = 1\n"
    (site / "debby" / "__init__.py").write_bytes(body + b"# stripped by dpkg\n")  # RECORD names the bytes before
    info = site / "debby-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: debby\nVersion: 1.0\n")
    (info / "RECORD").write_text(f"debby/__init__.py,sha256={hashlib.sha256(body).hexdigest()},{len(body)}\n"
                                 "debby-1.0.dist-info/RECORD,,\n")
    code, res = doctor(py, check="stack:files")
    assert code == 0 and res["stack:files"]["verdict"] == "ok", res
    assert "debby (dpkg)" in res["stack:files"]["evidence"]
    # Its folder alone says so too (Debian keeps some wheels' own RECORDs); pip's folder under /usr/local does not.
    rows = [("x/__init__.py", "AAAA", 1)]
    assert owned_by_dpkg("/usr/lib/python3/dist-packages", "", rows)
    assert not owned_by_dpkg("/usr/local/lib/python3.11/dist-packages", "", rows)
    assert not owned_by_dpkg("/usr/lib/python3/dist-packages", "pip", rows)


def test_a_file_two_distributions_ship_holds_the_last_ones_bytes_and_that_is_no_damage(tmp_path):
    """opencv-python and opencv-contrib-python both ship cv2/: the one installed last writes its bytes over the other's,
    and both RECORDs list the files. The first one's RECORD no longer matches, but the disk holds what the other's
    RECORD lists: that was a fail with a hint to reinstall the first (writing the plain cv2 over the contrib one)."""
    from broken_packages import make_venv

    py = make_venv(tmp_path / "venv")
    plain = make_wheel(tmp_path / "w", "visionplain", "1.0", modules={"vision/__init__.py": "KIND = 'plain'\n"})
    contrib = make_wheel(tmp_path / "w", "visioncontrib", "1.0",
                         modules={"vision/__init__.py": "KIND = 'contrib'\n", "vision/extra.py": "X = 1\n"})
    install_wheel(py, plain)
    install_wheel(py, contrib)
    code, res = doctor(py, check="stack:files")
    assert code == 0 and res["stack:files"]["verdict"] == "ok", res
    assert "vision/__init__.py (visionplain's) holds visioncontrib 1.0's bytes" in res["stack:files"]["evidence"]
    (site_packages(py) / "vision" / "__init__.py").write_text("KIND = 'neither'\n")  # neither RECORD's bytes
    code, res = doctor(py, check="stack:files")
    assert code == 1 and "vision/__init__.py" in res["stack:files"]["evidence"], res


@pytest.mark.parametrize("fork_version", ["1.0", "9.9"])
def test_a_distribution_no_wheelhouse_holds_written_over_a_stack_file_fails(tmp_path, fork_version):
    """Hostile round 9: `pip install mypkg-fork` after wh's install wrote mypkg/__init__.py, and the stack was green:
    the fork's RECORD lists those bytes, and "two distributions ship the file" excused it, though no installed
    wheelhouse holds the fork. Between two distributions both installed from wheelhouses it stays no damage."""
    from wheelhouse.install import InstallOptions, install_wheelhouses

    mine = make_wheel(tmp_path / "w", "mypkg", "1.0", modules={"mypkg/__init__.py": "VERSION = 'staged'\n"})
    fork = make_wheel(tmp_path / "w", "mypkg-fork", fork_version, modules={"mypkg/__init__.py": "VERSION = 'fork'\n"})
    venv = tmp_path / "venv"
    install_wheelhouses([make_wheelhouse(tmp_path / "house", [mine])], InstallOptions(venv=venv))
    py = venv / "bin" / "python"
    install_wheel(py, fork)
    code, res = doctor(py, check="stack:files")
    assert code == 1 and res["stack:files"]["verdict"] == "fail", res
    assert ("mypkg/__init__.py: holds mypkg-fork " + fork_version + "'s bytes, a distribution no installed wheelhouse "
            "holds") in res["stack:files"]["evidence"], res
    # the same two from a wheelhouse each: the one installed last wrote the file, which both stacks stage
    venv2 = tmp_path / "venv2"
    install_wheelhouses([make_wheelhouse(tmp_path / "house-a", [mine]), make_wheelhouse(tmp_path / "house-b", [fork])],
                        InstallOptions(venv=venv2))
    code, res = doctor(venv2 / "bin" / "python", check="stack:files")
    assert res["stack:files"]["verdict"] == "ok", res  # (the fork ships every file mypkg has in mypkg/)


@pytest.mark.parametrize("other_version", ["1.0", "2.0"])
def test_another_distributions_launcher_of_the_same_name_over_the_stacks_fails(tmp_path, other_version):
    """Hostile round 10: othertool 1.0, from a second wheelhouse, declares a console script `engine` like engine 1.0:
    its launcher replaced engine's, and the same version excused it as two builds of one release ("holds othertool
    1.0's bytes"): `engine` ran othertool.main. A launcher runs its own entry point, whatever the versions."""
    from wheelhouse.install import InstallOptions, install_wheelhouses

    ep = {"console_scripts": {"engine": "engine.cli:main"}}
    mine = make_wheel(tmp_path / "w", "engine", "1.0", entry_points=ep,
                      modules={"engine/__init__.py": "", "engine/cli.py": "def main():\n    print('engine')\n"})
    other = make_wheel(tmp_path / "w", "othertool", other_version, entry_points={
        "console_scripts": {"engine": "othertool:main"}}, modules={"othertool.py": "def main():\n    print('other')\n"})
    venv = tmp_path / "venv"
    install_wheelhouses([make_wheelhouse(tmp_path / "house-a", [mine]), make_wheelhouse(tmp_path / "house-b", [other])],
                        InstallOptions(venv=venv))
    assert subprocess.run([venv / "bin" / "engine"], capture_output=True, text=True).stdout.strip() == "other"
    code, res = doctor(venv / "bin" / "python", check="stack:files")
    assert code == 1 and res["stack:files"]["verdict"] == "fail", res
    assert (f"../../../bin/engine: holds othertool {other_version}'s bytes, another distribution of the installed "
            "wheelhouses") in res["stack:files"]["evidence"], res


def test_a_package_two_releases_wrote_into_is_no_one_distributions_and_fails(tmp_path):
    """imgx 2.0 ships core.py and filters.py; imgx-lite 1.0, installed after it, writes its own core.py over 2.0's but
    ships no filters.py: 2.0's filters.py now sits beside 1.0's core.py and dies importing it. Every file held bytes
    some RECORD lists, so "the other distribution's bytes" made it ok."""
    from broken_packages import make_venv

    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "imgx", "2.0", modules={
        "imgx/__init__.py": "", "imgx/core.py": "def blur2():\n    return 2\n",
        "imgx/filters.py": "from .core import blur2\n"}))
    install_wheel(py, make_wheel(tmp_path / "w", "imgx-lite", "1.0", modules={
        "imgx/__init__.py": "", "imgx/core.py": "def blur():\n    return 1\n"}))
    code, res = doctor(py, check="stack:files")
    assert code == 1 and "imgx 2.0" in res["stack:files"]["evidence"] and "imgx/core.py" in res["stack:files"]["evidence"]


def test_two_builds_of_one_release_and_two_halves_of_a_namespace_are_no_damage(tmp_path):
    """opencv-python and opencv-python-headless 5.1.0.95 both write cv2/ (the GUI build leaves qt/ files the headless
    one lacks); backports.alpha and backports.beta each write backports/__init__.py: both stacks import, and both
    failed once "the other ships every file" was asked of them."""
    from broken_packages import make_venv

    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "cvgui", "5.1", modules={
        "cvx/__init__.py": "KIND = 'gui'\n", "cvx/qt/fonts.py": "FONTS = 1\n"}))
    install_wheel(py, make_wheel(tmp_path / "w", "cvheadless", "5.1", modules={"cvx/__init__.py": "KIND = 'headless'\n"}))
    install_wheel(py, make_wheel(tmp_path / "w", "bp-alpha", "1.0", modules={
        "bpns/__init__.py": "__path__ = __import__('pkgutil').extend_path(__path__, __name__)  # alpha\n",
        "bpns/alpha/__init__.py": ""}))
    install_wheel(py, make_wheel(tmp_path / "w", "bp-beta", "2.0", modules={
        "bpns/__init__.py": "__path__ = __import__('pkgutil').extend_path(__path__, __name__)\n",
        "bpns/beta/__init__.py": ""}))
    code, res = doctor(py, check="stack:files")
    assert code == 0 and res["stack:files"]["verdict"] == "ok", res
    assert "cvx/__init__.py (cvgui's) holds cvheadless 5.1's bytes" in res["stack:files"]["evidence"]
    assert "bpns/__init__.py (bp-alpha's) holds bp-beta 2.0's bytes" in res["stack:files"]["evidence"]


@pytest.mark.parametrize("installer", ["uv-pixi", "flit", "conda"])
def test_only_a_system_package_managers_install_goes_unjudged(wheels, tmp_path, installer):
    """INSTALLER was read against a list of installers wh knew: pixi's ("uv-pixi") and flit's installs, which write
    the bytes RECORD records, went unjudged as a system package manager's, and an emptied module passed."""
    from broken_packages import make_venv

    py = make_venv(tmp_path / "plain")
    install_wheel(py, wheels[0])
    site = site_packages(py)
    (site / "richish-1.0.dist-info" / "INSTALLER").write_text(f"{installer}\n")
    (site / "richish" / "console.py").write_text("")
    code, res = doctor(py)
    if installer == "conda":  # conda may rewrite what it installed (its prefix replacement): its files, not RECORD's
        assert code == 0 and "not judged by RECORD: richish (conda)" in res["stack:files"]["evidence"], res
    else:
        assert code == 1 and "richish/console.py" in res["stack:files"]["evidence"], res


def test_a_sourceless_module_is_code_and_judged(tmp_path):
    """A wheel of byte code only (``pkg/core.pyc``, no .py): the rows of .pyc files were all left out as byte code the
    interpreter rewrites, which is true only under __pycache__/: an emptied core.pyc passed, and the import died."""
    import importlib.util
    import marshal
    from broken_packages import make_venv

    def pyc(source: str) -> bytes:
        return importlib.util.MAGIC_NUMBER + b"\0" * 12 + marshal.dumps(compile(source, "core.py", "exec"))

    w = make_wheel(tmp_path / "w", "sourceless", "1.0", files={"sourceless/__init__.pyc": pyc(""),
                                                               "sourceless/core.pyc": pyc("X = 1\n")})
    py = make_venv(tmp_path / "venv")
    install_wheel(py, w)
    subprocess.run([str(py), "-c", "import sourceless.core"], check=True)
    assert doctor(py)[0] == 0
    (site_packages(py) / "sourceless" / "core.pyc").write_bytes(b"")
    assert subprocess.run([str(py), "-c", "import sourceless.core"], capture_output=True).returncode != 0
    code, res = doctor(py)
    assert code == 1 and "sourceless/core.pyc" in res["stack:files"]["evidence"], res


def test_an_unrelated_distribution_of_the_same_version_writing_one_module_into_a_package_fails(tmp_path):
    """beta-tools 1.0 writes shared/core.py into alpha 1.0's shared/ (and ships no shared/__init__.py): the same
    version string alone made it "two builds of one release", ok, while `import shared` dies."""
    from broken_packages import make_venv

    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "alpha", "1.0", modules={
        "shared/__init__.py": "from .core import WHO\nassert WHO == 'alpha', 'not this package'\n",
        "shared/core.py": "WHO = 'alpha'\n"}))
    install_wheel(py, make_wheel(tmp_path / "w", "beta-tools", "1.0", modules={"shared/core.py": "WHO = 'beta'\n"}))
    assert subprocess.run([str(py), "-c", "import shared"], capture_output=True).returncode != 0
    code, res = doctor(py, check="stack:files")
    assert code == 1 and "shared/core.py" in res["stack:files"]["evidence"], res


def test_two_builds_of_one_release_in_a_namespace_folder_share_data_and_libraries_but_not_modules(tmp_path):
    """NVIDIA's layout: nvidia/cu13/ has no __init__.py above it. The headless build of the same release, installed
    last, wrote its header and its libcux over the full build's: no damage (the rule asking the other to ship the
    package failed it, and then one judging libraries as modules). A Python module is another matter: an unrelated acme-beta 1.0 writing acme/_shared.py into the namespace acme/ over
    acme-alpha 1.0's broke `import acme.alpha`, and the same version alone passed it."""
    from broken_packages import make_venv

    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "cux-cu13", "13.0.1", files={
        "nvidia/cu13/include/cux.h": b"full build\n", "nvidia/cu13/include/cuxgui.h": b"gui\n",
        "nvidia/cu13/lib/libcux.so.13": b"full build\n", "nvidia/cu13/lib/libcuxgui.so.13": b"gui\n"}))
    install_wheel(py, make_wheel(tmp_path / "w", "cux-cu13-headless", "13.0.1", files={
        "nvidia/cu13/include/cux.h": b"headless build\n", "nvidia/cu13/lib/libcux.so.13": b"headless build\n"}))
    code, res = doctor(py, check="stack:files")
    assert code == 0 and res["stack:files"]["verdict"] == "ok", res
    assert "holds cux-cu13-headless 13.0.1's bytes" in res["stack:files"]["evidence"]
    assert "nvidia/cu13/lib/libcux.so.13 (cux-cu13's)" in res["stack:files"]["evidence"]
    install_wheel(py, make_wheel(tmp_path / "w", "acme-alpha", "1.0", modules={
        "acme/_shared.py": "def helper():\n    return 1\n", "acme/alpha/__init__.py": "from acme._shared import helper\n"}))
    install_wheel(py, make_wheel(tmp_path / "w", "acme-beta", "1.0", modules={
        "acme/_shared.py": "OTHER = 1\n", "acme/beta/__init__.py": ""}))
    assert subprocess.run([str(py), "-c", "import acme.alpha"], capture_output=True).returncode != 0
    code, res = doctor(py, check="stack:files")
    assert code == 1 and "acme/_shared.py" in res["stack:files"]["evidence"], res


def test_a_system_installer_word_written_into_a_wh_installed_distribution_does_not_turn_off_its_check(tmp_path):
    """Hostile round 10: INSTALLER rewritten to `conda` (an image step, conda over a pip environment) made every
    file of a distribution the install records list "not judged": its edited code ran under a green doctor. A
    distribution an installed wheelhouse holds is judged whatever its INSTALLER says; a conda package's is not."""
    from wheelhouse.install import InstallOptions, install_wheelhouses

    mine = make_wheel(tmp_path / "w", "engine", "1.0", modules={"engine/__init__.py": "WHO = 'staged'\n"})
    theirs = make_wheel(tmp_path / "w", "condapkg", "1.0", modules={"condapkg/__init__.py": "X = 1\n"})
    venv = tmp_path / "venv"
    install_wheelhouses([make_wheelhouse(tmp_path / "house", [mine])], InstallOptions(venv=venv))
    py = venv / "bin" / "python"
    install_wheel(py, theirs)
    site = site_packages(py)
    for name in ("engine", "condapkg"):
        (site / f"{name}-1.0.dist-info" / "INSTALLER").write_text("conda\n")
        (site / name / "__init__.py").write_text("WHO = 'edited'\n")
    code, res = doctor(py, check="stack:files")
    assert code == 1 and "engine/__init__.py" in res["stack:files"]["evidence"], res
    assert "condapkg/__init__.py" not in res["stack:files"]["evidence"]  # conda's own: its files are conda's
