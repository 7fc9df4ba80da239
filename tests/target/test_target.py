import json
from pathlib import Path
import subprocess
import sys

import pytest
from packaging import tags as ptags

from wheelhouse.target import capture as capture_target
from wheelhouse.errors import TargetError
from wheelhouse.target import host_target, load_target, target_from_flags, target_from_json


def test_flags_tags_match_packaging_for_the_host_shape():
    """Our stdlib tag logic equals packaging's for this very interpreter."""
    host = host_target()
    plat = next(p for p in host.platforms if p.startswith(("manylinux_", "musllinux_")))
    ours = target_from_flags(host.python_version, [plat], "cp", host.abi)
    assert list(ours.tags) == [str(t) for t in ptags.sys_tags()]


def test_manylinux_platform_means_that_glibc_and_every_older_one():
    t = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
    assert t.wheel_rank("x-1-cp312-cp312-manylinux_2_25_x86_64.whl") is not None
    assert t.wheel_rank("x-1-cp312-cp312-manylinux2014_x86_64.whl") is not None
    assert t.wheel_rank("x-1-cp312-cp312-manylinux_2_36_x86_64.whl") is None
    assert t.wheel_rank("x-1-cp311-cp311-manylinux_2_17_x86_64.whl") is None
    assert t.wheel_rank("x-1-cp312-cp312-manylinux_2_17_aarch64.whl") is None
    # a better (newer) manylinux ranks ahead of an older one
    assert t.wheel_rank("x-1-cp312-cp312-manylinux_2_28_x86_64.whl") < t.wheel_rank("x-1-cp312-cp312-manylinux_2_17_x86_64.whl")
    assert t.libc == ("glibc", "2.35")


def test_markers_are_judged_for_the_target_not_the_host():
    t310 = target_from_flags("3.10", ["manylinux_2_17_aarch64"])
    assert t310.evaluate('python_version < "3.12"')
    assert t310.evaluate('platform_machine == "aarch64"')
    t312 = target_from_flags("3.12", ["musllinux_1_2_x86_64"])
    assert not t312.evaluate('python_version < "3.12"')
    assert t312.libc == ("musl", "1.2")


def test_capture_script_runs_standalone_without_wh(tmp_path):
    script = tmp_path / "capture_target.py"
    script.write_bytes(Path(capture_target.__file__).read_bytes())
    out = tmp_path / "t.json"
    subprocess.run([sys.executable, "-I", str(script), "-o", str(out)], check=True, cwd=tmp_path)
    data = json.loads(out.read_text())
    assert data["compatible_tags"][0].startswith(f"cp{sys.version_info[0]}{sys.version_info[1]}-")
    assert set(data["marker_environment"]) >= {"python_full_version", "sys_platform", "platform_machine"}
    t = load_target(out)
    assert t.python_version == f"{sys.version_info[0]}.{sys.version_info[1]}"


def test_pex_complete_platform_is_accepted():
    pex = {
        "marker_environment": dict(capture_target.marker_environment(), python_version="3.12", python_full_version="3.12.3"),
        "compatible_tags": ["cp312-cp312-manylinux_2_35_x86_64", "cp312-abi3-manylinux_2_35_x86_64", "py3-none-any"],
    }
    t = target_from_json(pex)
    assert t.source == "pex" and t.abi == "cp312" and t.python_version == "3.12"


def test_bundled_kaggle_profile(repo_root):
    t = load_target(repo_root / "manifests" / "targets" / "kaggle-4xl4.json")
    assert t.python_version == "3.12" and t.glibc == (2, 35) and t.machine == "x86_64"
    assert len(t.gpus) == 4 and {g.sm for g in t.gpus} == {"sm_89"}
    assert t.gpus[0].memory_total_mib == 23034 and t.driver_version.startswith("580")


@pytest.mark.parametrize("bad", ["3", "three", ""])
def test_bad_python_version_is_a_clear_error(bad):
    with pytest.raises(TargetError, match="python-version"):
        target_from_flags(bad, ["manylinux_2_35_x86_64"])


def test_missing_target_file_names_it(tmp_path):
    with pytest.raises(TargetError, match="does not exist"):
        load_target(tmp_path / "nope.json")


def test_capture_script_tags_equal_packagings_on_this_host(tmp_path):
    """The stdlib-only script (what runs on a box without packaging) lists packaging's sys_tags exactly."""
    script = tmp_path / "capture_target.py"
    script.write_bytes(Path(capture_target.__file__).read_bytes())
    # -I -S: no site-packages, so the script cannot borrow packaging from this environment
    out = subprocess.run([sys.executable, "-I", "-S", str(script)], check=True, capture_output=True, text=True).stdout
    data = json.loads(out)
    assert data["compatible_tags"] == [str(t) for t in ptags.sys_tags()]
    assert data["abi"] == next(iter(ptags.sys_tags())).abi



def test_wheel_rank_reads_compressed_tag_sets_and_build_tags():
    t = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
    many = "numpy-2.0.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    assert t.wheel_rank(many) == t.tag_rank("cp312-cp312-manylinux_2_17_x86_64")
    assert t.wheel_rank("six-1.16.0-1build-py2.py3-none-any.whl") == t.tag_rank("py3-none-any")
    assert t.wheel_rank("six-1.16.0.tar.gz") is None and t.wheel_rank("not-a-wheel.whl") is None
    assert t.wheel_rank(many) < t.wheel_rank("numpy-2.0.0-cp312-abi3-manylinux_2_17_x86_64.whl")


def _other_cpythons() -> list[str]:
    """CPython 3.7+ interpreters on this machine (pyenv, PATH), one per minor version."""
    import glob
    import shutil

    found: dict[str, str] = {}
    candidates = sorted(glob.glob(str(Path.home() / ".pyenv" / "versions" / "3.*" / "bin" / "python3")))
    candidates += [p for m in range(7, 15) if (p := shutil.which(f"python3.{m}"))]
    for exe in candidates:
        proc = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True)
        version = proc.stdout.strip()
        if proc.returncode == 0 and tuple(map(int, version.split("."))) >= (3, 7):
            found.setdefault(version, exe)
    return list(found.values())


@pytest.mark.parametrize("exe", _other_cpythons() or [pytest.param(None, marks=pytest.mark.skip(reason="no other CPython here"))])
def test_capture_script_on_other_cpythons_lists_packagings_tags(exe, tmp_path):
    """On 3.7 (cp37m) to 3.13, without packaging in that interpreter, the script lists what packaging would there."""
    script = tmp_path / "capture_target.py"
    script.write_bytes(Path(capture_target.__file__).read_bytes())
    data = json.loads(subprocess.run([exe, "-I", "-S", str(script)], check=True, capture_output=True, text=True).stdout)
    major, minor = map(int, data["python_version"].split("."))
    assert data["abi"] == (f"cp{major}{minor}m" if minor < 8 else f"cp{major}{minor}")
    platforms = list(ptags.platform_tags())  # the same machine, so the same platforms
    expected = [str(t) for t in ptags.cpython_tags((major, minor), [data["abi"]], platforms)]
    expected += [str(t) for t in ptags.compatible_tags((major, minor), f"cp{major}{minor}", platforms)]
    assert data["compatible_tags"] == expected
