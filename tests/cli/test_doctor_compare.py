"""`wh doctor compare` through the real entry point, and docs/fleet.md's recipes run as written.

The fleet: real venvs with real wheels installed, fake GPUs (WH_DOCTOR_FAKE_GPUS), a real `wh doctor --json`
per node. node-a and node-b are the same; node-c has another driver and another version of one package.
The Slurm recipe runs under a stand-in `srun` that runs its command once per node the way srun does (``%N``
in --output/--error, SLURMD_NODENAME set) and refuses any option it does not know; the Kubernetes recipe's
two container commands run in the folder the Jobs mount, with WH_NODE_NAME set as the downward API would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from broken_packages import install_wheel, make_venv
from wheelmaker import make_wheel

REPO = Path(__file__).resolve().parents[2]
FLEET_DOC = REPO / "docs" / "fleet.md"
DRIVER, OTHER_DRIVER = "580.95.05", "575.57.08"
EXPECTED_DIFFERENCES = {
    f"driver: {DRIVER} on node-a, node-b; {OTHER_DRIVER} on node-c",
    "fleetpkg: 1.0 on node-a, node-b; 1.1 on node-c",
}


def _gpus(path: Path, driver: str) -> Path:
    path.write_text(json.dumps({
        "driver_version": driver, "cuda_version": "13.0", "topology": "nvlink",
        "gpus": [{"index": i, "name": "NVIDIA H200", "compute_capability": "9.0", "memory_total_mib": 143771,
                  "memory_used_mib": 0} for i in range(2)]}))
    return path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> dict[str, dict[str, str]]:
    """node name -> the environment that makes this machine look like that node."""
    root = tmp_path_factory.mktemp("fleet")
    wheels = root / "wheels"
    common = make_wheel(wheels, "common-pkg", "2.0", modules={"common_pkg/__init__.py": "X = 1\n"})
    nodes = {}
    for name, driver, version in (("node-a", DRIVER, "1.0"), ("node-b", DRIVER, "1.0"), ("node-c", OTHER_DRIVER, "1.1")):
        py = make_venv(root / name / "venv")
        install_wheel(py, common)
        install_wheel(py, make_wheel(wheels / version, "fleetpkg", version,
                                     modules={"fleetpkg/__init__.py": f"__version__ = '{version}'\n"}))
        nodes[name] = {"WH_PYTHON": str(py), "WH_DOCTOR_FAKE_GPUS": str(_gpus(root / name / "gpus.json", driver))}
    return nodes


FAKE_SRUN = '''#!{python}
"""Stand-in srun: the command once per node of $FAKE_SLURM_CLUSTER, in parallel; %N is the node's name."""
import json, os, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

cluster = json.load(open(os.environ["FAKE_SLURM_CLUSTER"]))
args, opts = sys.argv[1:], {{}}
while args and args[0].startswith("--"):
    key, _, value = args.pop(0)[2:].partition("=")
    opts[key] = value
unknown = set(opts) - {{"nodes", "ntasks-per-node", "output", "error"}}
if unknown or not args:
    sys.exit(f"fake srun: options it does not emulate: {{sorted(unknown)}} (or no command)")
if int(opts["nodes"]) != len(cluster) or opts.get("ntasks-per-node") != "1":
    sys.exit(f"fake srun: --nodes={{opts['nodes']}} --ntasks-per-node={{opts.get('ntasks-per-node')}} "
             f"for a {{len(cluster)}}-node allocation")


def task(item):
    node, env = item
    with open(opts["output"].replace("%N", node), "wb") as out, open(opts["error"].replace("%N", node), "wb") as err:
        return subprocess.run(args, stdout=out, stderr=err, env={{**os.environ, **env, "SLURMD_NODENAME": node}}).returncode


with ThreadPoolExecutor(len(cluster)) as pool:
    sys.exit(max(pool.map(task, cluster.items())))
'''


def _bin(tmp_path: Path) -> Path:
    """A folder for PATH: `wh` (this checkout) and the stand-in `srun`."""
    b = tmp_path / "bin"
    b.mkdir()
    (b / "wh").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m wheelhouse "$@"\n')
    (b / "srun").write_text(FAKE_SRUN.format(python=sys.executable))
    for f in b.iterdir():
        f.chmod(0o755)
    return b


def _base_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("WH_NODE_NAME", "SLURMD_NODENAME", "WH_PYTHON", "WH_DOCTOR_FAKE_GPUS")}
    env["PATH"] = f"{_bin(tmp_path)}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "250"
    return env


def _doc_block(marker: str, lang: str) -> str:
    """The fenced ``lang`` block that follows ``<!-- tested: marker`` in docs/fleet.md."""
    text = FLEET_DOC.read_text()
    at = text.index(f"<!-- tested: {marker}")
    m = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, at)
    assert m, f"no ```{lang} block after the {marker} marker"
    return m.group(1)


def _difference_lines(stdout: str) -> set[str]:
    """The lines naming a difference: `KEY: VALUE on NODES; VALUE on NODES`."""
    return {ln for ln in stdout.splitlines() if re.match(r"^[^:]+: .+ on .+; .+ on .+$", ln)
            and not ln.startswith(("outlier:", "note:", "wh doctor compare:"))}


def _junit(path: Path) -> dict[str, tuple[str, str]]:
    """testcase name -> (kind, message): kind is failure / error / skipped / ok."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        child = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        out[case.get("name")] = (child.tag, child.get("message")) if child is not None else ("ok", "")
    return out


def _check_outcome(proc: subprocess.CompletedProcess, junit: Path, nodes: list[str]) -> None:
    out = proc.stdout + proc.stderr
    cases = _junit(junit)
    if nodes == ["node-a", "node-b"]:
        assert proc.returncode == 0, out
        assert _difference_lines(proc.stdout) == set(), out
        assert "identical" in proc.stdout
        assert {k for k, v in cases.items() if v[0] != "ok"} == set(), cases
    else:
        assert proc.returncode == 1, out
        assert _difference_lines(proc.stdout) == EXPECTED_DIFFERENCES, out
        assert "outlier: node-c differs from the majority in 2: driver, fleetpkg" in proc.stdout
        failed = {k: v for k, v in cases.items() if v[0] != "ok"}
        assert failed == {"driver": ("failure", f"driver: {DRIVER} on node-a, node-b; {OTHER_DRIVER} on node-c"),
                          "distributions": ("failure", "fleetpkg: 1.0 on node-a, node-b; 1.1 on node-c")}, cases


# ---- the recipes, as docs/fleet.md writes them --------------------------------------------------------------


@pytest.mark.parametrize("nodes", [["node-a", "node-b"], ["node-a", "node-b", "node-c"]], ids=["same", "differ"])
def test_slurm_recipe_as_written(tmp_path, fleet, nodes):
    script = _doc_block("slurm", "bash")
    assert "srun " in script and "wh doctor compare" in script
    (tmp_path / "fleet-doctor.sh").write_text(script)
    (tmp_path / "cluster.json").write_text(json.dumps({n: fleet[n] for n in nodes}))
    env = {**_base_env(tmp_path), "FAKE_SLURM_CLUSTER": str(tmp_path / "cluster.json"),
           "SLURM_JOB_NUM_NODES": str(len(nodes))}
    job = tmp_path / "job"
    job.mkdir()
    # sbatch runs the batch script with bash, without -e, in the submit folder.
    proc = subprocess.run(["bash", str(tmp_path / "fleet-doctor.sh")], cwd=job, env=env, capture_output=True,
                          text=True, timeout=300)
    assert sorted(p.name for p in (job / "reports").glob("*.json")) == [f"{n}.json" for n in nodes], proc.stderr
    for n in nodes:  # each node's report names that node, and its notes went to its own log
        report = json.loads((job / "reports" / f"{n}.json").read_text())
        assert report["facts"]["node"] == {"name": n, "source": "SLURMD_NODENAME", "host": report["host"]}
        assert (job / "reports" / f"{n}.log").stat().st_size > 0
    _check_outcome(proc, job / "compare.xml", nodes)


def _k8s_commands() -> tuple[str, str, dict[str, str]]:
    yaml = _doc_block("kubernetes", "yaml")
    args = re.findall(r"^\s*args: \['(.*)'\]\s*$", yaml, re.M)
    assert len(args) == 2, args
    doctor, compare = (a.replace("''", "'") for a in args)  # YAML single-quoted scalars
    # What the Jobs promise the commands: the shared folder as the working folder, the node's name, the count.
    assert yaml.count("workingDir: /reports") == 2 and yaml.count("mountPath: /reports") == 2
    assert re.search(r"name: WH_NODE_NAME\n\s*valueFrom: \{fieldRef: \{fieldPath: spec.nodeName\}\}", yaml)
    counts = {k: re.search(rf"{k}: \"?(\d+)", yaml).group(1) for k in ("completions", "parallelism")}
    counts["NODES"] = re.search(r"name: NODES\n\s*value: \"(\d+)\"", yaml).group(1)
    assert len(set(counts.values())) == 1, counts  # one node count, written three times
    return doctor, compare, counts


@pytest.mark.parametrize("nodes", [["node-a", "node-b"], ["node-a", "node-b", "node-c"]], ids=["same", "differ"])
def test_kubernetes_recipe_as_written(tmp_path, fleet, nodes):
    doctor, compare, _ = _k8s_commands()
    volume = tmp_path / "reports"
    volume.mkdir()
    base = _base_env(tmp_path)
    pods = [subprocess.Popen(["sh", "-c", doctor], cwd=volume, env={**base, **fleet[n], "WH_NODE_NAME": n})
            for n in nodes]
    assert [p.wait(timeout=300) for p in pods] == [0] * len(nodes)  # a failed check still completes the pod
    # The user sets NODES to the fleet's size, as the doc says.
    proc = subprocess.run(["sh", "-c", compare], cwd=volume, env={**base, "NODES": str(len(nodes))},
                          capture_output=True, text=True, timeout=120)
    for n in nodes:
        assert json.loads((volume / f"{n}.json").read_text())["facts"]["node"]["source"] == "WH_NODE_NAME"
    _check_outcome(proc, volume / "compare.xml", nodes)


def test_kubernetes_compare_catches_a_node_that_wrote_no_report(tmp_path, fleet):
    """Two of three pods ran: --expect "$NODES" fails the comparison instead of calling two nodes a fleet."""
    doctor, compare, _ = _k8s_commands()
    volume = tmp_path / "reports"
    volume.mkdir()
    base = _base_env(tmp_path)
    for n in ("node-a", "node-b"):
        subprocess.run(["sh", "-c", doctor], cwd=volume, env={**base, **fleet[n], "WH_NODE_NAME": n}, check=True)
    proc = subprocess.run(["sh", "-c", compare], cwd=volume, env={**base, "NODES": "3"}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "2 report(s) for 3 expected node(s)" in proc.stdout
    assert _junit(volume / "compare.xml")["nodes"][0] == "failure"


# ---- the command's edges: bad input still writes JSON and JUnit; options in their place ----------------------


def wh(*args, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def _small_report(node: str, driver: str) -> dict:
    return {"schema_version": 1, "tool": "wh doctor", "python": "/v/bin/python", "host": node, "exit_code": 0,
            "facts": {"gpu": {"gpus": [], "driver_version": driver, "cuda_version": "13.0"},
                      "node": {"name": node, "source": "hostname", "host": node}, "installed": []},
            "results": [{"id": "gpu:devices", "verdict": "ok"}], "fixes": []}


def test_a_bad_input_is_named_and_the_json_and_junit_are_still_written(tmp_path):
    for n, d in (("a", "580"), ("b", "575")):
        (tmp_path / f"{n}.json").write_text(json.dumps(_small_report(n, d)))
    (tmp_path / "c.json").write_text("")  # that node's doctor could not run
    r = wh("doctor", "compare", "--json", "--junit", tmp_path / "out.xml", tmp_path / "a.json", tmp_path / "b.json",
           tmp_path / "c.json")
    assert r.returncode == 2, r.stderr
    data = json.loads(r.stdout)  # stdout is the JSON alone
    assert data["bad_inputs"] == [{"file": str(tmp_path / "c.json"), "error": "is empty: the doctor wrote no report there",
                                   "hint": "re-run `wh doctor --json > FILE` on that node (its stderr says why it wrote nothing)"}]
    assert [d["line"] for d in data["differences"]] == ["driver: 580 on a; 575 on b"]
    assert f"error: {tmp_path / 'c.json'}: is empty" in r.stderr and "hint: re-run" in r.stderr
    assert "driver: 580 on a; 575 on b" in r.stderr  # the lines for people go to the log with --json
    cases = _junit(tmp_path / "out.xml")
    assert cases["inputs"][0] == "error" and str(tmp_path / "c.json") in cases["inputs"][1]
    assert cases["driver"][0] == "failure"


def test_identical_reports_exit_0_and_print_on_stdout_even_with_q(tmp_path):
    for n in ("a", "b"):
        (tmp_path / f"{n}.json").write_text(json.dumps(_small_report(n, "580")))
    r = wh("doctor", "compare", "-q", tmp_path / "a.json", tmp_path / "b.json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1].startswith("identical; same on every node:") and r.stderr == ""


def test_doctor_options_before_compare_are_refused_not_dropped(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps(_small_report("a", "580")))
    r = wh("doctor", "--json", "compare", tmp_path / "a.json", tmp_path / "a.json")
    assert r.returncode == 2 and r.stdout == ""
    assert "--json before `compare` is an option of `wh doctor` itself" in r.stderr
    quiet = wh("doctor", "-q", "compare", tmp_path / "a.json", "--expect", "1")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr  # -v/-q go anywhere, as for every command


def test_compare_needs_reports_and_a_writable_junit(tmp_path):
    r = wh("doctor", "compare")
    assert r.returncode == 2 and "Missing argument 'REPORT.json...'" in r.stderr
    (tmp_path / "a.json").write_text(json.dumps(_small_report("a", "580")))
    r = wh("doctor", "compare", "--junit", "/proc/no/such/x.xml", tmp_path / "a.json", tmp_path / "a.json")
    assert r.returncode == 2 and "--junit /proc/no/such/x.xml: cannot write there" in r.stderr


def test_help_shows_compare_beside_the_doctor(tmp_path):
    top = wh("doctor", "--help")
    assert top.returncode == 0 and "compare [OPTIONS] REPORT.json..." in top.stdout and "--list-checks" in top.stdout
    sub = wh("doctor", "compare", "--help")
    assert sub.returncode == 0 and "wh doctor compare --expect 4" in sub.stdout and "--junit FILE" in sub.stdout
