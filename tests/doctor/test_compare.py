"""wheelhouse.doctor.compare and .inventory: reading many nodes' reports, naming what differs, never crashing."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from broken_packages import install_wheel, make_venv, site_packages
from wheelmaker import make_wheel
from wheelhouse.doctor import run_doctor
from wheelhouse.doctor.compare import (ASPECTS, BadReport, compare_reports, load_report, load_reports, render_junit,
                                       render_lines)
from wheelhouse.doctor.inventory import files_sha256, node_identity


def report(node: str | None, *, driver="580.95.05", cuda="13.0", gpus=("NVIDIA H200", "9.0", 8), installed=None,
           results=None, wh_version="0.9.0", **top) -> dict:
    """A `wh doctor --json` report as the doctor writes it (only what compare reads, plus the required keys)."""
    name, cc, count = gpus
    data = {
        "schema_version": 1, "tool": "wh doctor", "python": "/opt/venv/bin/python", "host": node or "host",
        "started": "2026-11-30T12:00:00Z", "seconds": 1.0, "exit_code": 0, "counts": {},
        "facts": {
            "interpreter": {"executable": "/opt/venv/bin/python", "implementation": "cpython",
                            "python_full_version": "3.12.3", "machine": "x86_64", "glibc": "2.35"},
            "distributions": 2, "native_distributions": 0,
            "gpu": {"gpus": [{"index": i, "name": name, "compute_capability": cc, "memory_total_mib": 143771,
                              "memory_used_mib": 0} for i in range(count)],
                    "driver_version": driver, "cuda_version": cuda, "topology": "nvlink" if count > 1 else None,
                    "source": "fake", "error": None},
            "wh_version": wh_version,
            "installed": installed if installed is not None else [
                {"name": "numpy", "version": "2.1.3", "files_sha256": "a" * 64, "files": 10, "wheel_sha256": "b" * 64},
                {"name": "torch", "version": "2.9.0", "files_sha256": "c" * 64, "files": 99, "wheel_sha256": None}],
        },
        "results": results if results is not None else [
            {"id": "gpu:devices", "verdict": "ok"}, {"id": "links:sonames", "verdict": "ok"},
            {"id": "native:numpy", "verdict": "ok"}, {"id": "native:torch", "verdict": "ok"}],
        "fixes": [],
    }
    if node is not None:
        data["facts"]["node"] = {"name": node, "source": "SLURMD_NODENAME", "host": node}
    data.update(top)
    return data


def write(tmp_path: Path, name: str, data) -> Path:
    p = tmp_path / f"{name}.json"
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def compare(tmp_path, reports: dict, expected=None):
    nodes, bad = load_reports([write(tmp_path, k, v) for k, v in reports.items()])
    return compare_reports(nodes, bad, expected=expected)


def lines(c) -> list[str]:
    return [d.line for d in c.differences]


# ---- what differs, named by node, majority first ----------------------------------------------------------


def test_identical_nodes_exit_0_and_every_aspect_is_same(tmp_path):
    c = compare(tmp_path, {n: report(n) for n in ("a", "b", "c")})
    assert c.differences == () and c.identical and c.exit_code() == 0
    assert c.to_json()["aspects"] == dict.fromkeys(ASPECTS, "same")
    assert render_lines(c)[-1].startswith("identical; same on every node: wh, python, driver, cuda, gpus")


def test_driver_and_package_differences_name_the_majority_then_the_outlier(tmp_path):
    odd = report("c", driver="575.57.08")
    odd["facts"]["installed"][0] = {**odd["facts"]["installed"][0], "version": "2.2.0", "files_sha256": "d" * 64}
    c = compare(tmp_path, {"c": odd, "a": report("a"), "b": report("b")})  # the outlier's report comes first
    assert lines(c) == ["driver: 580.95.05 on a, b; 575.57.08 on c", "numpy: 2.1.3 on a, b; 2.2.0 on c"]
    assert c.exit_code() == 1 and c.outlier_nodes() == {"c": ["driver", "numpy"]}
    assert "outlier: c differs from the majority in 2: driver, numpy" in render_lines(c)
    assert [d["aspect"] for d in c.to_json()["differences"]] == ["driver", "distributions"]


def test_gpu_model_sm_count_cuda_and_a_missing_package(tmp_path):
    b = report("b", gpus=("NVIDIA H100 80GB HBM3", "9.0", 8), cuda="12.9")
    b["facts"]["installed"] = b["facts"]["installed"][:1]  # no torch
    b["results"] = [r for r in b["results"] if r["id"] != "native:torch"]
    c = report("c", gpus=("NVIDIA L4", "8.9", 1))
    got = lines(compare(tmp_path, {"a": report("a"), "b": b, "c": c}))
    assert got == [
        "cuda: 13.0 on a, c; 12.9 on b",
        "GPU count: 8 on a, b; 1 on c",
        # the count is said once, above: a node of one kind of card names the kind alone
        "GPU model: NVIDIA H200 on a; NVIDIA H100 80GB HBM3 on b; NVIDIA L4 on c",
        "GPU sm: sm_90 on a, b; sm_89 on c",
        "interconnect: nvlink on a, b; none on c",
        # native:torch is absent on b because torch is: one line for that, under distributions
        "torch: 2.9.0 on a, c; not installed on b",
    ]


def test_nodes_of_one_count_mixing_other_cards_still_differ(tmp_path):
    a, b = report("a", gpus=("NVIDIA H200", "9.0", 4)), report("b", gpus=("NVIDIA H200", "9.0", 4))
    for g in a["facts"]["gpu"]["gpus"][3:]:
        g.update(name="NVIDIA L4", compute_capability="8.9")
    for g in b["facts"]["gpu"]["gpus"][2:]:
        g.update(name="NVIDIA L4", compute_capability="8.9")
    assert lines(compare(tmp_path, {"a": a, "b": b})) == [
        "GPU model: NVIDIA H200 x3 + NVIDIA L4 x1 on a; NVIDIA H200 x2 + NVIDIA L4 x2 on b",
        "GPU sm: sm_89 x1 + sm_90 x3 on a; sm_89 x2 + sm_90 x2 on b",
    ]


def test_same_version_other_files_or_other_wheel_is_a_hash_difference(tmp_path):
    b = report("b")
    b["facts"]["installed"][1]["files_sha256"] = "e" * 64  # torch 2.9.0 with one file changed
    c = report("c")
    c["facts"]["installed"][0]["wheel_sha256"] = "f" * 64  # numpy from another wheel, same files
    diffs = compare(tmp_path, {"a": report("a"), "b": b, "c": c}).differences
    assert [(d.aspect, d.line) for d in diffs] == [
        ("hashes", f"numpy 2.1.3 wheel: sha256 {'b' * 12} on a, b; sha256 {'f' * 12} on c"),
        ("hashes", f"torch 2.9.0 files: sha256 {'c' * 12} on a, c; sha256 {'e' * 12} on b"),
    ]


def test_check_verdicts_and_link_state_differ_and_failures_everywhere_are_listed(tmp_path):
    def with_results(node, links, mem):
        return report(node, results=[{"id": "links:sonames", "verdict": links}, {"id": "gpu:memory", "verdict": mem},
                                     {"id": "links:libcuda", "verdict": "fail"}])

    c = compare(tmp_path, {"a": with_results("a", "ok", "ok"), "b": with_results("b", "fail", "ok"),
                           "c": with_results("c", "ok", "warn")})
    assert [(d.aspect, d.line) for d in c.differences] == [
        ("links", "links:sonames: ok on a, c; fail on b"), ("checks", "gpu:memory: ok on a, b; warn on c")]
    assert c.failing_everywhere == ("links:libcuda",)
    assert "failing on every node: links:libcuda" in render_lines(c)


def test_an_even_split_has_no_outlier(tmp_path):
    c = compare(tmp_path, {"a": report("a"), "b": report("b", driver="1")})
    assert lines(c) == ["driver: 580.95.05 on a; 1 on b"] and c.outlier_nodes() == {}
    assert not any(ln.startswith("outlier:") for ln in render_lines(c)) and c.exit_code() == 1


def test_a_large_majority_is_counted_and_outliers_are_named(tmp_path):
    nodes = {f"gpu-{i:02}": report(f"gpu-{i:02}") for i in range(12)}
    nodes["gpu-07"] = report("gpu-07", driver="575.57.08")
    assert lines(compare(tmp_path, nodes)) == ["driver: 580.95.05 on 11 nodes; 575.57.08 on gpu-07"]


def test_two_reports_naming_one_node_are_both_kept(tmp_path):
    c = compare(tmp_path, {"one": report("gpu-01"), "two": report("gpu-01", driver="1")})
    names = [n.node for n in c.nodes]
    assert names == [f"gpu-01 ({tmp_path / 'one.json'})", f"gpu-01 ({tmp_path / 'two.json'})"]
    assert c.exit_code() == 1 and "another report also names node gpu-01" in c.nodes[0].notes
    same = compare(tmp_path, {"one": report("gpu-01"), "two": report("gpu-01"), "three": report("gpu-02")}, expected=3)
    assert same.differences == () and same.exit_code() == 1  # three reports, two nodes: one node wrote none


# ---- reports of other wh versions, missing fields, garbage: never a crash -------------------------------


def test_a_report_from_an_older_wh_is_compared_on_what_it_has(tmp_path):
    old = report(None, driver="575.57.08")
    for key in ("installed", "wh_version"):
        del old["facts"][key]
    c = compare(tmp_path, {"a": report("a"), "b": report("b"), "old": old})
    assert c.nodes[2].node == "host"  # no facts.node: the report's host
    assert lines(c) == ["wh: 0.9.0 on a, b; not recorded on host",
                        "driver: 580.95.05 on a, b; 575.57.08 on host",
                        "installed distributions: recorded on a, b; not recorded (older wh doctor) on host"]
    assert c.exit_code() == 1  # what cannot be compared is not called identical


def test_only_old_reports_say_what_was_not_compared(tmp_path):
    olds = {}
    for n in ("a", "b"):
        r = report(n)
        del r["facts"]["installed"]
        olds[n] = r
    c = compare(tmp_path, olds)
    assert c.exit_code() == 0
    assert c.to_json()["aspects"]["distributions"] == "not compared"
    assert any(ln.startswith("not compared: distributions: no report lists installed") for ln in render_lines(c))
    assert ("distributions", "skipped") in [(case.get("name"), case[0].tag) for case in
                                           ET.fromstring(render_junit(c)).iter("testcase")]


def test_a_newer_schema_is_read_with_a_note(tmp_path):
    c = compare(tmp_path, {"a": report("a"), "b": report("b", schema_version=2, extra={"x": 1})})
    assert c.exit_code() == 0 and "newer than this wh reads" in c.nodes[1].notes[0]


@pytest.mark.parametrize("path, value", [
    (("facts",), []), (("facts", "gpu"), "nvidia"), (("facts", "gpu", "gpus"), [1, None, {"name": 7}]),
    (("facts", "gpu", "driver_version"), {"a": 1}), (("facts", "installed"), [None, 3, {"name": 5}, {"version": 1}]),
    (("facts", "installed"), {"numpy": "2"}), (("facts", "node"), "a"), (("facts", "interpreter"), None),
    (("results",), [None, 3, {"id": 3}, {"verdict": "ok"}]), (("exit_code",), "1"), (("schema_version",), "x"),
    (("host",), None),
])
def test_fields_of_the_wrong_shape_never_crash(tmp_path, path, value):
    bad = report("b")
    where = bad
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    c = compare(tmp_path, {"a": report("a"), "b": bad})
    # Never a crash; a field compare reads, of the wrong type, is refused by name (exit 2), never read as absent.
    assert c.exit_code() in (0, 1) and not c.bad or (c.exit_code() == 2 and "must be" in c.bad[0].reason), c.bad
    json.dumps(c.to_json())
    ET.fromstring(render_junit(c))
    render_lines(c)


@pytest.mark.parametrize("content, reason", [
    ("", "is empty: the doctor wrote no report there"),
    ("error: interpreter /x does not exist\n", "not JSON"),
    (json.dumps(report("a")) + "\nnote: 12 ok in 2.0s\n", "JSON followed by other output"),
    (json.dumps(report("a")) + "\n" + json.dumps(report("b")), "another node's report"),  # srun ... > one file
    ("[1, 2]", "not a `wh doctor --json` report (JSON list"),
    (json.dumps({"tool": "wh doctor compare", "nodes": []}), "a `wh doctor compare --json` output"),
    (json.dumps({"tool": "wh doctor", "results": "none"}), "not a `wh doctor --json` report"),
    (b"\xff\xfe{", "not JSON"),
])
def test_what_is_not_a_report_is_named_with_a_hint(tmp_path, content, reason):
    p = tmp_path / "bad.json"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(BadReport) as exc:
        load_report(p)
    assert exc.value.file == str(p) and reason in exc.value.reason and exc.value.hint


def test_reading_many_reports_reports_progress(tmp_path):
    from wheelhouse.progress import RecordingReporter

    rec = RecordingReporter()
    good, bad = load_reports([write(tmp_path, n, report(n)) for n in "abc"] + [tmp_path / "nope.json"], reporter=rec)
    assert (len(good), len(bad)) == (3, 1)
    assert rec.events[0][:3] == ("start", "reading doctor reports", 4) and rec.events[-1][0] == "finish"
    assert sum(1 for e in rec.events if e[0] == "advance") == 4


def test_missing_files_and_folders_are_bad_input(tmp_path):
    for p, reason in ((tmp_path / "nope.json", "cannot read it"), (tmp_path, "is a folder")):
        with pytest.raises(BadReport, match=reason):
            load_report(p)


def test_bad_input_is_named_and_the_others_still_compared(tmp_path):
    c = compare(tmp_path, {"a": report("a"), "b": report("b", driver="1"), "broken": ""})
    assert c.exit_code() == 2 and [b.file for b in c.bad] == [str(tmp_path / "broken.json")]
    assert lines(c) == ["driver: 580.95.05 on a; 1 on b"]
    suite = ET.fromstring(render_junit(c))
    inputs = next(t for t in suite.iter("testcase") if t.get("name") == "inputs")
    assert inputs[0].tag == "error" and str(tmp_path / "broken.json") in inputs[0].get("message")
    assert c.to_json()["bad_inputs"][0]["file"] == str(tmp_path / "broken.json")


# ---- the node count ---------------------------------------------------------------------------------------------


def test_one_report_alone_is_bad_input_unless_the_fleet_is_one_node(tmp_path):
    assert compare(tmp_path, {"a": report("a")}).exit_code() == 2
    assert compare(tmp_path, {"a": report("a")}, expected=1).exit_code() == 0


@pytest.mark.parametrize("expected, code", [(2, 0), (3, 1), (1, 1)])
def test_expect_counts_reports(tmp_path, expected, code):
    c = compare(tmp_path, {"a": report("a"), "b": report("b")}, expected=expected)
    assert c.exit_code() == code
    nodes_case = next(t for t in ET.fromstring(render_junit(c)).iter("testcase") if t.get("name") == "nodes")
    assert (nodes_case[0].tag == "failure") == (code == 1)


def test_junit_has_one_testcase_per_aspect(tmp_path):
    c = compare(tmp_path, {"a": report("a"), "b": report("b", driver="1")})
    suite = ET.fromstring(render_junit(c))
    cases = {t.get("name"): t[0].tag for t in suite.iter("testcase")}
    assert list(cases) == ["inputs", *ASPECTS]
    assert cases["driver"] == "failure" and suite.get("failures") == "1"
    assert {k for k, v in cases.items() if v != "system-out"} == {"driver"}


# ---- the inventory the doctor writes for compare ------------------------------------------------------------


def test_files_sha256_covers_the_site_folder_files_only():
    record = ("pkg/__init__.py,sha256=AAA,10\npkg/x.py,sha256=BBB,5\npkg-1.0.dist-info/METADATA,sha256=CCC,3\n"
              "pkg-1.0.dist-info/RECORD,,\n")
    base = files_sha256(record)
    assert base[1] == 3
    noise = ("pkg-1.0.dist-info/INSTALLER,sha256=III,4\npkg-1.0.dist-info/REQUESTED,sha256=RRR,0\n"
             "pkg-1.0.dist-info/direct_url.json,sha256=DDD,40\npkg/__pycache__/x.cpython-312.pyc,sha256=PPP,9\n"
             "../../../bin/pkg-tool,sha256=LLL,200\n")
    reordered = "\n".join(reversed(record.splitlines())) + "\n"
    assert files_sha256(noise + reordered) == base  # what the installer wrote, and the order, do not count
    assert files_sha256(record.replace("BBB", "BBC"))[0] != base[0]  # one changed file does
    quoted = files_sha256('"pkg/a,b.py",sha256=QQQ,1\n' + record)  # PEP 376: a comma in a path is CSV-quoted
    assert quoted[1] == 4 and quoted[0] != base[0]
    assert files_sha256('"pkg/a,b.py",sha256=QQQ,1\n' + record.replace("BBB", "BBC"))[0] != quoted[0]


def test_node_identity_prefers_wh_then_slurm_then_the_host_name():
    assert node_identity({"WH_NODE_NAME": "k8s-node-3", "SLURMD_NODENAME": "x"})["name"] == "k8s-node-3"
    assert node_identity({"SLURMD_NODENAME": "gpu-07"}) | {"host": "-"} == \
        {"name": "gpu-07", "source": "SLURMD_NODENAME", "host": "-"}
    assert node_identity({})["source"] == "hostname"


def test_the_doctor_report_lists_every_distribution_with_its_hashes(tmp_path):
    wheel = make_wheel(tmp_path / "w", "fleetpkg", "1.0", modules={"fleetpkg/__init__.py": "X = 1\n"})
    pys = []
    for name in ("one", "two"):
        py = make_venv(tmp_path / name)
        install_wheel(py, wheel)
        pys.append(py)
    site_two = site_packages(pys[1])
    # venv two: installed by another installer (its own INSTALLER file, listed in RECORD), and by wh: its state
    # records the wheel's sha256.
    dist_info = site_two / "fleetpkg-1.0.dist-info"
    (dist_info / "INSTALLER").write_text("wh\n")
    with open(dist_info / "RECORD", "a") as fh:
        fh.write("fleetpkg-1.0.dist-info/INSTALLER,sha256=abc,3\n")
    (site_two / ".wh").mkdir()
    (site_two / ".wh" / "installed.json").write_text(json.dumps(
        {"wheelhouses": [], "packages": {"fleetpkg": {"version": "1.0", "sha256": "9" * 64}}}))
    reports = [run_doctor(str(py), checks=["platform"]).to_json() for py in pys]
    entries = [{d["name"]: d for d in r["facts"]["installed"]}["fleetpkg"] for r in reports]
    assert entries[0]["version"] == "1.0" and entries[0]["files"] == 3  # __init__, METADATA, WHEEL
    assert entries[0]["files_sha256"] == entries[1]["files_sha256"]  # another venv, another installer: same files
    assert (entries[0]["wheel_sha256"], entries[1]["wheel_sha256"]) == (None, "9" * 64)
    assert reports[0]["facts"]["node"]["name"] and reports[0]["facts"]["wh_version"]
    # Changing one installed file changes the report's hash, and compare names it.
    (site_packages(pys[1]) / "fleetpkg" / "__init__.py").write_text("X = 2\n")
    record = dist_info / "RECORD"
    record.write_text(record.read_text().replace(
        next(ln for ln in record.read_text().splitlines() if ln.startswith("fleetpkg/__init__.py")),
        "fleetpkg/__init__.py,sha256=changed,6"))
    changed = run_doctor(str(pys[1]), checks=["platform"]).to_json()
    a, b = copy.deepcopy(reports[0]), changed
    a["facts"]["node"]["name"], b["facts"]["node"]["name"] = "one", "two"
    c = compare(tmp_path, {"one": a, "two": b})
    assert [d.key for d in c.differences if d.aspect == "hashes"] == ["fleetpkg 1.0 files"]


def test_a_changed_file_shows_though_its_record_says_otherwise(tmp_path, monkeypatch):
    """Before: files_sha256 hashed the RECORD text, so bytes changed on one node (RECORD untouched) compared as
    "hashes: same on every node" (issue 28.9)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    wheel = make_wheel(tmp_path / "w", "fleetpkg", "1.0", modules={"fleetpkg/__init__.py": "X = 1\n"})
    pys = []
    for name in ("one", "two"):
        py = make_venv(tmp_path / name)
        install_wheel(py, wheel)
        pys.append(py)
    (site_packages(pys[1]) / "fleetpkg" / "__init__.py").write_text("X = 2\n")  # same size, RECORD as it was
    a, b = (run_doctor(str(py), checks=["platform"]).to_json() for py in pys)
    a["facts"]["node"]["name"], b["facts"]["node"]["name"] = "one", "two"
    c = compare(tmp_path, {"one": a, "two": b})
    assert [d.key for d in c.differences if d.aspect == "hashes"] == ["fleetpkg 1.0 files"]
    assert not c.identical
