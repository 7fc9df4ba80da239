"""wh doctor end to end: real gcc-built broken packages in real venvs, probed in separate processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from broken_packages import (BROKEN, build_broken_wheels, have_toolchain, install_wheel, make_venv, site_packages,
                             write_fakejit_registry)
from schema_check import validate
from wheelhouse.doctor import DoctorCannotRun, run_doctor

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SCHEMA = json.loads((Path(__file__).parents[1] / "support" / "doctor_schema.json").read_text())
TIMEOUT = "2"


@pytest.fixture(scope="session")
def broken_wheels(tmp_path_factory):
    return build_broken_wheels(tmp_path_factory.mktemp("broken-wheels"))


@pytest.fixture(scope="session")
def jit_registry(tmp_path_factory):
    return write_fakejit_registry(tmp_path_factory.mktemp("jit-registry"))


def _venv(path: Path, wheels: dict[str, Path], names, with_pip: bool = False) -> Path:
    py = make_venv(path, with_pip=with_pip)
    for n in names:
        install_wheel(py, wheels[n])
    return py


@pytest.fixture(scope="session")
def zoo(tmp_path_factory, broken_wheels):
    """One venv holding every broken package and the healthy one (read-only use)."""
    return _venv(tmp_path_factory.mktemp("zoo") / "venv", broken_wheels, BROKEN + ("healthy",))


@pytest.fixture(scope="session")
def zoo_report(zoo, jit_registry):
    old = os.environ.get("WH_DOCTOR_JIT_PROBES")
    os.environ["WH_DOCTOR_JIT_PROBES"] = str(jit_registry)
    try:
        return run_doctor(str(zoo), checks=["native", "jit"], timeout=float(TIMEOUT))
    finally:
        if old is None:
            os.environ.pop("WH_DOCTOR_JIT_PROBES", None)
        else:
            os.environ["WH_DOCTOR_JIT_PROBES"] = old


def wh(*args, env=None, check=None) -> subprocess.CompletedProcess:
    full = {**os.environ, "COLUMNS": "250", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", *args], capture_output=True, text=True, env=full,
                          timeout=300)
    if check is not None:
        assert proc.returncode == check, proc.stderr + proc.stdout
    return proc


def find_specs(python: Path, names) -> dict[str, bool]:
    code = "import importlib.util,json,sys; print(json.dumps({m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}))"
    out = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True, check=True, cwd="/")
    return json.loads(out.stdout)


# ---- every broken package is a fail with its real error ---------------------------------------------


@pytest.mark.parametrize("check_id, evidence", [
    # undefsym is findable, yet broken: the loader's message and find_spec's answer are both the evidence
    ("native:undefsym", ("undefined symbol: wh_missing_symbol", "find_spec('undefsym') succeeds")),
    ("native:missinglib", ("libwhgone.so: cannot open shared object file",)),  # names the missing library
    ("native:raiser", ("RuntimeError: raiser refuses to import",)),  # shows the exception
    ("native:hanger", ("timed out after 2s",)),  # a hang is a timeout verdict
    ("native:segv", ("SIGSEGV",)),  # names the signal
])
def test_broken_import_is_a_fail_with_its_real_error(zoo_report, check_id, evidence):
    r = zoo_report.get(check_id)
    assert r.verdict == "fail"
    for text in evidence:
        assert text in r.evidence


def test_jit_failure_of_an_importable_package_shows_compiler_output(zoo_report):
    assert zoo_report.get("native:fakejit").verdict == "ok"  # it imports...
    r = zoo_report.get("jit:fakejit")
    assert r.verdict == "fail"  # ...but its JIT does not compile
    assert "undeclared_thing" in r.evidence and "gcc exited" in r.evidence
    assert r.data["drop"]["distribution"] == "fakejit"


def test_healthy_compiled_package_passes(zoo_report):
    r = zoo_report.get("native:healthy")
    assert r.verdict == "ok" and "imported healthy" in r.evidence
    assert zoo_report.exit_code() == 1
    assert {x.id for x in zoo_report.failed} == {f"native:{n}" for n in BROKEN if n != "fakejit"} | {"jit:fakejit"}


# ---- --fix drops exactly the failed ones ------------------------------------------------------------


def test_fix_drops_every_failed_distribution_and_keeps_the_healthy_one(tmp_path, broken_wheels, jit_registry):
    py = _venv(tmp_path / "venv", broken_wheels, BROKEN + ("healthy",))
    proc = wh("doctor", "--python", str(py), "--check", "native", "--check", "jit", "--fix", "--timeout", TIMEOUT,
              "--json", env={"WH_DOCTOR_JIT_PROBES": str(jit_registry)})
    assert proc.returncode == 0, proc.stderr  # after the drops, nothing fails
    report = json.loads(proc.stdout)
    assert not validate(report, SCHEMA)
    dropped = {f["what"].split()[0] for f in report["fixes"] if f["action"] == "drop"}
    assert dropped == set(BROKEN)
    assert all(f["confirmed"] for f in report["fixes"] if f["action"] == "drop")
    specs = find_specs(py, list(BROKEN) + ["healthy"])
    assert {m for m, found in specs.items() if found} == {"healthy"}
    record = json.loads((site_packages(py) / ".wh" / "dropped.json").read_text())
    entries = {e["name"]: e for e in record["dropped"]}
    assert set(entries) == set(BROKEN)
    assert "undefined symbol" in entries["undefsym"]["evidence"]
    assert entries["segv"]["method"] == "record" and entries["segv"]["time"]
    after = {r["id"]: r["verdict"] for r in report["results"]}
    assert [i for i in after if i.startswith("native:")] == ["native:healthy"]
    assert after["jit:fakejit"] == "skip"  # no longer installed


def test_drop_dry_run_changes_nothing(tmp_path, broken_wheels):
    py = _venv(tmp_path / "venv", broken_wheels, ["raiser", "healthy"])
    proc = wh("drop", "--python", str(py), "--dry-run", "--timeout", TIMEOUT, check=0)
    assert "would drop raiser 1.0" in proc.stdout and "would drop" not in proc.stderr  # the plan is data: stdout
    assert find_specs(py, ["raiser", "healthy"]) == {"raiser": True, "healthy": True}
    assert not (site_packages(py) / ".wh" / "dropped.json").exists()


def test_drop_never_uses_the_targets_pip(tmp_path, broken_wheels):
    """The guarded uninstaller even where the target has pip: pip removes whatever a RECORD names inside the prefix,
    the venv's interpreter included (tests/doctor/test_shared_drops_and_interrupts.py has that RECORD)."""
    py = _venv(tmp_path / "venv", broken_wheels, ["missinglib"], with_pip=True)
    proc = wh("drop", "--python", str(py), "--json", "--timeout", TIMEOUT, check=0)
    out = json.loads(proc.stdout)
    assert [(d["name"], d["method"], d["confirmed"]) for d in out["dropped"]] == [("missinglib", "record", True)]
    assert find_specs(py, ["missinglib"]) == {"missinglib": False}


def _wheelhouse(folder: Path, wheels: list[Path]) -> Path:
    from wheelhouse.lock import Lock, LockedFile, write_pylock, write_wh_json
    from wheelhouse.target import host_target
    import hashlib

    (folder / "wheels").mkdir(parents=True)
    files = []
    for w in wheels:
        shutil.copy(w, folder / "wheels" / w.name)
        name, version = w.name.split("-")[:2]
        files.append(LockedFile(name, version, w.name, f"wheels/{w.name}", hashlib.sha256(w.read_bytes()).hexdigest(),
                                w.stat().st_size))
    write_pylock(folder, Lock(tuple(files)))
    write_wh_json(folder, {"target": host_target().to_json()})
    return folder


def test_drop_restore_reinstalls_from_the_recorded_wheelhouse(tmp_path, broken_wheels):
    house = _wheelhouse(tmp_path / "house", [broken_wheels["raiser"], broken_wheels["healthy"]])
    py = _venv(tmp_path / "venv", broken_wheels, ["raiser", "healthy"])
    wh("drop", "--python", str(py), "--wheelhouse", str(house), "--timeout", TIMEOUT, check=0)
    assert find_specs(py, ["raiser"]) == {"raiser": False}
    listed = wh("drop", "--python", str(py), "--list", "--json", check=0)
    assert [e["wheelhouse"] for e in json.loads(listed.stdout)] == [str(house)]
    wh("drop", "--python", str(py), "--restore", "raiser", check=0)
    assert find_specs(py, ["raiser"]) == {"raiser": True}
    assert json.loads((site_packages(py) / ".wh" / "dropped.json").read_text())["dropped"] == []
    again = wh("drop", "--python", str(py), "--restore", "raiser")
    assert again.returncode == 2 and "raiser was not dropped" in again.stderr and "hint:" in again.stderr


def test_manifest_forced_drop_whose_probe_passes_stays_installed_without_include_forced(tmp_path, broken_wheels):
    # issue 4: never drop on a guess; force = true only drops with an explicit --include-forced
    py = _venv(tmp_path / "venv", broken_wheels, ["healthy"])
    manifest = tmp_path / "m.toml"
    manifest.write_text('[[drop]]\ndistribution = "healthy"\nreason = "its JIT is unusable here"\nforce = true\n')
    proc = wh("drop", "--python", str(py), "--manifest", str(manifest), "--json", "--timeout", TIMEOUT, check=0)
    out = json.loads(proc.stdout)
    assert out["dropped"] == []
    assert [(d["name"], d["forced"]) for d in out["not_dropped"]] == [("healthy", True)]
    note = ("listed in the manifest as force-drop; its probe passed (or did not run): not dropped; "
            "pass --include-forced to drop it")
    assert out["not_dropped"][0]["reason"] == note and note in proc.stderr
    assert find_specs(py, ["healthy"]) == {"healthy": True}

    proc = wh("drop", "--python", str(py), "--manifest", str(manifest), "--include-forced", "--json",
              "--timeout", TIMEOUT, check=0)
    out = json.loads(proc.stdout)
    assert [(d["name"], d["forced"], d["reason"]) for d in out["dropped"]] == [("healthy", True, "forced by manifest")]
    assert "its JIT is unusable here" in out["dropped"][0]["evidence"] and out["not_dropped"] == []
    assert "dropped healthy 1.0 (--include-forced): forced by manifest" in proc.stderr
    assert find_specs(py, ["healthy"]) == {"healthy": False}
    assert json.loads((site_packages(py) / ".wh" / "dropped.json").read_text())["dropped"][0]["reason"] == \
        "forced by manifest"


def test_doctor_fix_keeps_a_passing_forced_entry_unless_include_forced(tmp_path, broken_wheels):
    py = _venv(tmp_path / "venv", broken_wheels, ["healthy"])
    manifest = tmp_path / "m.toml"
    manifest.write_text('[[drop]]\ndistribution = "healthy"\nforce = true\n')
    base = ("doctor", "--python", str(py), "--manifest", str(manifest), "--check", "native", "--fix", "--json",
            "--timeout", TIMEOUT)
    proc = wh(*base, check=0)
    report = json.loads(proc.stdout)
    assert validate(report, SCHEMA) == []
    assert [(f["action"], f["what"]) for f in report["fixes"]] == [("not-dropped", "healthy 1.0")]
    assert "not dropped: healthy 1.0: listed in the manifest as force-drop" in proc.stderr
    assert find_specs(py, ["healthy"]) == {"healthy": True}
    report = json.loads(wh(*base, "--include-forced", check=0).stdout)
    assert [(f["action"], f["forced"], f["reason"]) for f in report["fixes"]] == [("drop", True, "forced by manifest")]
    assert find_specs(py, ["healthy"]) == {"healthy": False}
    assert wh("doctor", "--python", str(py), "--include-forced").returncode == 2  # it needs --fix


# ---- output formats and exit codes ------------------------------------------------------------------


def test_json_matches_schema_and_junit_has_one_testcase_per_check(zoo, tmp_path, jit_registry):
    junit = tmp_path / "doctor.xml"
    trace = tmp_path / "trace.jsonl"
    proc = wh("doctor", "--python", str(zoo), "--json", "--junit", str(junit), "--timeout", TIMEOUT,
              env={"WH_DOCTOR_JIT_PROBES": str(jit_registry), "WH_DOCTOR_TRACE": str(trace)})
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    # WH_DOCTOR_TRACE: one line per probe process, with its span, the import probes among them.
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    probes = [p for p in lines if "probe" in p]
    assert {"facts", "imports"} <= {p["probe"] for p in probes}
    assert all(0 <= p["start"] <= p["end"] for p in lines)
    # The groups that parse and hash in this process start once the native group has planned its imports (they
    # shared the interpreter lock with its plan, and the imports, the longest path, waited): none before it.
    groups = {p["group"]: p for p in lines if "group" in p}
    planned = groups["native:planned"]["start"]
    first_import = min(p["start"] for p in probes if p["probe"] == "imports")
    assert groups["native"]["start"] <= planned <= first_import
    assert all(groups[g]["start"] >= planned for g in ("sharedlibs", "kernels", "links", "stack", "deps"))
    assert validate(report, SCHEMA) == []
    # + 1: missinglib also fails sharedlibs (its .so needs libwhgone.so, read without importing it)
    assert report["exit_code"] == 1 and report["counts"]["fail"] == len(BROKEN) + 1
    # Where the time went: each group that ran, with its [start, end] inside the run's seconds.
    spans = report["facts"]["group_seconds"]
    assert {r["group"] for r in report["results"]} <= set(spans)
    assert all(0 <= start <= end <= report["seconds"] for start, end in spans.values())
    suite = ET.parse(junit).getroot()
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [r["id"] for r in report["results"]]
    by = {c.get("name"): c for c in cases}
    assert by["native:segv"].find("failure") is not None and "SIGSEGV" in by["native:segv"].find("failure").text
    assert by["native:healthy"].find("failure") is None and by["native:healthy"].find("skipped") is None
    assert by["gpu:devices"].find("skipped") is not None  # CI has no GPU: skipped, not failed
    assert suite.get("failures") == str(len(BROKEN) + 1)
    # Human output goes to stderr only.
    assert "FAIL" in proc.stderr and "native:undefsym" in proc.stderr


def test_schema_checker_catches_a_broken_report():
    assert validate({"schema_version": 2}, SCHEMA)  # not silently accepting anything


def test_exit_codes(tmp_path, broken_wheels):
    clean = _venv(tmp_path / "clean", broken_wheels, ["healthy"])
    assert wh("doctor", "--python", str(clean), "--check", "native").returncode == 0
    busy = tmp_path / "gpus.json"
    busy.write_text(json.dumps({"driver_version": "580.1", "cuda_version": "13.0", "gpus": [
        {"index": 0, "name": "NVIDIA L4", "compute_capability": "8.9", "memory_total_mib": 23034,
         "memory_used_mib": 19789}]}))
    fake = {"WH_DOCTOR_FAKE_GPUS": str(busy)}
    warn = wh("doctor", "--python", str(clean), "--check", "gpu:memory", env=fake)
    assert warn.returncode == 0 and "another job is on it" in warn.stdout  # the report is data: stdout
    assert wh("doctor", "--python", str(clean), "--check", "gpu:memory", "--strict", env=fake).returncode == 2
    broken = _venv(tmp_path / "broken", broken_wheels, ["raiser"])
    assert wh("doctor", "--python", str(broken), "--check", "native").returncode == 1
    gone = wh("doctor", "--python", str(tmp_path / "nope" / "python"))
    assert gone.returncode == 2 and "does not exist" in gone.stderr and "hint:" in gone.stderr


def test_check_filter_is_a_prefix_match_and_list_checks_lists_ids(zoo):
    report = run_doctor(str(zoo), checks=["native:heal", "platform:glibc"], timeout=5)
    assert [r.id for r in report.results] == ["platform:glibc", "native:healthy"]
    listed = wh("doctor", "--list-checks", check=0).stdout
    for cid in ("platform:glibc", "gpu:devices", "toolchain:compile", "links:libcuda", "jit:triton",
                "rule:sm89-rowwise-scaled-mm", "model:fit-dense"):
        assert cid in listed


def test_no_gpu_means_gpu_checks_skip_cleanly(zoo):
    report = run_doctor(str(zoo), checks=["gpu", "jit:triton"], facts_override={"gpu": {"gpus": []}})
    assert {r.verdict for r in report.results} == {"skip"}
    assert report.exit_code(strict=True) == 0


def test_manifest_gpu_expectations_fail_when_unmet(tmp_path, zoo):
    from wheelhouse.manifest import load_manifest

    m = tmp_path / "m.toml"
    m.write_text('[doctor]\ngpus = 4\nsm = "8.9"\n')
    fake = {"gpu": {"gpus": [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0",
                              "memory_total_mib": 143771, "memory_used_mib": 0}]}}
    report = run_doctor(str(zoo), manifest=load_manifest(m), checks=["gpu:expected"], facts_override=fake)
    r = report.get("gpu:expected")
    assert r.verdict == "fail" and "1 GPU(s), manifest expects 4" in r.evidence and "sm 9.0" in r.evidence


def test_missing_interpreter_is_bad_input_as_in_install_env_and_links(tmp_path):
    from wheelhouse.target.interpreter import InterpreterError

    with pytest.raises(InterpreterError) as exc:
        run_doctor(str(tmp_path / "python"))
    assert exc.value.exit_code == 2 and not isinstance(exc.value, DoctorCannotRun)


def test_platform_check_against_wheelhouse_target(tmp_path, broken_wheels, zoo):
    from wheelhouse.lock import write_wh_json
    from wheelhouse.target import target_from_flags

    house = _wheelhouse(tmp_path / "house", [broken_wheels["healthy"]])
    ok = run_doctor(str(zoo), wheelhouse=house, checks=["platform"])
    assert ok.get("platform:interpreter").verdict == "ok"
    other = target_from_flags("3.9", ["manylinux_2_99_x86_64"])
    write_wh_json(house, {"target": other.to_json()})
    bad = run_doctor(str(zoo), wheelhouse=house, checks=["platform"])
    assert bad.get("platform:interpreter").verdict == "fail"
    assert "target 3.9" in bad.get("platform:interpreter").evidence
    assert bad.get("platform:glibc").verdict == "fail" and "2.99" in bad.get("platform:glibc").evidence


def test_links_check_reports_missing_sonames_and_fix_adds_them(tmp_path, broken_wheels):
    py = _venv(tmp_path / "venv", broken_wheels, ["healthy"])
    lib = site_packages(py) / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudart.so.13").write_bytes(b"\x7fELF" + b"\0" * 64)
    report = run_doctor(str(py), checks=["links:sonames"])
    r = report.get("links:sonames")
    # nothing in this stack links -lcudart: ok with the missing link named (issue 28.11); --fix still adds it
    assert r.verdict == "ok" and "nvidia/cu13/lib lacks libcudart.so" in r.evidence
    assert r.fix == "wh links --fix"
    wh("doctor", "--python", str(py), "--check", "links:sonames", "--fix", check=0)
    assert os.readlink(lib / "libcudart.so") == "libcudart.so.13"


def test_model_checks_from_the_cli(tmp_path, zoo):
    from model_fixtures import write_model

    model = write_model(tmp_path / "m", heads=12, kv_heads=4, vocab=1000, moe=96)
    proc = wh("doctor", "--python", str(zoo), "--check", "model", "--model", str(model), "--tp", "8", "--json")
    assert proc.returncode == 1
    res = {r["id"]: r for r in json.loads(proc.stdout)["results"]}
    assert res["model:tp-num-attention-heads"]["verdict"] == "fail"
    assert res["model:tp-vocab-size"]["verdict"] == "ok"


# ---- GPU facts from nvidia-smi (a fake one on PATH: CI has no GPU) ----------------------------------

FAKE_SMI = r"""#!/bin/sh
case "$1" in
  --query-gpu=*) printf '0, NVIDIA L4, 8.9, 23034, 1, 580.159.04\n1, NVIDIA L4, 8.9, 23034, 19789, 580.159.04\n' ;;
  topo) printf '\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPHB\t0-45\nGPU1\tPHB\t X \t0-45\n' ;;
  *) printf '| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |\n' ;;
esac
"""


def test_busy_card_and_pcie_interconnect_are_reported(zoo, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    report = run_doctor(str(zoo), checks=["gpu:memory", "gpu:interconnect", "gpu:devices"])
    assert report.get("gpu:memory").verdict == "warn" and "GPU 1 has 19789 MiB in use" in report.get("gpu:memory").evidence
    assert report.get("gpu:interconnect").verdict == "info" and "PCIe only" in report.get("gpu:interconnect").evidence
    assert "2 GPU(s), driver 580.159.04" in report.get("gpu:devices").evidence


def test_wheelhouse_wh_json_supplies_expectations_and_forced_drops(tmp_path, broken_wheels, zoo):
    from wheelhouse.lock import write_wh_json
    from wheelhouse.target import host_target

    house = _wheelhouse(tmp_path / "house", [broken_wheels["healthy"]])
    write_wh_json(house, {"target": host_target().to_json(),
                          "doctor": {"gpus": 2, "sm": "8.9", "max_used_mib": None, "toolchain_exact": False, "checks": []},
                          "drops": [{"distribution": "healthy", "module": None, "reason": "no JIT here", "force": True}]})
    report = run_doctor(str(zoo), wheelhouse=house, checks=["gpu:expected"], facts_override={"gpu": {"gpus": []}})
    assert report.get("gpu:expected").verdict == "fail" and "expects 2 GPU(s)" in report.get("gpu:expected").evidence
    assert report.facts["forced_drops"] == [{"distribution": "healthy", "version": "1.0", "modules": ["healthy"],
                                             "reason": "no JIT here"}]


def test_table_evidence_drops_importlib_frames_and_says_what_it_cut():
    from wheelhouse.cli.doctor import _evidence
    from wheelhouse.doctor.report import CheckResult

    frozen = '  File "<frozen importlib._bootstrap>", line 1147, in _find_and_load_unlocked'
    tb = ["import x: ImportError: boom", frozen, frozen, '  File "/site/x/__init__.py", line 1', "ImportError: boom"]
    fail = CheckResult("native:x", "x imports", "fail", "\n".join(tb))
    assert _evidence(fail, 0).splitlines() == [tb[0], tb[3], tb[4]]
    assert _evidence(fail, 1) == fail.evidence  # -v shows it all
    long = CheckResult("jit:x", "x compiles", "fail", "\n".join(f"line {i}" for i in range(20)))
    shown = _evidence(long, 0).splitlines()
    assert len(shown) == 8 and shown[-1] == "... 13 more line(s): -v or --json show them"
    assert _evidence(CheckResult("gpu:x", "x", "ok", "first\nsecond"), 0) == "first"


@pytest.mark.parametrize("signame, code", [("SIGINT", 130), ("SIGTERM", 130), ("SIGKILL", -9)])
def test_ctrl_c_stops_the_doctor_at_once_and_kills_its_probes(tmp_path, signame, code):
    # issue 11.12: Ctrl-C waited for every probe's timeout (182 s) and left them running; a CI job cancelled
    # with SIGTERM, or a doctor killed outright, left its probes running too (they have sessions of their own).
    import signal
    import sysconfig
    import time

    from broken_packages import _ext, _tags
    from wheelmaker import make_wheel

    pidfile = tmp_path / "hang.pid"
    init = f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n"
    wheel = make_wheel(tmp_path / "w", "hangpid", "1.0", tags=_tags(), modules={"hangpid/__init__.py": init},
                       files={f"hangpid/_core{sysconfig.get_config_var('EXT_SUFFIX')}": _ext(tmp_path, "_core")})
    py = make_venv(tmp_path / "venv")
    install_wheel(py, wheel)
    proc = subprocess.Popen([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "native",
                             "--timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < end and proc.poll() is None, "the hanging import never started"
            time.sleep(0.05)
        hanging = int(pidfile.read_text())
        t0 = time.monotonic()
        proc.send_signal(getattr(signal, signame))
        out, err = proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 2.5, err
        assert proc.returncode == code and (code < 0 or "interrupted" in err)
        for _ in range(40):
            if not Path(f"/proc/{hanging}").exists() or \
                    Path(f"/proc/{hanging}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX":
                break
            time.sleep(0.05)
        else:
            pytest.fail("the hanging probe outlived the interrupted doctor")
    finally:
        if proc.poll() is None:
            proc.kill()
        if pidfile.exists() and pidfile.read_text() and Path(f"/proc/{pidfile.read_text()}").exists():
            os.kill(int(pidfile.read_text()), 9)
