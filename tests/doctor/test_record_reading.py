"""An installed distribution's RECORD is read once per doctor run (``Distribution.record``), and every reader of it
(stack:files, the .so lists of sharedlibs/links/kernels, the report's files_sha256) judges from that one parse."""

from __future__ import annotations

import sys

import pytest

from broken_packages import install_wheel, make_venv, site_packages
from wheelmaker import make_wheel
from wheelhouse.doctor import run_doctor

_OPENED: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], str) and args[0].endswith("RECORD"):
        _OPENED.append(args[0])


sys.addaudithook(_audit)  # an audit hook stays for the process: it records only while a test sets _OPENED


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WH_CACHE_DIR", str(tmp_path / "cache"))


def _opened_during(fn):
    global _OPENED
    _OPENED = []
    try:
        result = fn()
        return result, list(_OPENED)
    finally:
        _OPENED = None


def test_each_record_is_read_once_per_run_and_every_check_judges_from_it(tmp_path):
    wheel = make_wheel(tmp_path / "w", "oncepkg", "1.0", modules={"oncepkg/__init__.py": "X = 1\n",
                                                                   "oncepkg/data.txt": "payload\n"})
    py = make_venv(tmp_path / "venv")
    install_wheel(py, wheel)
    checks = ["stack", "sharedlibs", "links", "kernels", "native", "platform"]
    report, opened = _opened_during(lambda: run_doctor(str(py), checks=checks).to_json())
    record = str(site_packages(py) / "oncepkg-1.0.dist-info" / "RECORD")
    # Before: stack:files, sharedlibs' .so list and the report's inventory each read it (three times or more).
    assert opened.count(record) == 1, opened
    files = {r["id"]: r for r in report["results"]}["stack:files"]
    assert files["verdict"] == "ok"
    first = {d["name"]: d for d in report["facts"]["installed"]}["oncepkg"]["files_sha256"]
    # The one parse still sees a changed file: stack:files names it and the report's hash changes.
    (site_packages(py) / "oncepkg" / "data.txt").write_text("PAYLOAD\n")
    again = run_doctor(str(py), checks=checks).to_json()
    files = {r["id"]: r for r in again["results"]}["stack:files"]
    assert "oncepkg/data.txt: sha256 differs from RECORD's" in files["evidence"]
    assert {d["name"]: d for d in again["facts"]["installed"]}["oncepkg"]["files_sha256"] != first
