"""`wh links`: real gcc-built sonames, a real linker, exact undo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvidia_fixtures import build_cudart, make_wheelhouse, need_gcc, nvidia_runtime_wheel, tree_listing

from wheelhouse.env.links import apply_links, nvidia_lib_dirs, plan_links, read_record, record_path, undo_links
from wheelhouse.install.wheel import install_wheels

pytestmark = need_gcc


def wh(*args):
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def site(tmp_path):
    """A site-packages-like folder with the NVIDIA runtime wheel really installed into it."""
    root = tmp_path / "site"
    wheel = nvidia_runtime_wheel(tmp_path / "w", tmp_path / "build")
    scheme = {k: str(root) for k in ("purelib", "platlib")} | {"scripts": str(tmp_path / "bin"),
                                                                 "data": str(tmp_path), "headers": str(tmp_path / "inc")}
    install_wheels([wheel], scheme, sys.executable)
    return root


def link_cudart(tmp_path: Path, libdir: Path) -> subprocess.CompletedProcess:
    src = tmp_path / "main.c"
    src.write_text("int cudaRuntimeGetVersion(int *v);\nint main(void){int v=0; cudaRuntimeGetVersion(&v);"
                   " return v == 13000 ? 0 : 1;}\n")
    return subprocess.run(["gcc", str(src), f"-L{libdir}", "-lcudart", "-o", str(tmp_path / "main")],
                          capture_output=True, text=True)


def test_lcudart_fails_before_fix_and_links_after(site, tmp_path):
    lib = site / "nvidia" / "cu13" / "lib"
    before = link_cudart(tmp_path, lib)
    assert before.returncode != 0 and "cudart" in before.stderr
    r = wh("links", "--fix", "--path", site)
    assert r.returncode == 0, r.stderr
    after = link_cudart(tmp_path, lib)
    assert after.returncode == 0, after.stderr
    run = subprocess.run([tmp_path / "main"], env={"LD_LIBRARY_PATH": str(lib)})
    assert run.returncode == 0  # the binary loads the versioned soname and calls into it
    # The build's hard-coded -L<pkg>/lib64 works too.
    assert link_cudart(tmp_path, site / "nvidia" / "cu13" / "lib64").returncode == 0


def test_check_changes_nothing_and_exits_1(site):
    before = tree_listing(site)
    r = wh("links", "--check", "--path", site, "--json")
    assert r.returncode == 1
    data = json.loads(r.stdout)
    actions = {(c["action"], Path(c["path"]).name) for c in data["changes"]}
    assert ("symlink", "libcudart.so") in actions and ("lib64", "lib64") in actions
    assert tree_listing(site) == before
    assert wh("links", "--fix", "--path", site).returncode == 0
    r = wh("links", "--check", "--path", site)
    assert r.returncode == 0 and "nothing to change" in r.stderr


def test_undo_restores_the_exact_previous_tree(site):
    before = tree_listing(site)
    lib = site / "nvidia" / "cu13" / "lib"
    # A stub libcuda.so that links into the stubs folder: it would shadow the driver.
    os.symlink("stubs/libcuda.so", lib / "libcuda.so")
    with_stub = tree_listing(site)
    r = wh("links", "--fix", "--path", site, "--json")
    assert r.returncode == 0, r.stderr
    changes = json.loads(r.stdout)["changes"]
    removed = [c for c in changes if c["action"] == "remove-stub"]
    assert len(removed) == 1 and removed[0]["path"] == str(lib / "libcuda.so")
    assert not os.path.lexists(lib / "libcuda.so")
    assert Path(removed[0]["target"]).is_symlink()  # moved aside, not deleted
    assert (lib / "stubs" / "libcuda.so").exists()  # the toolkit's own stubs folder is left alone
    # A second --fix has nothing to do and records nothing new.
    assert json.loads(wh("links", "--fix", "--path", site, "--json").stdout)["changes"] == []
    assert len(read_record(record_path(site))) == len(changes)
    r = wh("links", "--undo", "--path", site)
    assert r.returncode == 0, r.stderr
    assert tree_listing(site) == with_stub
    os.unlink(lib / "libcuda.so")
    assert tree_listing(site) == before


def test_undo_reverses_only_recorded_changes(site):
    lib = site / "nvidia" / "cu13" / "lib"
    apply_links(plan_links([site]), record_path(site))
    (lib / "mine.txt").write_text("made by someone else\n")
    result = undo_links(record_path(site))
    assert {c.action for c in result.undone} == {"symlink", "lib64"} and not result.refused
    assert (lib / "mine.txt").exists()
    assert not record_path(site).exists()
    assert undo_links(record_path(site)).undone == ()


def test_a_real_driver_outside_the_env_is_never_touched(site, tmp_path):
    """A libcuda.so inside the env pointing at a (big) system driver is not a stub: kept."""
    driver_dir = tmp_path / "usr-lib"
    driver_dir.mkdir()
    driver = driver_dir / "libcuda.so.1"
    driver.write_bytes(b"\x7fELF" + os.urandom(3 << 20))
    lib = site / "nvidia" / "cu13" / "lib"
    os.symlink(driver, lib / "libcuda.so")
    changes = plan_links([site])
    assert not [c for c in changes if c.action == "remove-stub"]
    apply_links(changes, record_path(site))
    undo_links(record_path(site))
    assert driver.exists() and (lib / "libcuda.so").is_symlink()


def test_driver_library_names_are_never_created(tmp_path):
    lib = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.1").write_bytes(build_cudart(tmp_path / "b", soname="libcuda.so.1"))
    (lib / "libnvrtc.so.13").write_bytes(b"x")
    (lib / "libnvrtc.so.13.0.88").write_bytes(b"x")
    names = {Path(c.path).name: c.target for c in plan_links([tmp_path / "site"]) if c.action == "symlink"}
    assert "libcuda.so" not in names
    assert names["libnvrtc.so"] == "libnvrtc.so.13"  # the soname, not the full version


def test_lib_dirs_cover_every_package_layout(tmp_path):
    root = tmp_path / "site"
    for d in ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib", "nvidia/cublas/lib64", "nvidia/cu13/lib/stubs"):
        (root / d).mkdir(parents=True)
    os.symlink("lib", root / "nvidia" / "cuda_runtime" / "lib64")
    dirs = [str(p.relative_to(root)) for p in nvidia_lib_dirs([root])]
    assert dirs == ["nvidia/cu13/lib", "nvidia/cublas/lib64", "nvidia/cuda_runtime/lib"]


def test_links_python_flag_reads_that_interpreters_site(tmp_path):
    venv = tmp_path / "venv"
    house = make_wheelhouse(tmp_path / "house", [nvidia_runtime_wheel(tmp_path / "w", tmp_path / "b")])
    assert wh("install", house, "--venv", venv, "--no-links").returncode == 0
    r = wh("links", "--check", "--python", venv / "bin" / "python", "--json")
    assert r.returncode == 1
    assert any(c["path"].endswith("nvidia/cu13/lib/libcudart.so") for c in json.loads(r.stdout)["changes"])


@pytest.mark.registry
def test_real_nvidia_cuda_runtime_wheel(tmp_path):
    """The real cu13 runtime wheel: only versioned sonames; -lcudart links after --fix; undo restores."""
    dl = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d",
                         str(tmp_path / "dl"), "nvidia-cuda-runtime>=13,<14"], capture_output=True, text=True)
    assert dl.returncode == 0, dl.stderr
    wheel = next((tmp_path / "dl").glob("*.whl"))
    house = make_wheelhouse(tmp_path / "house", [wheel])
    venv = tmp_path / "venv"
    assert wh("install", house, "--venv", venv, "--no-links").returncode == 0
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    lib = nvidia_lib_dirs([site])[0]
    assert list(lib.glob("libcudart.so.*")) and not (lib / "libcudart.so").exists()
    before = tree_listing(site)
    assert link_cudart(tmp_path, lib).returncode != 0
    assert wh("links", "--fix", "--python", venv / "bin" / "python").returncode == 0
    assert link_cudart(tmp_path, lib).returncode == 0
    assert wh("links", "--undo", "--python", venv / "bin" / "python").returncode == 0
    assert tree_listing(site) == before


def test_libs_of_a_parent_venv_count_for_a_child_with_system_site_packages(tmp_path):
    """Images ship torch and nvidia/cu13/lib in a venv; a serving venv made from it with
    --system-site-packages loads those libraries, so links, env and the doctor must look there."""
    parent = tmp_path / "parent"
    house = make_wheelhouse(tmp_path / "house", [nvidia_runtime_wheel(tmp_path / "w", tmp_path / "b")])
    assert wh("install", house, "--venv", parent, "--no-links").returncode == 0
    empty = make_wheelhouse(tmp_path / "empty", [])
    child = tmp_path / "child"
    r = wh("install", empty, "--venv", child, "--system-site-packages", "--python", parent / "bin" / "python", "--no-links")
    assert r.returncode == 0, r.stderr
    child_py = child / "bin" / "python"
    parent_lib = next(parent.glob("lib/python*/site-packages/nvidia/cu13/lib"))
    r = wh("links", "--check", "--python", child_py, "--json")
    assert r.returncode == 1
    assert any(c["path"] == str(parent_lib / "libcudart.so") for c in json.loads(r.stdout)["changes"])
    r = wh("env", "--json", "--python", child_py)
    assert str(parent_lib) in json.dumps(json.loads(r.stdout))
    r = wh("doctor", "--python", child_py, "--check", "links:sonames", "--json")
    result = next(x for x in json.loads(r.stdout)["results"] if x["id"] == "links:sonames")
    assert result["verdict"] == "ok" and str(parent_lib) in result["evidence"]  # named; nothing here needs it
    # --fix records the change in the child's own record, and --undo restores the parent exactly.
    before = tree_listing(parent)
    assert wh("links", "--fix", "--python", child_py).returncode == 0
    assert (parent_lib / "libcudart.so").is_symlink()
    assert wh("links", "--undo", "--python", child_py).returncode == 0
    assert tree_listing(parent) == before


def test_first_install_into_a_new_child_venv_links_the_parents_libs(tmp_path):
    """The venv wh creates must be inspected after its parent-venv .pth exists, or the first
    install would not see (nor link) the parent's NVIDIA libraries."""
    parent = tmp_path / "parent"
    house = make_wheelhouse(tmp_path / "house", [nvidia_runtime_wheel(tmp_path / "w", tmp_path / "b")])
    assert wh("install", house, "--venv", parent, "--no-links").returncode == 0
    parent_lib = next(parent.glob("lib/python*/site-packages/nvidia/cu13/lib"))
    r = wh("install", make_wheelhouse(tmp_path / "empty", []), "--venv", tmp_path / "child", "--system-site-packages",
           "--python", parent / "bin" / "python", "--json")
    assert r.returncode == 0, r.stderr
    assert str(parent_lib / "libcudart.so") in [c["path"] for c in json.loads(r.stdout)["links"]]
    assert (parent_lib / "libcudart.so").is_symlink()


# --- records: undo only what wh made (issue 11.8, 11.16) ---------------------------------------------

def _write_record(site: Path, changes: list[dict]) -> None:
    rec = record_path(site)
    rec.parent.mkdir(parents=True, exist_ok=True)
    rec.write_text(json.dumps({"schema": "wh-links/1", "changes": changes}))


def test_a_planted_record_cannot_rename_or_delete_files_elsewhere(site, tmp_path):
    """A wheel shipping .wh/links.json made `--undo` rename any file to a path of its choosing."""
    secret = tmp_path / "home" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("keep me\n")
    other_link = tmp_path / "home" / "a-link"
    os.symlink("secret.txt", other_link)
    lib = site / "nvidia" / "cu13" / "lib"
    assert wh("links", "--fix", "--path", site).returncode == 0
    made = read_record(record_path(site))
    planted = [
        {"action": "remove-stub", "path": str(tmp_path / "home" / "moved.txt"), "target": str(secret), "reason": "x"},
        {"action": "remove-stub", "path": str(lib / "libcuda.so"), "target": str(secret), "reason": "x"},
        {"action": "symlink", "path": str(other_link), "target": "secret.txt", "reason": "x"},
        {"action": "lib64", "path": str(tmp_path / "home" / "lib64"), "target": "lib", "reason": "x"},
    ]
    _write_record(site, [c.to_json() for c in made] + planted)
    r = wh("links", "--undo", "--path", site)
    assert r.returncode == 1, r.stderr
    assert "error: 4 recorded change(s) not undone" in r.stderr and "hint: " in r.stderr
    for p in planted:
        assert p["path"] in r.stderr
    assert secret.read_text() == "keep me\n" and other_link.is_symlink()
    assert not (tmp_path / "home" / "moved.txt").exists() and not (lib / "libcuda.so").exists()
    assert not (lib / "libcudart.so").exists()  # wh's own changes were undone
    # The refused entries stay recorded; wh's own are gone from the record.
    assert [c.to_json() for c in read_record(record_path(site))] == planted


def test_fix_with_a_relative_path_records_absolute_paths_and_undo_works_from_elsewhere(site, tmp_path):
    before = tree_listing(site)
    r = subprocess.run([sys.executable, "-m", "wheelhouse", "links", "--fix", "--path", "site"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    changes = read_record(record_path(site))
    assert changes and all(os.path.isabs(c.path) for c in changes)
    r = subprocess.run([sys.executable, "-m", "wheelhouse", "links", "--undo", "--path", str(site)], cwd="/",
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert tree_listing(site) == before


def test_a_record_with_relative_paths_is_kept_not_deleted(site, tmp_path):
    """An older wh recorded relative paths: undo from another folder used to revert nothing and delete the record."""
    apply_links(plan_links([site]), record_path(site))
    rel = [dict(c.to_json(), path=os.path.relpath(c.path, tmp_path)) for c in read_record(record_path(site))]
    _write_record(site, rel)
    r = subprocess.run([sys.executable, "-m", "wheelhouse", "links", "--undo", "--path", str(site)], cwd="/",
                       capture_output=True, text=True)
    assert r.returncode == 1 and "is not absolute" in r.stderr, r.stderr
    assert [c.to_json() for c in read_record(record_path(site))] == rel
    assert (site / "nvidia" / "cu13" / "lib" / "libcudart.so").is_symlink()


def test_undo_refuses_a_link_that_was_replaced_and_keeps_its_entry(site):
    lib = site / "nvidia" / "cu13" / "lib"
    apply_links(plan_links([site]), record_path(site))
    (lib / "libcudart.so").unlink()
    (lib / "libcudart.so").write_text("a real file someone put here\n")
    result = undo_links(record_path(site))
    assert [Path(r.change.path).name for r in result.refused] == ["libcudart.so"]
    assert "no longer the link wh made" in result.refused[0].reason
    assert (lib / "libcudart.so").read_text() == "a real file someone put here\n"
    assert [Path(c.path).name for c in read_record(record_path(site))] == ["libcudart.so"]
    assert not (site / "nvidia" / "cu13" / "lib64").exists()  # the rest was undone


def test_a_symlink_loop_in_a_lib_folder_is_skipped_with_a_note(site):
    lib = site / "nvidia" / "cu13" / "lib"
    os.symlink("libloop.so.1", lib / "libloop.so.1")
    r = wh("links", "--fix", "--path", site, "--json")
    assert r.returncode == 0, r.stderr
    assert f"note: skipped {lib / 'libloop.so.1'}: a symlink loop" in r.stderr
    assert json.loads(r.stdout)["skipped"] == [str(lib / "libloop.so.1")]
    assert not os.path.lexists(lib / "libloop.so") and (lib / "libcudart.so").is_symlink()
