"""`wh verify`: a wheelhouse (or its archive) checked offline; every kind of damage named on its own line.

The wheelhouse is a real one, staged from a loopback index (tests/support/carry_fixtures.py); each
test damages a copy the way a bad copy, a hand edit or a truncated medium would, and runs the real CLI.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import subprocess

import pytest

from carry_fixtures import PAYLOAD, sha256_file, staged_wheelhouse
from faults import wh_command

from wheelhouse.lock import read_pylock, write_pylock
from wheelhouse.carry.verify import WheelhouseDamaged, require_intact, verify_wheelhouse


def wh(*args, env=None):
    return subprocess.run(wh_command(args), capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture
def house(tmp_path, pyindex):
    return staged_wheelhouse(tmp_path, pyindex)


def _lib(house: Path) -> Path:
    return next((house / "wheels").glob("lib-2.0-*.whl"))


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (old, text[:400])
    path.write_text(text.replace(old, new, 1))


def _meta(h: Path, change) -> None:
    """Edit wh.json as a hand would (the file stays valid JSON)."""
    data = json.loads((h / "wh.json").read_text())
    change(data)
    (h / "wh.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _problems(r) -> list[str]:
    return [ln[len("problem: "):] for ln in r.stdout.splitlines() if ln.startswith("problem: ")]


def test_a_clean_wheelhouse_passes_with_its_target_summarised(house):
    r = wh("verify", house)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok: every check passed" in r.stdout
    assert re.search(r"^target: cp\d+ \(cp\d+\) ", r.stdout, re.M), r.stdout
    assert "holds: 2 wheels" in r.stdout and "bootstrap 2 wheels" in r.stdout and "2 patch files" in r.stdout
    data = json.loads(wh("verify", house, "--json").stdout)
    assert data["ok"] is True and data["problems"] == [] and data["wheels"] == 2 and data["bootstrap"] == 2
    assert data["target"]["python_version"] and data["name"] == "carry-demo" and data["hashed"] is True
    # The user's own file is not the wheelhouse's business.
    assert not any("NOTES" in n for n in data["notes"])


def _flip_wheel(h):
    _flip(_lib(h))
    return f"wheels/{_lib(h).name}: sha256"


def _missing_wheel(h):
    _lib(h).unlink()
    return f"wheels/{_lib_name(h)} is missing (pylock.toml lists it)"


def _lib_name(h):
    return re.search(r'"(lib-2\.0-[^"]+\.whl)"', (h / "pylock.toml").read_text())[1]


def _size_change(h):
    with open(_lib(h), "ab") as fh:
        fh.write(b"\0" * 10)
    return f"wheels/{_lib(h).name}: {_lib(h).stat().st_size} bytes, pylock.toml says {_lib(h).stat().st_size - 10}"


def _lock_entry_edited(h):
    _edit(h / "pylock.toml", 'name = "lib"\nversion = "2.0"', 'name = "lib"\nversion = "2.1"')
    # packaging's PEP 751 reading catches this one first; either way the line names the file and the version
    return re.compile(rf"pylock\.toml.*{re.escape(_lib(h).name)}.*2\.1")


def _lock_size_edited(h):
    size = _lib(h).stat().st_size
    _edit(h / "pylock.toml", f"size = {size}", f"size = {size + 1}")
    return f"wheels/{_lib(h).name}: {size} bytes, pylock.toml says {size + 1}"


def _lock_hash_edited(h):
    lock = (h / "pylock.toml").read_text()
    sha = re.search(r'lib-2\.0.*?sha256 = "([0-9a-f]{64})"', lock, re.S)[1]
    _edit(h / "pylock.toml", sha, "0" * 64)
    return f"simple/ lists {_lib(h).name} with sha256 {sha[:16]}..., pylock.toml says {'0' * 16}..."


def _pins_differ(h):
    _meta(h, lambda d: d["inputs"]["requirements"].append("lib<2"))
    return "wh.json requirement lib<2 is not met: pylock.toml pins lib 2.0"


def _count_differs(h):
    _meta(h, lambda d: d.update(count=3))
    return "wh.json counts 3 wheels, pylock.toml lists 2"


def _bootstrap_missing_dep(h):
    dep = next((h / "bootstrap").glob("tinyclick-*.whl"))
    dep.unlink()
    lock = read_pylock(h / "bootstrap")  # the lock rewritten without it, as a careless re-stage would
    write_pylock(h / "bootstrap", dataclasses.replace(lock, files=tuple(f for f in lock.files if f.name != "tinyclick")))
    _meta(h, lambda d: d["bootstrap"].update(count=1))
    return "bootstrap/ is incomplete for the target: wh needs tinyclick>=1 (not installed)"


def _bootstrap_own_wheel_missing(h):
    _meta(h, lambda d: d["bootstrap"].update(wh_wheel="wh-9.9-py3-none-any.whl"))
    return "bootstrap/ lacks wh's own wheel wh-9.9-py3-none-any.whl"


def _patch_payload_changed(h):
    (h / "patches" / "fix" / "app_init.py").write_text(PAYLOAD + "import os  # injected\n")
    return "patches/fix/fix.toml: payload patches/fix/app_init.py has sha256"


def _owned_path_missing(h):
    (h / "capture_target.py").unlink()
    return "capture_target.py is missing (wh.json says wh wrote it)"


CASES = {
    "flipped byte in a wheel": _flip_wheel,
    "missing wheel": _missing_wheel,
    "size change": _size_change,
    "lock entry edited (version)": _lock_entry_edited,
    "lock entry edited (sha256)": _lock_hash_edited,
    "lock entry edited (size)": _lock_size_edited,
    "wh.json pins differ": _pins_differ,
    "wh.json count differs": _count_differs,
    "bootstrap missing a dependency": _bootstrap_missing_dep,
    "bootstrap missing wh itself": _bootstrap_own_wheel_missing,
    "patch payload changed": _patch_payload_changed,
    "owned file missing": _owned_path_missing,
}


@pytest.mark.parametrize("damage", list(CASES), ids=list(CASES))
def test_each_kind_of_damage_is_named_on_its_own_line(house, damage):
    expected = CASES[damage](house)
    r = wh("verify", house)
    assert r.returncode == 1, r.stdout + r.stderr
    problems = _problems(r)
    assert any(expected.search(p) if isinstance(expected, re.Pattern) else p.startswith(expected)
               for p in problems), (expected, problems)
    assert f"failed: {len(problems)} problem" in r.stdout
    data = json.loads(wh("verify", house, "--json").stdout)
    assert data["ok"] is False and data["problems"] == problems


def test_structural_check_without_hashes_names_structure_but_not_a_flipped_byte(house):
    _flip(_lib(house))
    assert verify_wheelhouse(house, hashes=False).problems == ()
    assert verify_wheelhouse(house, hashes=True).problems  # the hash finds it
    require_intact([house])  # install's structural check: the flip is verify_files' to find
    (house / "capture_target.py").unlink()
    with pytest.raises(WheelhouseDamaged, match="capture_target.py is missing"):
        require_intact([house])


def test_install_refuses_a_wheelhouse_whose_lock_and_record_disagree(house, tmp_path):
    _pins_differ(house)
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv)
    assert r.returncode == 1 and "nothing was installed" in r.stderr and "lib<2" in r.stderr, r.stderr
    assert "wh verify" in r.stderr and not venv.exists()


@pytest.mark.parametrize("command", ["install", "pack", "install --dry-run"])
def test_install_and_pack_judge_bootstrap_s_requirements_by_install_s_rule(house, tmp_path, command):
    """carry sits below install, so install's closure rule is handed to the check: each command still uses it."""
    expected = _bootstrap_missing_dep(house)
    args = {"install": ("--venv", tmp_path / "venv"), "pack": ("-o", tmp_path / "wh.tar"),
            "install --dry-run": ("--venv", tmp_path / "venv", "--dry-run")}[command]
    r = wh(command.split()[0], house, *args)
    assert r.returncode == 1 and expected in r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "venv").exists() and not (tmp_path / "wh.tar").exists()


def test_not_a_wheelhouse_is_bad_input(tmp_path):
    (tmp_path / "empty").mkdir()
    r = wh("verify", tmp_path / "empty")
    assert r.returncode == 2 and "wh.json" in r.stderr, r.stderr
    (tmp_path / "notes.txt").write_text("not a tar")
    for source, says in ((tmp_path / "notes.txt", "neither a wheelhouse folder nor an archive"),
                         (tmp_path / "gone.tar.part-0001", "does not exist")):
        r = wh("verify", source)
        assert r.returncode == 2 and says in r.stderr and r.stdout == "", r.stderr


def test_a_copy_elsewhere_verifies_the_same(house, tmp_path):
    copy = tmp_path / "moved" / "elsewhere"
    shutil.copytree(house, copy)
    assert wh("verify", copy).returncode == 0


def test_the_engine_record_and_its_exported_files_are_checked_against_the_lock(tmp_path):
    from nvidia_fixtures import make_wheelhouse
    from wheelmaker import make_wheel

    wheel = make_wheel(tmp_path / "w", "engine", "0.1.dev1", modules={"engine/__init__.py": ""})
    house = make_wheelhouse(tmp_path / "h", [wheel], extra_meta={"engine": {
        "name": "engine", "commit": "abc", "wheel": f"wheels/{wheel.name}", "sha256": "1" * 64,
        "artifacts": [{"path": "patches/engine/k.py", "sha256": "2" * 64}]}})
    (house / "patches" / "engine").mkdir(parents=True)
    (house / "patches" / "engine" / "k.py").write_text("X = 1\n")
    problems = verify_wheelhouse(house).problems
    assert problems[0] == (f"wh.json's engine wheel wheels/{wheel.name} has sha256 1111111111111111..., "
                           f"pylock.toml says {sha256_file(wheel)[:16]}...")
    assert problems[1].startswith("patches/engine/k.py: sha256 ") and "wh.json's engine artifact" in problems[1]
    assert verify_wheelhouse(house).summary["engine"] == {"name": "engine", "commit": "abc", "wheel": f"wheels/{wheel.name}"}


def test_the_summary_names_each_gpu_s_compute_capability():
    """Before: `GPUs: NVIDIA H200 sm ?` (the summary asked for a key the profile does not have)."""
    from wheelhouse.cli.carry import _print_summary

    lines = []

    class Ui:
        def data(self, text):
            lines.append(text)

    _print_summary(Ui(), {"target": {"describe": "cp312", "platform": "linux_x86_64", "driver_version": "580",
                                     "gpus": [{"name": "NVIDIA H200", "compute_capability": "9.0"}]}})
    assert "GPUs: NVIDIA H200 sm 9.0, driver 580" in lines[0]


def test_an_archive_verdict_names_no_temporary_folder(house, tmp_path):
    # issue 32 (10): `wh verify X.tar --json` reported /tmp/wh-unpacked-.../wheelhouse, gone once it returned
    tar = tmp_path / "house.tar"
    assert wh("pack", house, "-o", tar).returncode == 0
    ok = wh("verify", tar, "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    data = json.loads(ok.stdout)
    assert "wh-unpacked-" not in ok.stdout + ok.stderr
    assert data["archive"] == str(tar) and data["wheelhouse"].startswith(f"{tar}:")  # the folder inside it
