"""Hostile review of `wh doctor compare`: inputs that made it call a fleet identical when it had not compared one.

Real CLI runs on reports shaped as `wh doctor --json` writes them (tests/doctor/test_compare.py's `report`).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import importlib.util

from faults import wh_command

_spec = importlib.util.spec_from_file_location("_compare_reports", Path(__file__).with_name("test_compare.py"))
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
report, write = _mod.report, _mod.write  # the report shape the doctor writes, kept in one place


def wh(*args):
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=120)


def test_one_report_given_twice_is_not_a_two_node_fleet(tmp_path):
    a = write(tmp_path, "node-a", report("node-a"))
    for args in ((a, a), (a, tmp_path / "." / "node-a.json")):
        r = wh("doctor", "compare", "--json", *args)
        data = json.loads(r.stdout)
        assert r.returncode == 2, r.stdout + r.stderr  # one node compared with itself is no comparison
        assert data["identical"] is False and data["exit_code"] == 2
        assert "given twice" in data["bad_inputs"][0]["error"], data["bad_inputs"]


def test_json_never_says_identical_when_the_exit_code_is_not_0(tmp_path):
    a = write(tmp_path, "node-a", report("node-a"))
    b = write(tmp_path, "node-b", report("node-b"))
    bad = write(tmp_path, "node-c", "Traceback (most recent call last):\n")
    for args, code in (((a, b, bad), 2), ((a,), 2), ((tmp_path / "missing.json",), 2)):
        r = wh("doctor", "compare", "--json", *args)
        data = json.loads(r.stdout)
        assert r.returncode == code == data["exit_code"], r.stdout + r.stderr
        assert data["identical"] is False, (args, data["identical"])
    r = wh("doctor", "compare", "--json", a, b)
    assert r.returncode == 0 and json.loads(r.stdout)["identical"] is True


def test_hashes_that_share_the_shown_prefix_still_differ(tmp_path):
    # The values were grouped as shown, cut to 12 hex digits: two different files_sha256 with the same first
    # 12 digits were one value, and the nodes "identical".
    a = report("node-a")
    b = report("node-b")
    b["facts"]["installed"][0]["files_sha256"] = "a" * 12 + "b" * 52  # node-a's is "a" * 64
    r = wh("doctor", "compare", "--json", write(tmp_path, "node-a", a), write(tmp_path, "node-b", b))
    data = json.loads(r.stdout)
    assert r.returncode == 1 and data["identical"] is False, r.stdout
    assert [d["key"] for d in data["differences"]] == ["numpy 2.1.3 files"], data["differences"]
    values = [g["value"] for g in data["differences"][0]["groups"]]
    assert len(set(values)) == 2, values


def test_control_characters_and_lone_surrogates_in_a_report_keep_the_json_and_junit_readable(tmp_path):
    # A damaged report (a version with an escape sequence, NUL, a lone UTF-16 surrogate, which JSON can spell)
    # made compare die with an internal error (UnicodeEncodeError, exit 3: no JSON, no JUnit) or write a
    # JUnit file no XML parser reads.
    import xml.etree.ElementTree as ET

    a = report("node-a")
    b = report("node-b\x07")
    b["facts"]["installed"][0]["version"] = "2.1.3\x1b[0m\x00\ud800"
    b["results"][0]["id"] = "gpu:devices\udcff"
    junit = tmp_path / "compare.xml"
    r = wh("doctor", "compare", "--json", "--junit", junit,
           write(tmp_path, "node-a", a), write(tmp_path, "node-b", b))
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert any(d["key"] == "numpy" for d in data["differences"]), data["differences"]
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") != "0"


def test_an_aspect_no_report_records_is_not_compared_rather_than_same(tmp_path):
    # nvidia-smi missing on every node: no report records a driver or CUDA version; JUnit said `driver` ok and
    # the JSON "same", as if the nodes had been seen to agree.
    import xml.etree.ElementTree as ET

    a, b = report("node-a"), report("node-b")
    for r in (a, b):
        r["facts"]["gpu"] = {}
    junit = tmp_path / "c.xml"
    r = wh("doctor", "compare", "--json", "--junit", junit, write(tmp_path, "node-a", a), write(tmp_path, "node-b", b))
    data = json.loads(r.stdout)
    assert data["aspects"]["driver"] == "not compared" and data["aspects"]["cuda"] == "not compared", data["aspects"]
    assert data["aspects"]["gpus"] == "not compared"
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["driver"].find("skipped") is not None
    assert data["aspects"]["python"] == "same"  # what they do record still compares


def test_junit_pointed_at_an_input_report_is_refused_and_the_report_kept(tmp_path):
    """Before: `--junit a.json ... a.json` overwrote the node's report with the JUnit XML."""
    a = write(tmp_path, "node-a", report("node-a"))
    b = write(tmp_path, "node-b", report("node-b"))
    before = a.read_bytes()
    r = wh("doctor", "compare", "--junit", a, a.parent / "." / a.name, b)
    assert r.returncode == 2 and "would be overwritten" in r.stderr, r.stderr
    assert a.read_bytes() == before


def test_a_node_name_with_a_newline_cannot_forge_output_lines(tmp_path):
    a = report("node-a")
    b = report("node-b\nall nodes identical: 2 nodes")
    b["facts"]["gpu"]["driver_version"] = "570.1\nforged: line"
    r = wh("doctor", "compare", write(tmp_path, "node-a", a), write(tmp_path, "node-b", b))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    lines = out.splitlines()
    assert not any(line.startswith(("all nodes identical", "forged: line")) for line in lines), out
    assert "node-b\\nall nodes identical" in out and "570.1\\nforged: line" in out, out


def test_a_distribution_listed_twice_shows_both_copies(tmp_path):
    a = report("node-a")
    b = report("node-b")
    b["facts"]["installed"].append({"name": "NumPy", "version": "2.1.3", "files_sha256": "e" * 64, "files": 10,
                                    "wheel_sha256": "b" * 64})
    r = wh("doctor", "compare", "--json", write(tmp_path, "node-a", a), write(tmp_path, "node-b", b))
    data = json.loads(r.stdout)
    assert r.returncode == 1 and data["identical"] is False, r.stdout + r.stderr
    keys = [d["key"] for d in data["differences"]]
    assert any(k.startswith("numpy") for k in keys), data["differences"]
    shown = json.dumps(data["differences"])
    assert "eeeeeeee" in shown, shown


import pytest  # noqa: E402


@pytest.mark.parametrize("edit, named", [
    (lambda d: d["facts"].__setitem__("installed", {"numpy": "2.1.3"}), "facts.installed must be a list"),
    (lambda d: d["facts"]["installed"][0].__setitem__("version", ["2.1.3"]), "facts.installed[0].version must be a string"),
    (lambda d: d["results"][0].__setitem__("verdict", 1), "results[0].verdict must be a string"),
    (lambda d: d["facts"].__setitem__("node", "node-b"), "facts.node must be an object"),
])
def test_a_report_field_of_the_wrong_type_is_refused_by_name(tmp_path, edit, named):
    a = report("node-a")
    b = report("node-b")
    edit(b)
    r = wh("doctor", "compare", "--json", write(tmp_path, "node-a", a), write(tmp_path, "node-b", b))
    data = json.loads(r.stdout)
    assert r.returncode == 2 and data["identical"] is False, r.stdout + r.stderr
    assert any(named in bad["error"] for bad in data["bad_inputs"]), data["bad_inputs"]
