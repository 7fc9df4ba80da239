"""resources: the bundled data folders (doctor probes and rules, manifests, engine recipes) and the capture script."""

from __future__ import annotations

from wheelhouse.resources import capture_script, data_dir, doctor_dir, engine_src_dir, manifests_dir


def test_bundled_folders_exist_and_hold_their_data():
    assert (manifests_dir() / "demo.toml").is_file()
    assert list((doctor_dir() / "rules").glob("*.toml")) and (doctor_dir() / "probes").is_dir()
    assert (engine_src_dir() / "freetoken-pr70.toml").is_file()
    assert data_dir("manifests") == manifests_dir()


def test_capture_script_runs_without_site_packages(tmp_path):
    """It runs on the box before anything is installed: with -I -S (no site-packages, no user site) it still works."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-I", "-S", str(capture_script())], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["python_version"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
