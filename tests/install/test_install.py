"""`wh install` end to end: real wheelhouses, real venvs, the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nvidia_fixtures import make_wheelhouse, need_gcc, nvcc_wheel, nvidia_runtime_wheel, tree_listing
from wheelmaker import make_wheel

from wheelhouse.install import (
    AmbiguousWheelhouse,
    HashMismatch,
    find_wheelhouses,
    InstallOptions,
    install_wheelhouses,
    read_install_state,
)
from wheelhouse.lock import WheelhouseNotFound
from wheelhouse.progress import RecordingReporter
from wheelhouse.target import target_from_flags
from wheelhouse.install.wheel import UnsafeWheelPath

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def wh(*args, env=None, cwd=None, timeout=120):
    """Run the real CLI; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


def site(venv: Path) -> Path:
    return venv / "lib" / PY / "site-packages"


def app_wheel(folder: Path, version: str = "1.0", extra_module: str | None = None) -> Path:
    modules = {"app/__init__.py": f'VERSION = "{version}"\ndef main():\n    print("hello from app", VERSION)\n'}
    if extra_module:
        modules[f"app/{extra_module}.py"] = "X = 1\n"
    return make_wheel(
        folder, "app", version, modules=modules,
        entry_points={"console_scripts": {"app-hello": "app:main"}},
        files={f"app-{version}.data/scripts/app-raw": "#!python\nimport app; app.main()\n",
               f"app-{version}.data/data/share/app/app.txt": "data file\n"},
    )


@pytest.fixture
def house(tmp_path):
    """A wheelhouse for this interpreter: app (console script, .data), lib, and the NVIDIA-layout wheels."""
    w = tmp_path / "w"
    wheels = [app_wheel(w), make_wheel(w, "lib", "2.0", modules={"lib/__init__.py": "VALUE = 42\n"})]
    if shutil.which("gcc"):
        wheels += [nvidia_runtime_wheel(w, tmp_path / "build"), nvcc_wheel(w)]
    return make_wheelhouse(tmp_path / "house", wheels)


def test_install_into_new_venv_console_script_and_data_work(house, tmp_path):
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv, "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert {d["name"] for d in report["installed"]} >= {"app", "lib"}
    out = subprocess.run([venv / "bin" / "app-hello"], capture_output=True, text=True)
    assert out.stdout.strip() == "hello from app 1.0"
    raw = subprocess.run([venv / "bin" / "app-raw"], capture_output=True, text=True)
    assert raw.stdout.strip() == "hello from app 1.0"  # #!python rewritten to the venv's python
    assert (venv / "share" / "app" / "app.txt").read_text() == "data file\n"
    imp = subprocess.run([venv / "bin" / "python", "-c", "import lib; print(lib.VALUE)"], capture_output=True, text=True)
    assert imp.stdout.strip() == "42"
    info = site(venv) / "app-1.0.dist-info"
    assert (info / "INSTALLER").read_text() == "wh\n"
    assert (info / "REQUESTED").exists()
    # The state says what came from where (the doctor and `wh drop --restore` read it).
    state = read_install_state(site(venv))
    assert state["packages"]["app"]["version"] == "1.0"
    assert state["packages"]["app"]["wheelhouse"] == str(house.resolve())
    assert str(house.resolve()) in state["wheelhouses"]


def test_pip_sees_what_wh_installed(house, tmp_path):
    """The RECORD wh writes is one pip can read: pip lists the dist and can uninstall it cleanly."""
    venv = tmp_path / "venv"
    assert wh("install", house, "--venv", venv).returncode == 0
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check"]
    listed = subprocess.run(pip + ["list", "--format=json"], capture_output=True, text=True)
    assert {"name": "app", "version": "1.0"} in json.loads(listed.stdout)
    un = subprocess.run(pip + ["uninstall", "-y", "app"], capture_output=True, text=True)
    assert un.returncode == 0, un.stderr
    assert not (venv / "bin" / "app-hello").exists()
    assert not (site(venv) / "app").exists()


def test_reinstall_is_idempotent_and_skips(house, tmp_path):
    venv = tmp_path / "venv"
    assert wh("install", house, "--venv", venv).returncode == 0
    before = tree_listing(venv)
    r = wh("install", house, "--venv", venv, "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["installed"] == []
    assert "app==1.0" in report["skipped"]
    after = [e for e in tree_listing(venv) if ".wh/installed.json" not in e[0]]
    assert after == [e for e in before if ".wh/installed.json" not in e[0]]


def test_upgrade_replaces_previous_version(tmp_path):
    w = tmp_path / "w"
    h1 = make_wheelhouse(tmp_path / "h1", [app_wheel(w, "1.0", extra_module="old_only")])
    h2 = make_wheelhouse(tmp_path / "h2", [app_wheel(tmp_path / "w2", "2.0")])
    venv = tmp_path / "venv"
    assert wh("install", h1, "--venv", venv).returncode == 0
    assert (site(venv) / "app" / "old_only.py").exists()
    r = wh("install", h2, "--venv", venv, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["installed"][0]["replaced"] == "1.0"
    assert not (site(venv) / "app" / "old_only.py").exists()
    assert not (site(venv) / "app-1.0.dist-info").exists()
    out = subprocess.run([venv / "bin" / "app-hello"], capture_output=True, text=True)
    assert out.stdout.strip() == "hello from app 2.0"


def test_an_upgrade_keeps_the_files_another_installed_distribution_lists_too(tmp_path):
    """opencv-python and opencv-contrib-python both ship cv2/: the second installed wrote the same paths and both
    RECORDs list them. An upgrade of the first to a version without cv2/ removed the other's working package."""
    both = {"cvx/__init__.py": "A = 1\n", "cvx/core.py": "X = 1\n"}
    h1 = make_wheelhouse(tmp_path / "h1", [make_wheel(tmp_path / "w1", "sharea", "1.0", modules=both)])
    h2 = make_wheelhouse(tmp_path / "h2", [make_wheel(tmp_path / "w2", "shareb", "1.0", modules=both)])
    h3 = make_wheelhouse(tmp_path / "h3", [make_wheel(tmp_path / "w3", "sharea", "2.0",
                                                      modules={"cva/__init__.py": "", "cvx/core.py": "X = 2\n"})])
    venv = tmp_path / "venv"
    for h in (h1, h2):
        assert wh("install", h, "--venv", venv).returncode == 0
    r = wh("install", h3, "--venv", venv, "--json")
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout)["installed"][0]
    assert done["replaced"] == "1.0"
    assert {k["path"] for k in done["kept"]} == {"cvx/__init__.py", "cvx/core.py"}
    assert all(k["listed_by"] == ["shareb 1.0"] for k in done["kept"]), done
    # shareb still imports; sharea 2.0 wrote its own cvx/core.py (the later writer's bytes, as at first install)
    out = subprocess.run([venv / "bin" / "python", "-c", "import cvx, cvx.core; print(cvx.A, cvx.core.X)"],
                         capture_output=True, text=True)
    assert out.stdout.split() == ["1", "2"], out.stderr
    # A file only the replaced version listed still goes.
    assert not (site(venv) / "sharea-1.0.dist-info").exists()
    r = wh("install", h3, "--venv", venv, "--reinstall", "sharea")
    assert r.returncode == 0, r.stderr
    assert (site(venv) / "cvx" / "__init__.py").exists()


def test_an_upgrade_of_two_distributions_that_share_a_file_removes_it_when_neither_new_version_ships_it(tmp_path):
    """The owners are both replaced in one install: a file only their old versions list is no one's to keep."""
    both = {"cvy/__init__.py": "A = 1\n"}
    old = [make_wheel(tmp_path / "w1", n, "1.0", modules=both) for n in ("sharec", "shared")]
    new = [make_wheel(tmp_path / "w2", n, "2.0", modules={f"{n}_new/__init__.py": ""}) for n in ("sharec", "shared")]
    venv = tmp_path / "venv"
    assert wh("install", make_wheelhouse(tmp_path / "h1", old), "--venv", venv).returncode == 0
    assert (site(venv) / "cvy" / "__init__.py").exists()
    r = wh("install", make_wheelhouse(tmp_path / "h2", new), "--venv", venv, "--json")
    assert r.returncode == 0, r.stderr
    assert all(d["kept"] == [] for d in json.loads(r.stdout)["installed"])
    assert not (site(venv) / "cvy").exists()


def test_target_mismatch_refused_and_nothing_created(tmp_path):
    other = target_from_flags("3.8", ["manylinux_2_17_x86_64"]).to_json()
    w = make_wheel(tmp_path / "w", "lib", "1.0", tags="cp38-cp38-manylinux_2_17_x86_64")
    house = make_wheelhouse(tmp_path / "house", [w], target=other)
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv)
    assert r.returncode == 2
    assert "Python 3.8" in r.stderr and "cp38-cp38-manylinux_2_17_x86_64.whl has no tag" in r.stderr
    assert "hint:" in r.stderr
    assert not venv.exists()


def test_target_mismatch_leaves_existing_env_untouched(house, tmp_path):
    venv = tmp_path / "venv"
    assert wh("install", house, "--venv", venv).returncode == 0
    before = tree_listing(venv)
    newer = target_from_flags(f"{sys.version_info[0]}.{sys.version_info[1]}", ["manylinux_2_99_x86_64"]).to_json()
    w = make_wheel(tmp_path / "w9", "lib", "3.0", tags="py3-none-manylinux_2_99_x86_64")
    bad = make_wheelhouse(tmp_path / "bad", [w], target=newer)
    r = wh("install", bad, "--venv", venv)
    assert r.returncode == 2
    assert "glibc 2.99" in r.stderr
    assert tree_listing(venv) == before


def test_tampered_wheel_refused_with_nothing_installed(tmp_path):
    w = tmp_path / "w"
    house = make_wheelhouse(tmp_path / "house", [make_wheel(w, "aaa", "1.0", modules={"aaa.py": "A = 1\n"}),
                                                  make_wheel(w, "zzz", "1.0", modules={"zzz.py": "Z = 1\n"})])
    target = house / "wheels" / "zzz-1.0-py3-none-any.whl"
    data = bytearray(target.read_bytes())
    data[100] ^= 0xFF  # same size, other bytes
    target.write_bytes(bytes(data))
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv)
    assert r.returncode == 1
    assert "zzz-1.0-py3-none-any.whl" in r.stderr and "nothing was installed" in r.stderr
    assert not venv.exists()
    # Into an existing environment: the good wheel is not installed either.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    with pytest.raises(HashMismatch) as exc:
        install_wheelhouses([house], InstallOptions(venv=venv))
    assert exc.value.bad[0][0].endswith("zzz-1.0-py3-none-any.whl")
    assert not (site(venv) / "aaa.py").exists()


@pytest.mark.parametrize("evil", ["../escaped.py", "/tmp/wh-absolute-escape.py"])
def test_wheel_with_unsafe_path_refused(tmp_path, evil):
    w = make_wheel(tmp_path / "w", "evil", "1.0", files={evil: "print('pwned')\n"},
                   modules={"evil_ok.py": "X = 1\n"})
    house = make_wheelhouse(tmp_path / "house", [w])
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    before = tree_listing(venv)
    with pytest.raises(UnsafeWheelPath, match="unsafe path"):
        install_wheelhouses([house], InstallOptions(venv=venv))
    assert tree_listing(venv) == before
    assert not (site(venv).parent / "escaped.py").exists()
    assert not Path("/tmp/wh-absolute-escape.py").exists()
    r = wh("install", house, "--venv", tmp_path / "v2")
    assert r.returncode == 1 and "unsafe path" in r.stderr
    assert not (tmp_path / "v2").exists()


def test_installer_pip_installs_verified_files(house, tmp_path):
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv, "--installer", "pip", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["installer"] == "pip"
    out = subprocess.run([venv / "bin" / "app-hello"], capture_output=True, text=True)
    assert out.stdout.strip() == "hello from app 1.0"
    assert (site(venv) / "app-1.0.dist-info" / "INSTALLER").read_text().strip() == "pip"


def test_compile_only_when_asked(house, tmp_path):
    plain, compiled = tmp_path / "plain", tmp_path / "compiled"
    assert wh("install", house, "--venv", plain).returncode == 0
    assert not list((site(plain) / "app").glob("__pycache__/*.pyc"))
    r = wh("install", house, "--venv", compiled, "--compile", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["compiled"] >= 2
    assert list((site(compiled) / "app").glob("__pycache__/__init__.*.pyc"))


def test_only_installs_the_named_package(house, tmp_path):
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv, "--only", "lib", "--json")
    assert r.returncode == 0, r.stderr
    assert [d["name"] for d in json.loads(r.stdout)["installed"]] == ["lib"]
    assert not (venv / "bin" / "app-hello").exists()
    r = wh("install", house, "--venv", venv, "--only", "nope")
    assert r.returncode == 2 and "nope" in r.stderr


def test_install_into_existing_interpreter_with_python_flag(house, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    r = wh("install", house, "--python", venv / "bin" / "python")
    assert r.returncode == 0, r.stderr
    assert (site(venv) / "lib" / "__init__.py").exists()
    assert not (venv / "bin" / "wh-env.sh").exists()  # snippets only for venvs wh manages


@need_gcc
def test_links_and_activation_after_install(house, tmp_path):
    venv = tmp_path / "venv"
    assert wh("install", house, "--venv", venv).returncode == 0
    lib = site(venv) / "nvidia" / "cu13" / "lib"
    assert os.readlink(lib / "libcudart.so") == "libcudart.so.13"
    out = subprocess.run(
        ["bash", "-c", f"export LD_LIBRARY_PATH=/keep/me; . {venv}/bin/activate; "
                       "echo $LD_LIBRARY_PATH; echo $CUDA_HOME; nvcc"],
        capture_output=True, text=True,
    )
    ld, cuda_home, nvcc = out.stdout.splitlines()
    assert ld.split(":")[0] == "/keep/me"
    assert ld.split(":")[-1] == str(lib)
    assert "stubs" not in ld
    assert cuda_home == str(site(venv) / "nvidia" / "cu13")
    assert "release 13.0.88" in nvcc
    # --no-links leaves the tree as the wheels made it.
    v2 = tmp_path / "v2"
    assert wh("install", house, "--venv", v2, "--no-links").returncode == 0
    assert not os.path.lexists(site(v2) / "nvidia" / "cu13" / "lib" / "libcudart.so")


def test_find_wheelhouses_under_moving_mounts(tmp_path):
    w = tmp_path / "w"
    one = make_wheelhouse(tmp_path / "input" / "stack" / "wheelhouse", [make_wheel(w, "a", "1.0")])
    # The same data source mounted a second way (several sources: notebooks/<owner>/<name>/).
    twin = tmp_path / "input" / "notebooks" / "me" / "stack" / "wheelhouse"
    shutil.copytree(one, twin)
    other = make_wheelhouse(tmp_path / "input" / "notebooks" / "me" / "engine" / "out",
                            [make_wheel(tmp_path / "w2", "engine", "0.1")])
    found = find_wheelhouses([], [tmp_path / "input"])
    assert sorted(found) == sorted([one.resolve(), other.resolve()]) or sorted(found) == sorted(
        [twin.resolve(), other.resolve()])
    assert len(found) == 2
    # Two wheelhouses disagreeing on a package: refused, both named.
    clash = make_wheelhouse(tmp_path / "input" / "old" / "wh", [make_wheel(tmp_path / "w3", "a", "0.9")])
    with pytest.raises(AmbiguousWheelhouse) as exc:
        find_wheelhouses([], [tmp_path / "input"])
    assert str(clash) in str(exc.value) and "0.9" in str(exc.value)
    with pytest.raises(WheelhouseNotFound):
        find_wheelhouses([], [tmp_path / "w"])


def test_search_flag_combines_wheelhouses(tmp_path):
    make_wheelhouse(tmp_path / "mnt" / "a" / "wh", [make_wheel(tmp_path / "w", "first", "1.0")])
    make_wheelhouse(tmp_path / "mnt" / "b" / "wh", [make_wheel(tmp_path / "w2", "second", "1.0")])
    venv = tmp_path / "venv"
    r = wh("install", "--search", tmp_path / "mnt", "--venv", venv, "--json")
    assert r.returncode == 0, r.stderr
    assert {d["name"] for d in json.loads(r.stdout)["installed"]} == {"first", "second"}
    r = wh("install", "--search", tmp_path / "nothing-here", "--venv", venv)
    assert r.returncode == 2 and "no wheelhouse" in r.stderr


def test_progress_goes_through_the_reporter(house, tmp_path):
    rep = RecordingReporter()
    report = install_wheelhouses([house], InstallOptions(venv=tmp_path / "venv"), reporter=rep)
    assert report.installed
    starts = [e[1] for e in rep.events if e[0] == "start"]
    assert any(s.startswith("verifying") for s in starts) and any(s.startswith("installing") for s in starts)
    assert sum(e[2] for e in rep.events if e[0] == "advance" and e[1].startswith("installing")) > 0


def test_one_wheel_is_one_wheel_not_one_wheels(tmp_path):
    w = make_wheel(tmp_path / "w", "solo", "1.0", modules={"solo/__init__.py": ""})
    rep = RecordingReporter()
    install_wheelhouses([make_wheelhouse(tmp_path / "house", [w])], InstallOptions(venv=tmp_path / "venv"),
                        reporter=rep)
    starts = [e[1] for e in rep.events if e[0] == "start"]
    assert "verifying 1 wheel" in starts and "installing 1 wheel" in starts, starts


def _netns_available() -> list[str] | None:
    for cmd in (["unshare", "-n"], ["unshare", "-rn"]):
        if shutil.which("unshare") and subprocess.run(cmd + ["true"], capture_output=True).returncode == 0:
            return cmd
    return None


@pytest.mark.netns
def test_install_inside_network_namespace(house, tmp_path):
    """No interfaces but loopback-down: any socket use would fail; the install must still pass."""
    prefix = _netns_available()
    if prefix is None:
        pytest.skip("unshare -n is not available here")
    probe = subprocess.run(prefix + [sys.executable, "-c",
                                     "import socket\ntry:\n socket.create_connection(('127.0.0.1', 9), timeout=2)\n"
                                     "except OSError as e: print('no network:', e)"],
                           capture_output=True, text=True)
    assert "no network" in probe.stdout  # the namespace really has no network
    venv = tmp_path / "venv"
    r = subprocess.run(prefix + [sys.executable, "-m", "wheelhouse", "install", str(house), "--venv", str(venv),
                                 "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([venv / "bin" / "app-hello"], capture_output=True, text=True)
    assert out.stdout.strip() == "hello from app 1.0"
    r = subprocess.run(prefix + [sys.executable, "-m", "wheelhouse", "install", str(house), "--venv",
                                 str(tmp_path / "v-pip"), "--installer", "pip"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_install_path_imports_nothing_that_can_open_a_socket():
    code = ("import sys\nimport wheelhouse.install, wheelhouse.install.wheel, wheelhouse.env.links, wheelhouse.env.cuda, "
            "wheelhouse.cli.install, wheelhouse.cli.links, wheelhouse.cli.env\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('socket', 'ssl', 'http', 'multiprocessing', "
            "'asyncio', 'urllib3', 'requests')]\nprint(bad)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


# ---- with the real `wh stage` against a loopback index ------------------------------------------

from index_fixtures import pyindex  # noqa: E402,F401  (fixture)


def test_wheelhouse_made_by_wh_stage_installs_offline(pyindex, tmp_path):
    pub = tmp_path / "pub"
    make_wheel(pub, "web", "1.0", requires=["core>=2"], modules={"web/__init__.py": "import core\nV = core.V\n"},
               entry_points={"console_scripts": {"web-version": "web.cli:main"}},
               files={"web/cli.py": "def main():\n    import web\n    print('web', web.V)\n"})
    make_wheel(pub, "core", "1.0", modules={"core/__init__.py": "V = 1\n"})
    make_wheel(pub, "core", "2.0", modules={"core/__init__.py": "V = 2\n"}, pad_bytes=50_000)
    idx = pyindex(pub)
    out = tmp_path / "staged"
    r = wh("stage", "web", "-i", idx.url, "-o", out, "--no-bootstrap", "--cache-dir", tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    venv = tmp_path / "venv"
    r = wh("install", out, "--venv", venv, "--json")
    assert r.returncode == 0, r.stderr
    assert {(d["name"], d["version"]) for d in json.loads(r.stdout)["installed"]} == {("web", "1.0"), ("core", "2.0")}
    got = subprocess.run([venv / "bin" / "web-version"], capture_output=True, text=True)
    assert got.stdout.strip() == "web 2"


def test_wheelhouse_patches_are_applied_after_install(tmp_path):
    original, payload = "def ok():\n    return True\n", "def ok():\n    return False  # fixed\n"
    w = make_wheel(tmp_path / "w", "tinyengine", "1.0",
                   modules={"tinyengine/__init__.py": "", "tinyengine/kernel.py": original})
    house = make_wheelhouse(tmp_path / "house", [w], patches=["patches/fix/spec.toml", "patches/fix/kernel_fix.py"])
    spec_dir = house / "patches" / "fix"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel_fix.py").write_text(payload)
    sha = lambda t: __import__("hashlib").sha256(t.encode()).hexdigest()  # noqa: E731
    (spec_dir / "spec.toml").write_text(
        '[patch]\nname = "tiny"\ndistribution = "tinyengine"\nfile = "tinyengine/kernel.py"\n'
        f'payload = "kernel_fix.py"\nbefore-sha256 = ["{sha(original)}"]\npayload-sha256 = "{sha(payload)}"\n')
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv, "--json")
    assert r.returncode == 0, r.stderr
    assert any("applied" in p or "patched" in p for p in json.loads(r.stdout)["patches"]), r.stdout
    assert (site(venv) / "tinyengine" / "kernel.py").read_text() == payload
    # The patch's line comes after the list of what was installed (it used to come first, mid-install).
    v3 = wh("install", house, "--venv", tmp_path / "v3")
    lines = v3.stderr.splitlines()
    assert v3.returncode == 0 and v3.stdout == "", v3.stderr
    (installed,) = [i for i, ln in enumerate(lines) if ln.strip() == "+ tinyengine 1.0"]
    (patched,) = [i for i, ln in enumerate(lines) if ln.strip().startswith("patch patches/fix/spec.toml: applied")]
    assert installed < patched, v3.stderr
    v2 = tmp_path / "v2"
    assert wh("install", house, "--venv", v2, "--no-patches").returncode == 0
    assert (site(v2) / "tinyengine" / "kernel.py").read_text() == original


def test_same_version_in_system_site_packages_is_not_shadowed(tmp_path):
    """With --system-site-packages, a package the base interpreter already has at that version is left to it."""
    base = "/usr/bin/python3"
    probe = subprocess.run([base, "-c", "import importlib.metadata as m; print(m.version('PyYAML'))"],
                           capture_output=True, text=True) if Path(base).exists() else None
    if probe is None or probe.returncode != 0:
        pytest.skip("needs a system python with PyYAML in its dist-packages")
    version = probe.stdout.strip()
    w = tmp_path / "w"
    house = make_wheelhouse(tmp_path / "house", [make_wheel(w, "PyYAML", version, modules={"yaml_fake.py": ""}),
                                                 make_wheel(w, "lib", "2.0", modules={"lib/__init__.py": ""})],
                            target=None)
    shared = tmp_path / "shared"
    r = wh("install", house, "--venv", shared, "--system-site-packages", "--python", base, "--json")
    if r.returncode == 2 and "venv" in r.stderr:
        pytest.skip("the system python cannot create venvs")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert f"pyyaml=={version}" in report["skipped"]
    assert [d["name"] for d in report["installed"]] == ["lib"]
    isolated = tmp_path / "isolated"
    r = wh("install", house, "--venv", isolated, "--python", base, "--json")
    assert r.returncode == 0, r.stderr
    assert {d["name"] for d in json.loads(r.stdout)["installed"]} == {"pyyaml", "lib"}


def test_compile_and_a_bad_wheel_leave_no_bytecode_behind(tmp_path):
    """--compile overlaps extraction; a failed batch still leaves the environment as it was."""
    w = tmp_path / "w"
    good = make_wheel(w, "good", "1.0", modules={f"good/m{i}.py": f"X = {i}\n" for i in range(50)})
    bad = make_wheel(w, "bad", "1.0", modules={"bad/__init__.py": "B = 1\n"})
    import zipfile
    import io as _io
    buf = _io.BytesIO()
    with zipfile.ZipFile(bad) as src, zipfile.ZipFile(buf, "w") as dst:  # stored, so the bytes can be changed
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    raw = bytearray(buf.getvalue())
    raw[raw.index(b"B = 1\n") + 4] = ord("2")  # B = 2, under the CRC-32 and RECORD of B = 1
    bad.write_bytes(bytes(raw))
    house = make_wheelhouse(tmp_path / "house", [good, bad])  # the lock's hash is of these bytes
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    before = tree_listing(venv)
    r = wh("install", house, "--venv", venv, "--compile")
    assert r.returncode == 1 and "bad/__init__.py does not match its CRC-32" in r.stderr, r.stderr
    assert tree_listing(venv) == before


def test_system_site_packages_from_a_venv_interpreter_sees_the_parent_venv(tmp_path):
    """Images ship torch in a venv (/opt/torch/.venv): a child venv made with --system-site-packages
    from that venv's python must see the parent's packages, not only the base install's."""
    w = tmp_path / "w"
    parent_house = make_wheelhouse(tmp_path / "ph", [make_wheel(w, "parentpkg", "1.0", modules={"parentpkg.py": "X = 1\n"})],
                                   target=None)
    parent = tmp_path / "parent"
    r = wh("install", parent_house, "--venv", parent)
    assert r.returncode == 0, r.stderr
    child_house = make_wheelhouse(tmp_path / "ch", [make_wheel(w, "childpkg", "1.0", modules={"childpkg.py": "Y = 2\n"})],
                                  target=None)
    child = tmp_path / "child"
    r = wh("install", child_house, "--venv", child, "--system-site-packages", "--python", parent / "bin" / "python")
    assert r.returncode == 0, r.stderr
    probe = subprocess.run([str(child / "bin" / "python"), "-c", "import parentpkg, childpkg; print(parentpkg.X + childpkg.Y)"],
                           capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "3"


def test_search_root_with_one_wheelhouse_per_target_installs_the_fitting_one(tmp_path):
    """A mount can carry a cp311 and a cp312 wheelhouse of the same stack: install takes the one staged
    for the receiving interpreter and says which it skipped, instead of refusing with a target mismatch."""
    w = tmp_path / "w"
    wheel = make_wheel(w, "same", "1.0", modules={"same.py": "V = 1\n"})
    make_wheelhouse(tmp_path / "mnt" / "for-this" / "wh", [wheel])
    other = target_from_flags("3.99", ["manylinux_2_17_x86_64"]).to_json()
    make_wheelhouse(tmp_path / "mnt" / "for-other" / "wh", [wheel], target=other)
    r = wh("install", "--search", tmp_path / "mnt", "--venv", tmp_path / "venv", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert [d["name"] for d in report["installed"]] == ["same"]
    assert any("for-other" in n and "3.99" in n for n in report["notes"])
    assert "skipped" in r.stderr
    # Only unfit wheelhouses: still one clear refusal naming the difference, nothing created.
    r = wh("install", tmp_path / "mnt" / "for-other" / "wh", "--venv", tmp_path / "venv2")
    assert r.returncode == 2 and "3.99" in r.stderr and not (tmp_path / "venv2").exists()


def test_a_half_written_install_by_another_tool_is_not_taken_as_installed(tmp_path):
    """A dist-info without RECORD in the environment's own site folder (another installer killed) is not
    "already there": wh installs over it."""
    house = make_wheelhouse(tmp_path / "house", [make_wheel(tmp_path / "w", "half", "1.0", modules={"half.py": "H = 1\n"})])
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    info = site(venv) / "half-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: half\nVersion: 1.0\n")
    r = wh("install", house, "--python", venv / "bin" / "python")
    assert r.returncode == 0, r.stderr
    assert "installed 1, already there 0" in r.stderr
    assert (site(venv) / "half.py").read_text() == "H = 1\n" and (info / "RECORD").is_file()


def test_an_extra_the_wheelhouse_asked_for_must_have_its_requirements_in_it(tmp_path):
    """wh.json's inputs ask for app[gpu], whose gpu extra requires gpukern, which the wheelhouse lacks: the install
    went ahead (exit 0) as if nothing had asked for the extra; the doctor found it after. Refused before any write,
    as a missing plain requirement is; --allow-missing installs anyway."""
    app = make_wheel(tmp_path / "w", "app", "1.0", extras={"gpu": ["gpukern"]}, modules={"app/__init__.py": ""})
    house = make_wheelhouse(tmp_path / "house", [app], extra_meta={"inputs": {"requirements": ["app[gpu]"]}})
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv)
    assert r.returncode != 0 and "app needs gpukern" in r.stderr and "--allow-missing" in r.stderr, r.stderr
    assert not (venv / "lib").exists() or not list((venv / "lib").glob(f"*/site-packages/app-1.0.dist-info"))
    assert wh("install", house, "--venv", venv, "--allow-missing").returncode == 0


def test_a_gap_an_install_does_not_change_is_not_blamed_on_it(tmp_path):
    """app[gpu] was installed knowingly without gpukern (--allow-missing). A later install of tool 2.0 alone touches
    neither: it was refused, "would break: app needs gpukern", because the gap was judged with the asked extras after
    the install and without them before."""
    w = tmp_path / "w"
    app = make_wheel(w, "app", "1.0", extras={"gpu": ["gpukern"]}, modules={"app/__init__.py": ""})
    meta = {"inputs": {"requirements": ["app[gpu]", "tool"]}}
    house = make_wheelhouse(tmp_path / "h1", [app, make_wheel(w, "tool", "1.0")], extra_meta=meta)
    venv = tmp_path / "venv"
    assert wh("install", house, "--venv", venv, "--allow-missing").returncode == 0
    house2 = make_wheelhouse(tmp_path / "h2", [app, make_wheel(tmp_path / "w2", "tool", "2.0")], extra_meta=meta)
    r = wh("install", house2, "--venv", venv, "--only", "tool")
    assert r.returncode == 0, r.stderr
    assert "tool 2.0 (was 1.0)" in r.stdout + r.stderr


def test_an_upgrade_that_opens_the_gap_of_an_asked_extra_is_refused(tmp_path):
    """app 1.0 (whose gpu extra nobody asked for) is installed; the new wheelhouse asks for app[gpu] and ships app 2.0,
    whose gpu extra requires gpukern, which it lacks: the gap is this install's (refused on a fresh venv), not one
    that was there, though app 1.0 declared the same requirement for the extra nobody asked."""
    w = tmp_path / "w"
    venv = tmp_path / "venv"
    h1 = make_wheelhouse(tmp_path / "h1", [make_wheel(w, "app", "1.0", extras={"gpu": ["gpukern"]},
                                                      modules={"app/__init__.py": ""})])
    assert wh("install", h1, "--venv", venv).returncode == 0
    app2 = make_wheel(tmp_path / "w2", "app", "2.0", extras={"gpu": ["gpukern"]}, modules={"app/__init__.py": ""})
    h2 = make_wheelhouse(tmp_path / "h2", [app2], extra_meta={"inputs": {"requirements": ["app[gpu]"]}})
    r = wh("install", h2, "--venv", venv)
    assert r.returncode != 0 and "app needs gpukern" in r.stderr, r.stderr


def test_a_reinstall_of_the_same_version_is_not_refused_for_a_gap_it_does_not_change(tmp_path):
    """app[gpu] was installed knowingly without gpukern (--allow-missing); `wh install --reinstall app` of the same app
    1.0 (to mend a damaged file) was refused for that gap, which it does not change."""
    app = make_wheel(tmp_path / "w", "app", "1.0", extras={"gpu": ["gpukern"]}, modules={"app/__init__.py": "X = 1\n"})
    house = make_wheelhouse(tmp_path / "h1", [app], extra_meta={"inputs": {"requirements": ["app[gpu]"]}})
    venv = tmp_path / "venv"
    assert wh("install", house, "--venv", venv, "--allow-missing").returncode == 0
    (site(venv) / "app" / "__init__.py").write_text("")
    r = wh("install", house, "--venv", venv, "--reinstall", "app")
    assert r.returncode == 0, r.stderr
    assert (site(venv) / "app" / "__init__.py").read_text() == "X = 1\n"


def test_the_pip_installer_gets_a_private_copy_of_the_verified_bytes(tmp_path):
    """Hostile round 9: `--installer pip` passed pip the wheel's path after the hash check; a wheel swapped in
    between was installed, and the record vouched for it. pip now reads a private copy of the file that was
    verified: one replaced or written to since, or with other bytes than the lock's, is refused."""
    import hashlib
    import os

    from wheelhouse.fileidentity import file_identity
    from wheelhouse.install.errors import InstallFailed
    from wheelhouse.install.run import _private_copy

    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    wheel.write_bytes(b"the verified bytes" * 100)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    ident = file_identity(os.stat(wheel))
    (tmp_path / "a").mkdir()
    copy = _private_copy(wheel, tmp_path / "a", None, {wheel: ident})
    assert copy.read_bytes() == wheel.read_bytes() and copy.parent == tmp_path / "a"
    assert _private_copy(wheel, tmp_path / "a", {wheel: sha}, None).read_bytes() == wheel.read_bytes()
    swapped = tmp_path / "swap.whl"
    swapped.write_bytes(b"other bytes!" * 150)
    os.replace(swapped, wheel)  # replaced after the check
    with pytest.raises(InstallFailed, match="changed after its sha256 was checked"):
        _private_copy(wheel, tmp_path / "a", None, {wheel: ident})
    with pytest.raises(InstallFailed, match="the lock records"):
        _private_copy(wheel, tmp_path / "a", {wheel: sha}, None)
