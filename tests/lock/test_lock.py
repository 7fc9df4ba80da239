"""lock: pylock.toml is PEP 751 as packaging.pylock reads it; wh's own data stays under [tool.wh]."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import tomli_w

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from packaging.pylock import Pylock
from packaging.version import Version

from pyc_helpers import wh
from uv_tool import run_uv, uv_binary
from wheelhouse.lock import Lock, LockedFile, LockError, read_pylock, render_pylock, write_pylock

SHA = "ab" * 32


def _lock(**kw) -> Lock:
    f = LockedFile("app", "1.0", "app-1.0-py3-none-any.whl", "wheels/app-1.0-py3-none-any.whl", SHA, 10,
                   index="http://127.0.0.1/simple", tool={"parents": ["<root>"], "source": "build"}, **kw)
    return Lock(files=(f,), environments=('python_version == "3.12"',), requires_python="==3.12.*", created_by="wh 9")


def test_written_lock_validates_with_packaging_pylock(tmp_path):
    write_pylock(tmp_path, _lock())
    data = tomllib.loads((tmp_path / "pylock.toml").read_text())
    pylock = Pylock.from_dict(data)
    (pkg,) = pylock.packages
    assert pkg.wheels[0].hashes == {"sha256": SHA} and pkg.tool == {"wh": {"parents": ["<root>"], "source": "build"}}
    back = read_pylock(tmp_path)
    assert back.files == _lock().files


@pytest.mark.parametrize("edit, what", [
    (lambda t: t.replace('"python_version == \\"3.12\\""', '"python_version =="'),
     r"environments\[0\]: Expected a marker .* \(python_version ==\)"),
    (lambda t: t.replace('requires-python = "==3.12.*"', 'requires-python = "=>3.12"'), "requires-python"),
    (lambda t: t.replace('\nversion = "1.0"\n', '\nversion = "not a version"\n'), r"packages\[0\]\.version"),
    (lambda t: t.replace('name = "app"\n', 'name = "not a name!"\n'), r"packages\[0\]\.name"),
])
def test_a_lock_packaging_refuses_is_a_bad_lock_error(tmp_path, edit, what):
    """Hand edits that PEP 751 forbids are caught when the lock is read, not when pip trips on it."""
    text = render_pylock(_lock())
    (tmp_path / "pylock.toml").write_text(edit(text))
    with pytest.raises(LockError, match=what) as info:
        read_pylock(tmp_path)
    assert "pylock.toml" in str(info.value) and info.value.hint
    assert "\n" not in info.value.message  # wh's one-line error, even for packaging's caret drawings


def test_the_same_lock_gives_the_same_bytes_in_any_order_and_process(tmp_path):
    """Deterministic: packages sorted, keys in PEP 751's order; no hash seed or input order shows in the file."""
    other = LockedFile("lib", "2.0", "lib-2.0-py3-none-any.whl", "wheels/lib-2.0-py3-none-any.whl", "cd" * 32, 20,
                       marker='sys_platform == "linux"', tool={"parents": ["app"]})
    a = dataclasses.replace(_lock(), files=(*_lock().files, other), tool={"overrides": ["lib==2.0"]})
    b = dataclasses.replace(a, files=tuple(reversed(a.files)))
    text = render_pylock(a)
    assert render_pylock(b) == text and text.index('name = "app"') < text.index('name = "lib"')
    # the same lock, built again in fresh interpreters (a frozen dataclass's repr is its constructor call)
    code = f"import sys; from wheelhouse.lock import *; sys.stdout.write(render_pylock({b!r}))"
    for seed in ("1", "2"):
        got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, check=True)
        assert got.stdout == text
    assert read_pylock(_written(tmp_path, text)) == a  # and reads back as it was (a sorts first already)


def _written(folder: Path, text: str) -> Path:
    (folder / "pylock.toml").write_text(text)
    return folder


def test_wh_tables_of_another_type_are_refused_by_name(tmp_path):
    """[tool.wh] holds wh's own facts (parents, overrides, excludes): another type is an error, never "none"."""
    data = tomllib.loads(render_pylock(_lock()))
    data["packages"][0]["tool"] = {"wh": "parents"}
    with pytest.raises(LockError, match=r"package app: tool\.wh must be a table"):
        read_pylock(_written(tmp_path, tomli_w.dumps(data)))
    data["packages"][0].pop("tool")
    data["tool"] = {"wh": ["overrides"]}
    with pytest.raises(LockError, match=r"pylock\.toml: tool\.wh must be a table"):
        read_pylock(_written(tmp_path, tomli_w.dumps(data)))


def test_an_unwritable_lock_is_a_lock_error_not_a_traceback():
    bad = dataclasses.replace(_lock().files[0], requires_python=">=3.8.*")  # not PEP 440 (".*" needs == or !=)
    with pytest.raises(LockError, match=r"cannot write pylock\.toml: .*>=3\.8\.\*"):
        render_pylock(dataclasses.replace(_lock(), files=(bad,)))


# --- through `wh`: a hand edit of the lock is caught before anything is installed -----------------

@pytest.fixture
def house(tmp_path, wheel_factory):
    wheel_factory("alpha", "1.0", requires=["beta"], modules={"alpha.py": "A = 1\n"})
    wheel_factory("beta", "2.0", modules={"beta.py": "B = 2\n"})
    (tmp_path / "empty-index").mkdir()
    out = tmp_path / "wheelhouse"
    r = wh("stage", "alpha", "-f", wheel_factory.folder, "--index-url", (tmp_path / "empty-index").as_uri(),
           "--no-bootstrap", "-o", out, "--cache-dir", tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    return out


def test_a_hand_edited_sha256_is_caught_by_install_and_verify(house, tmp_path):
    lock = tomllib.loads((house / "pylock.toml").read_text())
    (beta,) = [p for p in lock["packages"] if p["name"] == "beta"]
    sha = beta["wheels"][0]["hashes"]["sha256"]
    text = (house / "pylock.toml").read_text()
    assert text.count(sha) == 1
    (house / "pylock.toml").write_text(text.replace(sha, "0" * 64))  # still valid TOML and valid PEP 751
    r = wh("install", house, "--venv", tmp_path / "v")
    assert r.returncode != 0 and "beta-2.0-py3-none-any.whl" in r.stderr and "pylock.toml" in r.stderr, r.stderr
    assert not (tmp_path / "v").exists()  # nothing half-done
    r = wh("verify", house)
    assert r.returncode != 0 and "beta-2.0-py3-none-any.whl: sha256" in r.stdout, r.stdout
    assert "is not pylock.toml's 0000000000000000" in r.stdout


def test_the_written_lock_installs_with_uv_offline(house, tmp_path):
    """uv reads wh's pylock.toml (PEP 751 `uv pip install -r`), [tool.wh] tables and all."""
    if uv_binary() is None:
        pytest.skip("uv is not installed in the test venv (the [test] extra installs it)")
    venv.create(tmp_path / "v", with_pip=False)
    py = tmp_path / "v" / "bin" / "python"
    r = run_uv("pip", "install", "--offline", "--no-cache", "-r", str(house / "pylock.toml"), python=py, cwd=house)
    assert r.returncode == 0, r.stderr
    got = subprocess.run([str(py), "-c", "import alpha, beta; print(alpha.A, beta.B)"], capture_output=True, text=True)
    assert got.stdout.split() == ["1", "2"], got.stderr


@pytest.fixture
def pip_26():
    """A pip that reads pylock.toml (``-r``, 26.1 on, experimental there): $WH_TEST_PIP (a wheel file or a
    command), else the test skips before anything is staged."""
    given = os.environ.get("WH_TEST_PIP")
    pip = [sys.executable, f"{given}/pip"] if given and given.endswith(".whl") else given.split() if given else None
    if pip is None:
        pytest.skip("no pip >= 26.1 given (WH_TEST_PIP=/path/to/pip-26.1+.whl)")
    version = subprocess.run([*pip, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    if Version(version) < Version("26.1"):
        pytest.skip(f"WH_TEST_PIP is pip {version}: `-r pylock.toml` came in 26.1")
    return pip


def test_the_written_lock_installs_with_pip(pip_26, house, tmp_path):
    pip = pip_26
    venv.create(tmp_path / "v", with_pip=False)
    py = tmp_path / "v" / "bin" / "python"
    r = subprocess.run([*pip, "--isolated", "--python", str(py), "install", "--no-index", "-r", "pylock.toml"],
                       capture_output=True, text=True, cwd=house, timeout=300)
    assert r.returncode == 0, r.stderr
    got = subprocess.run([str(py), "-c", "import alpha, beta; print(alpha.A, beta.B)"], capture_output=True, text=True)
    assert got.stdout.split() == ["1", "2"], got.stderr
