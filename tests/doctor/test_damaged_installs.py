"""Hostile round 8: half-written installs, unreadable metadata and a noisy interpreter start.

Real gcc-built extension modules unpacked into real venvs, then damaged the way a killed or sloppy
install damages them. Each was a false green (the doctor said ok, or said nothing, about a
distribution whose extension cannot load) or a doctor that crashed and wrote no JSON / JUnit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import have_toolchain, install_dist, make_venv, site_packages
from schema_check import validate
from wheelhouse.doctor import run_doctor

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
SCHEMA = Path(__file__).parents[1] / "support" / "doctor_schema.json"


def test_an_extension_module_its_record_lists_but_that_is_not_on_disk_is_a_fail(tmp_path, exts):
    # A killed install (or a cleanup that went too far) left the package without its lazily loaded
    # extension. find_spec of the dotted name is then None: that is no reason to call it "loaded".
    py = make_venv(tmp_path / "venv")
    site = install_dist(py, tmp_path / "w", "halfinst", {"halfinst/__init__.py": "X = 1\n", "halfinst/sub/__init__.py": ""},
                    {f"halfinst/sub/_ext{SUFFIX}": exts["ok"]})
    (site / "halfinst" / "sub" / f"_ext{SUFFIX}").unlink()
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:halfinst")
    assert r is not None and r.verdict == "fail", r
    assert f"halfinst/sub/_ext{SUFFIX}" in r.evidence and "not on disk" in r.evidence
    # A reinstall mends it; --fix must not uninstall a distribution that works once it is whole.
    assert r.fix is None and "drop" not in (r.data or {}) and "reinstall halfinst" in (r.hint or "")


def test_a_distribution_with_metadata_that_is_not_utf8_is_still_loaded(tmp_path, exts):
    # importlib.metadata cannot read a latin-1 METADATA (an old author name): the package still imports,
    # so the doctor must still load its extension modules, not skip the distribution without a word.
    py = make_venv(tmp_path / "venv")
    site = install_dist(py, tmp_path / "w", "latinish", {"latinish/__init__.py": "X = 1\n"},
                    {f"latinish/_ext{SUFFIX}": exts["undef"]})
    meta = site / "latinish-1.0.dist-info" / "METADATA"
    meta.write_bytes(meta.read_bytes().replace(b"Version: 1.0\n", b"Version: 1.0\nAuthor: Ren\xe9 Caf\xe9\n"))
    report = run_doctor(str(py), checks=["native"], timeout=20)
    r = report.get("native:latinish")
    assert r is not None and r.verdict == "fail", [x.id for x in report.results]
    assert "undefined symbol: wh_missing_symbol" in r.evidence
    assert report.exit_code() == 1


def test_a_dist_info_without_record_and_a_record_with_missing_files_are_not_green(tmp_path, exts):
    # Installers write RECORD last: a .dist-info without one is an install that did not finish, and a
    # RECORD naming files that are gone is a damaged one. Neither may pass as a healthy environment.
    py = make_venv(tmp_path / "venv")
    w = tmp_path / "w"
    site = install_dist(py, w, "norecord", {"norecord/__init__.py": "X = 1\n"}, {f"norecord/_ext{SUFFIX}": exts["undef"]})
    (site / "norecord-1.0.dist-info" / "RECORD").unlink()
    install_dist(py, w, "gonefile", {"gonefile/__init__.py": "from .core import X\n", "gonefile/core.py": "X = 1\n"}, {})
    (site / "gonefile" / "core.py").unlink()
    install_dist(py, w, "intact", {"intact/__init__.py": "X = 1\n"}, {})
    report = run_doctor(str(py), checks=["install"], timeout=20)
    r = report.get("install:records")
    assert r is not None and r.verdict == "fail", [x.id for x in report.results]
    assert "norecord 1.0" in r.evidence and "no RECORD" in r.evidence
    assert "gonefile 1.0" in r.evidence and "gonefile/core.py" in r.evidence
    assert "intact" not in r.evidence
    assert report.exit_code() == 1


def test_a_dist_info_a_system_package_manager_wrote_without_record_is_not_damage(tmp_path):
    # Fedora's RPM macros remove RECORD and write INSTALLER "rpm": the package manager owns those files. A pip
    # install killed before RECORD (its INSTALLER says pip) still is a half-written install.
    py = make_venv(tmp_path / "venv")
    site = install_dist(py, tmp_path / "w", "fromrpm", {"fromrpm/__init__.py": "X = 1\n"}, {})
    (site / "fromrpm-1.0.dist-info" / "RECORD").unlink()
    (site / "fromrpm-1.0.dist-info" / "INSTALLER").write_text("rpm\n")
    assert run_doctor(str(py), checks=["install:records"], timeout=20).get("install:records").verdict == "ok"
    (site / "fromrpm-1.0.dist-info" / "INSTALLER").write_text("pip\n")
    r = run_doctor(str(py), checks=["install:records"], timeout=20).get("install:records")
    assert r.verdict == "fail" and "fromrpm 1.0: no RECORD" in r.evidence


def test_an_intact_environment_passes_install_records(tmp_path):
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "intact", {"intact/__init__.py": "X = 1\n"}, {})
    r = run_doctor(str(py), checks=["install:records"], timeout=20).get("install:records")
    assert r is not None and r.verdict == "ok", r


def test_a_pth_file_that_prints_at_startup_loses_neither_json_nor_junit(tmp_path):
    # A .pth line runs at every interpreter start; one that prints (a vendor's banner) must not crash the
    # doctor after its probes ran: the JSON and the JUnit are what CI reads.
    py = make_venv(tmp_path / "venv")
    (site_packages(py) / "banner.pth").write_text("import sys; print('welcome to the cluster')\n")
    junit = tmp_path / "doctor.xml"
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "deps",
                           "--json", "--junit", str(junit)], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    assert validate(report, json.loads(SCHEMA.read_text())) == []
    assert junit.is_file() and "<testsuite" in junit.read_text()
    (r,) = [x for x in report["results"] if x["group"] == "deps"]
    assert r["verdict"] == "ok", r  # the banner is read past (wheelhouse.script_answer), not an error


_NASTY_INIT = r'''import os
raise ImportError("\x1b[31mCUDA error\x1b[0m\x00 in " + os.fsdecode(b"/opt/caf\xe9/libx.so"))
'''


@pytest.mark.parametrize("as_json", [True, False])
def test_an_error_with_terminal_colours_and_undecodable_bytes_still_writes_junit_and_json(tmp_path, exts, as_json):
    # A colourised error message (ESC, NUL: not allowed in XML 1.0) and a path that is not UTF-8 (a lone
    # surrogate once decoded): the JUnit file must be written and parse, the JSON too, the run stays red.
    import xml.etree.ElementTree as ET

    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "nasty", {"nasty/__init__.py": _NASTY_INIT}, {f"nasty/_ext{SUFFIX}": exts["ok"]})
    junit = tmp_path / "doctor.xml"
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "native",
                           "--junit", str(junit), *(["--json"] if as_json else [])],
                          capture_output=True, timeout=300, env={**__import__("os").environ, "PYTHONIOENCODING": "utf-8"})
    assert proc.returncode == 1, proc.stderr.decode("utf-8", "replace")
    suite = ET.parse(junit).getroot()
    (case,) = [c for c in suite.iter("testcase") if c.get("name") == "native:nasty"]
    failure = case.find("failure")
    assert failure is not None and "CUDA error" in failure.get("message") and "caf" in failure.text
    if as_json:
        (r,) = [x for x in json.loads(proc.stdout)["results"] if x["id"] == "native:nasty"]
        assert r["verdict"] == "fail" and "CUDA error" in r["evidence"]
    else:
        assert b"native:nasty" in proc.stdout


def test_an_import_that_ends_the_interpreter_with_status_0_is_a_fail_that_says_so(tmp_path):
    # os._exit(0) in a module (a CLI module run at import) ends the probe "successfully", before its result.
    import os

    from wheelhouse.doctor.imports import import_modules

    (tmp_path / "exits_quietly.py").write_text("import os\nos._exit(0)\n")
    out = import_modules(sys.executable, ["exits_quietly", "json"], timeout=20,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    o = out["exits_quietly"]
    assert not o.ok and o.isolated
    assert "None" not in o.summary and "exit status 0" in o.summary, o.summary
    assert out["json"].ok


def test_the_requirements_of_a_distribution_with_metadata_that_is_not_utf8_are_judged(tmp_path):
    # deps listed what the interpreter imports through importlib.metadata, which cannot read a latin-1
    # METADATA: the distribution was skipped, so its unmet requirement passed unseen.
    py = make_venv(tmp_path / "venv")
    site = install_dist(py, tmp_path / "w", "latinreq", {"latinreq/__init__.py": "X = 1\n"}, {},
                    requires=["zmq-missing-xyz>=1"])
    meta = site / "latinreq-1.0.dist-info" / "METADATA"
    meta.write_bytes(meta.read_bytes().replace(b"Version: 1.0\n", b"Version: 1.0\nAuthor: Ren\xe9\n"))
    report = run_doctor(str(py), checks=["deps"], timeout=20)
    r = report.get("deps:latinreq")
    assert r is not None and r.verdict == "fail", [(x.id, x.verdict) for x in report.results]
    assert "zmq-missing-xyz>=1: not installed" in r.evidence


def test_a_record_importlib_metadata_refuses_is_unreadable_and_one_it_reads_lists_the_same_files(tmp_path):
    """The facts probe parses RECORD itself (not a PackagePath per row): a row importlib.metadata refuses (a blank
    line, four fields, a size that is no number) is still an unreadable RECORD, named by its line; the paths it
    accepts are normalised as PackagePath normalises them (``./x//y`` is ``x/y``), so a file it lists is found."""
    py = make_venv(tmp_path / "venv")
    site = site_packages(py)
    for name, record in (("blank", "blank/__init__.py,,6\n\n"), ("four", "four/__init__.py,,6,x\n"),
                         ("badsize", "badsize/__init__.py,,six\n"), ("dotted", "./dotted//__init__.py,,6\n"),
                         ("gone", "./gone//missing.py,,6\ngone/__init__.py,,6\n")):
        install_dist(py, tmp_path / "w", name, {f"{name}/__init__.py": "X = 1\n"}, {})
        (site / f"{name}-1.0.dist-info" / "RECORD").write_text(record)
    r = run_doctor(str(py), checks=["install:records"], timeout=20).get("install:records")
    assert r.verdict == "fail", r
    lines = {line.split(" ", 1)[0]: line for line in r.evidence.splitlines()}
    assert "RECORD line 2 has 0 fields" in lines["blank"]
    assert "RECORD line 1 has 4 fields" in lines["four"]
    assert "cannot be read" in lines["badsize"] and "six" in lines["badsize"]
    assert "1 file(s) its RECORD lists are not on disk: gone/missing.py" in lines["gone"]
    assert "dotted" not in r.evidence


def test_a_folder_in_place_of_a_file_its_record_lists_is_not_on_disk(tmp_path):
    # install:records said "every file their RECORD lists is on disk" while stack:files said missing.
    py = make_venv(tmp_path / "venv")
    site = install_dist(py, tmp_path / "w", "folded", {"folded/__init__.py": "X = 1\n", "folded/util.py": "Y = 2\n"}, {})
    (site / "folded" / "util.py").unlink()
    (site / "folded" / "util.py").mkdir()
    r = run_doctor(str(py), checks=["install"], timeout=20).get("install:records")
    assert r is not None and r.verdict in ("fail", "warn") and "folded/util.py (a folder in its place)" in r.evidence, r


def test_a_pipe_in_place_of_a_file_its_record_lists_is_not_on_disk(tmp_path):
    # A read of it at import would hang; install:records said every file was on disk, stack:files only warned.
    import os

    py = make_venv(tmp_path / "venv")
    site = install_dist(py, tmp_path / "w", "piped", {"piped/__init__.py": "X = 1\n", "piped/table.json": "{}\n"}, {})
    (site / "piped" / "table.json").unlink()
    os.mkfifo(site / "piped" / "table.json")
    r = run_doctor(str(py), checks=["install"], timeout=20).get("install:records")
    assert r is not None and r.verdict in ("fail", "warn"), r
    assert "piped/table.json (a pipe, socket or device in its place)" in r.evidence, r


def test_a_console_script_that_cannot_start_is_named_and_fails_where_the_manifest_serves_with_it(tmp_path):
    """A wheel whose entry point names a module it left out (`tool = tool.cli:main`, no tool/cli.py), and a venv moved
    after it was made (every launcher's shebang names the old interpreter): the commands die, the doctor was green."""
    from wheelmaker import make_wheel
    from wheelhouse.manifest import load_manifest

    py = make_venv(tmp_path / "made-here", with_pip=True)
    wheels = [make_wheel(tmp_path / "w", "tool", "1.0", modules={"tool/__init__.py": ""},
                         entry_points={"console_scripts": {"tool": "tool.cli:main"}}),
              make_wheel(tmp_path / "w", "fine", "1.0", modules={"fine/__init__.py": "", "fine/cli.py": ""},
                         entry_points={"console_scripts": {"fine": "fine.cli:main"}})]
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", "--no-deps", *map(str, wheels)], check=True)
    r = run_doctor(str(py), checks=["install:scripts"]).get("install:scripts")
    assert r.verdict == "warn" and r.strict is not False, r
    assert "tool 1.0: tool (tool.cli:main): its entry point's module tool.cli is not installed" in r.evidence
    assert "fine" not in r.evidence
    manifest = tmp_path / "stack.toml"
    manifest.write_text('[stack]\nname = "t"\nrequirements = ["tool"]\n\n[serve]\ncommand = ["tool", "serve"]\n')
    r = run_doctor(str(py), checks=["install:scripts"], manifest=load_manifest(manifest)).get("install:scripts")
    assert r.verdict == "fail" and "the manifest's [serve] command runs tool" in r.evidence, r
    # uv's launcher for a long path quotes the interpreter '...' (pip's "..."); its relocatable form names none.
    launcher = tmp_path / "made-here" / "bin" / "fine"
    exec_line = "'" * 3 + "exec' "
    launcher.write_text(f"#!/bin/sh\n{exec_line}'/gone/uv venv/bin/python' \"$0\" \"$@\"\n")
    r = run_doctor(str(py), checks=["install:scripts"]).get("install:scripts")
    assert "runs /gone/uv venv/bin/python, which is not there" in r.evidence, r
    launcher.write_text(f"#!/bin/sh\n{exec_line}\"$(dirname -- \"$(realpath -- \"$0\")\")\"/'python' \"$0\" \"$@\"\n")
    r = run_doctor(str(py), checks=["install:scripts"]).get("install:scripts")
    assert "its launcher" not in r.evidence, r
    launcher.write_text(f"#!{tmp_path / 'made-here' / 'bin' / 'python'}\r\nimport sys\r\n")  # edited on Windows
    r = run_doctor(str(py), checks=["install:scripts"]).get("install:scripts")
    assert "has a CRLF line end" in r.evidence, r
    moved = tmp_path / "moved-here"
    (tmp_path / "made-here").rename(moved)
    r = run_doctor(str(moved / "bin" / "python"), checks=["install:scripts"]).get("install:scripts")
    assert r.verdict == "warn", r
    assert f"its launcher {moved / 'bin' / 'tool'} runs {tmp_path / 'made-here' / 'bin' / 'python'}" in r.evidence
    assert "moved or copied" in r.hint
