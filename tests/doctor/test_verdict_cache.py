"""The verdict cache: a re-run reuses a passing import verdict only while everything it loaded is unchanged.

Through the real ``wh doctor`` (a subprocess, ``--json``), on a real venv with gcc-built extension modules.
Each test asserts by the report's evidence (``data.reused`` / ``data.executed``), never by timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _ext, _gcc, have_toolchain, install_dist, make_venv

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
ALPHA = {"alpha", "alpha._core", "alpha.sub._ext"}  # every module native:alpha judges
BETA = {"beta", "beta._core", "beta.sub._ext"}


@pytest.fixture(scope="module")
def exts(tmp_path_factory) -> dict[str, bytes]:
    build = tmp_path_factory.mktemp("verdict-exts")
    return {"core": _ext(build, "_core"), "ext": _ext(build, "_ext")}


@pytest.fixture
def stack(tmp_path, exts) -> Path:
    """alpha (a top-level extension and a lazy one), beta (needs betadep, another distribution's module)."""
    py = make_venv(tmp_path / "venv")
    for name in ("alpha", "beta"):
        install_dist(py, tmp_path / "wheels", name,
                     {f"{name}/__init__.py": "from ._core import answer\n" + ("import betadep\n" if name == "beta" else ""),
                      f"{name}/sub/__init__.py": ""},
                     {f"{name}/_core{SUFFIX}": exts["core"], f"{name}/sub/_ext{SUFFIX}": exts["ext"]})
    install_dist(py, tmp_path / "wheels", "betadep", {"betadep.py": "VALUE = 1\n"}, {})
    return py


def _doctor(py: Path, tmp_path: Path, *args: str, env: dict | None = None) -> dict[str, dict]:
    """``env`` merged over this environment; a name given as None is taken out of it."""
    env = {**os.environ, "WH_CACHE_DIR": str(tmp_path / "cache"), **(env or {})}
    env = {k: v for k, v in env.items() if v is not None}
    jobs = next((a.split("=", 1)[1] for a in args if a.startswith("--jobs=")), "4")
    args = tuple(a for a in args if not a.startswith("--jobs="))
    # Every native check unless the test names its own: `--check native` beside `--check native:omega` would
    # also judge every extension of a --system-site-packages venv's base Python, which no assertion reads.
    checks = () if "--check" in args else ("--check", "native")
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), *checks,
                           "--jobs", jobs, "--json", *args], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return {r["id"]: r for r in json.loads(proc.stdout)["results"]}


def _executed(results: dict[str, dict], cid: str) -> set[str]:
    return set(results[cid]["data"]["executed"])


def _reused(results: dict[str, dict], cid: str) -> set[str]:
    return set(results[cid]["data"]["reused"])


def test_a_rerun_of_an_unchanged_stack_executes_nothing_and_says_so(stack, tmp_path):
    first = _doctor(stack, tmp_path)
    assert first["native:alpha"]["verdict"] == first["native:beta"]["verdict"] == "ok"
    assert _executed(first, "native:alpha") == ALPHA and not _reused(first, "native:alpha")
    again = _doctor(stack, tmp_path)
    for cid in ("native:alpha", "native:beta"):
        assert again[cid]["verdict"] == "ok"
        assert _executed(again, cid) == set(), again[cid]
        assert _reused(again, cid) == _executed(first, cid)
        assert "ok (unchanged since " in again[cid]["evidence"]


def test_a_traced_rerun_reuses_what_an_untraced_run_executed(stack, tmp_path):
    """WH_DOCTOR_TRACE is read by wh, never by a probe: timing a re-run must not make it a first run."""
    first = _doctor(stack, tmp_path, env={"WH_DOCTOR_TRACE": None})
    trace = tmp_path / "trace.jsonl"
    again = _doctor(stack, tmp_path, env={"WH_DOCTOR_TRACE": str(trace)})
    assert _executed(again, "native:alpha") == set(), again["native:alpha"]
    assert _reused(again, "native:alpha") == _executed(first, "native:alpha")
    assert trace.read_text().strip(), "the trace was written"


def test_the_trace_names_the_file_whose_change_executed_a_verdict_again(stack, tmp_path):
    """A re-run that executes again says why in WH_DOCTOR_TRACE: the first file of the stored run that changed."""
    _doctor(stack, tmp_path)
    site = Path(next((stack.parent.parent / "lib").glob("python*/site-packages")))
    dep = site / "betadep.py"
    dep.write_text("VALUE = 2\n")
    trace = tmp_path / "trace.jsonl"
    again = _doctor(stack, tmp_path, env={"WH_DOCTOR_TRACE": str(trace)})
    assert "beta" in _executed(again, "native:beta")
    stale = [r for r in map(json.loads, trace.read_text().splitlines()) if "stale" in r]
    assert str(dep) in {r["path"] for r in stale}, stale
    assert _reused(again, "native:alpha") == ALPHA  # never loaded betadep: nothing about it


def test_a_trace_file_that_cannot_be_written_is_a_note_not_a_crash(stack, tmp_path):
    """WH_DOCTOR_TRACE in a folder that is not there: the doctor judges as without it and says once why no trace."""
    env = {**os.environ, "WH_CACHE_DIR": str(tmp_path / "cache"), "WH_DOCTOR_TRACE": str(tmp_path / "no" / "t.jsonl")}
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(stack), "--check", "native",
                           "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["results"]
    assert proc.stderr.count("WH_DOCTOR_TRACE") == 1 and "not written" in proc.stderr, proc.stderr


def test_a_host_with_other_cpu_features_reuses_nothing(stack, tmp_path, monkeypatch):
    """One venv and one cache shared by two hosts (an NFS home, a Slurm fleet): an import that picks a build by the
    CPU's flags may pass on one and fail on the other, so the other host's run judges again. The same host reuses."""
    from wheelhouse.doctor import run_doctor
    from wheelhouse.doctor import verdicts

    monkeypatch.setenv("WH_CACHE_DIR", str(tmp_path / "cache"))
    host = verdicts.cpu_facts()
    assert host, "this test needs /proc/cpuinfo"
    first = run_doctor(str(stack), checks=["native"]).get("native:alpha")
    same = run_doctor(str(stack), checks=["native"]).get("native:alpha")
    assert set(same.data["reused"]) == set(first.data["executed"]) == ALPHA
    other = tmp_path / "cpuinfo"
    other.write_text(f"processor\t: 0\nmodel name\t: {host.get('model name', 'x')}\n"
                     f"flags\t\t: {host.get('flags', '')} avx512f avx512bw\n\n")
    monkeypatch.setattr(verdicts, "_CPUINFO", str(other))
    elsewhere = run_doctor(str(stack), checks=["native"]).get("native:alpha")
    assert set(elsewhere.data["executed"]) == ALPHA and not elsewhere.data["reused"]


def test_a_rewritten_extension_is_executed_again_and_turns_red(stack, tmp_path):
    _doctor(stack, tmp_path)
    site = Path(next((stack.parent.parent / "lib").glob("python*/site-packages")))
    (site / "alpha" / "sub" / f"_ext{SUFFIX}").write_bytes(b"\x7fELF but not really a shared object")
    after = _doctor(stack, tmp_path)
    assert after["native:alpha"]["verdict"] == "fail"
    assert "alpha.sub._ext" in _executed(after, "native:alpha")
    assert _reused(after, "native:beta") == BETA  # it never loaded alpha's file


def test_an_edited_dependency_file_re_executes_what_loaded_it(stack, tmp_path):
    _doctor(stack, tmp_path)
    site = Path(next((stack.parent.parent / "lib").glob("python*/site-packages")))
    (site / "betadep.py").write_text("raise ImportError('betadep was edited into a broken state')\n")
    after = _doctor(stack, tmp_path)
    assert after["native:beta"]["verdict"] == "fail"
    assert "betadep was edited" in after["native:beta"]["evidence"]
    assert "beta" in _executed(after, "native:beta")
    assert _reused(after, "native:alpha") == ALPHA


def test_an_edited_py_file_of_the_package_itself_is_executed_again(stack, tmp_path):
    _doctor(stack, tmp_path)
    site = Path(next((stack.parent.parent / "lib").glob("python*/site-packages")))
    init = site / "alpha" / "__init__.py"
    init.write_text(init.read_text() + "X = 2\n")  # still fine: executed again, still green
    after = _doctor(stack, tmp_path)
    assert after["native:alpha"]["verdict"] == "ok"
    assert _executed(after, "native:alpha") == ALPHA


def test_a_changed_library_path_executes_every_probe_again(stack, tmp_path):
    _doctor(stack, tmp_path)
    after = _doctor(stack, tmp_path, env={"LD_LIBRARY_PATH": str(tmp_path)})
    for cid in ("native:alpha", "native:beta"):
        assert _reused(after, cid) == set() and _executed(after, cid), after[cid]


def test_thorough_executes_every_probe_again(stack, tmp_path):
    _doctor(stack, tmp_path)
    after = _doctor(stack, tmp_path, "--thorough")
    for cid in ("native:alpha", "native:beta"):
        assert _reused(after, cid) == set() and "unchanged since" not in after[cid]["evidence"]
    assert _executed(after, "native:alpha") == ALPHA


def test_a_crash_in_a_shared_worker_changes_no_other_verdict_and_is_never_reused(stack, tmp_path):
    """--jobs 1: every module shares one worker; the crash is confirmed alone, the others stay ok."""
    site = Path(next((stack.parent.parent / "lib").glob("python*/site-packages")))
    install_dist(stack, tmp_path / "wheels", "crashy",
                 {"crashy/__init__.py": "X = 1\n", "crashy/sub/__init__.py": "import ctypes\nctypes.string_at(0)\n"},
                 {f"crashy/sub/_ext{SUFFIX}": (site / "alpha" / "sub" / f"_ext{SUFFIX}").read_bytes()})
    for _ in range(2):
        env = {**os.environ, "WH_CACHE_DIR": str(tmp_path / "cache")}
        proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(stack), "--check",
                               "native", "--jobs", "1", "--json"], capture_output=True, text=True, env=env, timeout=300)
        results = {r["id"]: r for r in json.loads(proc.stdout)["results"]}
        assert results["native:alpha"]["verdict"] == results["native:beta"]["verdict"] == "ok"
        assert results["native:crashy"]["verdict"] == "fail" and "SIGSEGV" in results["native:crashy"]["evidence"]
        assert "crashy.sub._ext" in _executed(results, "native:crashy")  # a failure is executed every run
    assert _reused(results, "native:alpha") == ALPHA


def test_the_loader_facts_are_reused_only_while_unchanged_and_the_evidence_says_so(stack, tmp_path):
    def sharedlibs(*extra: str) -> dict:
        env = {**os.environ, "WH_CACHE_DIR": str(tmp_path / "cache")}
        proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(stack), "--check",
                               "sharedlibs:alpha", "--json", *extra], capture_output=True, text=True, env=env, timeout=300)
        return {r["id"]: r for r in json.loads(proc.stdout)["results"]}["sharedlibs:alpha"]

    first = sharedlibs()
    assert first["verdict"] == "ok" and "unchanged since" not in first["evidence"]
    again = sharedlibs()
    assert again["verdict"] == "ok" and "the loader's facts are unchanged since" in again["evidence"]
    assert "unchanged since" not in sharedlibs("--thorough")["evidence"]


_EVIDENCE_OF_A_PROCESS = r"""
import json, mmap, os, sys, tempfile
sys.path.insert(0, sys.argv[1])
from _probe_channel import Evidence
shared = mmap.mmap(-1, 1 << 16, flags=mmap.MAP_SHARED)  # shows in /proc/self/maps as "/dev/zero (deleted)", as
# the CUDA driver's shared memory does in every GPU probe
import multiprocessing
lock = multiprocessing.Lock()  # a POSIX semaphore: /dev/shm/sem.* mapped, then unlinked
fd, path = tempfile.mkstemp(suffix=".bin")
os.write(fd, b"x" * 4096)
kept = mmap.mmap(fd, 4096, flags=mmap.MAP_SHARED)  # a real file, mapped and then deleted: a replaced file
os.unlink(path)
print(json.dumps({"deps": Evidence().new(), "deleted": path}))
"""


def test_shared_anonymous_memory_is_no_evidence_but_a_deleted_mapped_file_is(tmp_path):
    """A GPU probe maps "/dev/zero (deleted)": read as a replaced file, no GPU probe's pass was ever reused (seen
    on the H100 box: jit:triton executed on every re-run). A really deleted file still keeps a verdict fresh."""
    probes = Path(__file__).resolve().parents[2] / "doctor" / "probes"
    out = subprocess.run([sys.executable, "-c", _EVIDENCE_OF_A_PROCESS, str(probes)], capture_output=True, text=True,
                         check=True)
    record = json.loads(out.stdout)
    paths = {entry[0]: entry for entry in record["deps"]}
    assert not [p for p in paths if p.startswith("/dev/")]
    assert paths[record["deleted"]][1:] == [-1, -1, -1, -1, -1]


def test_byte_code_written_after_a_pass_is_a_change_even_where_none_was_read(stack, tmp_path):
    """No byte code was there when beta passed (PYTHONDONTWRITEBYTECODE): betadep's import compiled its source.
    A .pyc that appears later at betadep's cache path is what the next import reads (its header matches the
    source, so the source's identity is unchanged): the pass must not be reused over it."""
    import importlib._bootstrap_external as bx
    import marshal  # noqa: F401 - the pyc's body is marshalled code

    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    site = Path(next((stack.parent.parent / "lib").glob("python*/site-packages")))
    (site / "__pycache__").mkdir(exist_ok=True)  # the folder is there already: only a file appears in it
    (site / "__pycache__" / "other.txt").write_text("x")
    first = _doctor(stack, tmp_path, env=env)
    assert first["native:beta"]["verdict"] == "ok"
    source = site / "betadep.py"
    st = source.stat()
    code = compile("raise ImportError('planted byte code')\n", str(source), "exec")
    pyc = Path(bx.cache_from_source(str(source)))
    pyc.write_bytes(bytes(bx._code_to_timestamp_pyc(code, st.st_mtime, st.st_size)))
    after = _doctor(stack, tmp_path, env=env)
    assert after["native:beta"]["verdict"] == "fail", after["native:beta"]
    assert "planted byte code" in after["native:beta"]["evidence"]
    assert "beta" in _executed(after, "native:beta")


WRITING_BYTECODE = {"PYTHONDONTWRITEBYTECODE": None}  # the probes' imports write __pycache__, as on a user's box


@pytest.fixture
def lazy_stack(tmp_path, exts) -> Path:
    """gamma (an extension module; its lazy gamma.sub imports gammadep, a top-level one-file module) and delta
    (imports deltadep and, when ``deltadep.REWRITE`` names a file, rewrites gammadep's byte code in place)."""
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "wheels", "gamma",
                 {"gamma/__init__.py": "from ._core import answer\n", "gamma/sub/__init__.py": "import gammadep\n"},
                 {f"gamma/_core{SUFFIX}": exts["core"], f"gamma/sub/_ext{SUFFIX}": exts["ext"]})
    install_dist(py, tmp_path / "wheels", "gammadep", {"gammadep.py": "VALUE = 1\n"}, {})
    return py


def test_byte_code_the_first_run_writes_is_no_change_for_the_second(lazy_stack, tmp_path):
    """Without PYTHONDONTWRITEBYTECODE (wh install's default is --no-compile: nothing compiled yet), the first run's
    imports write __pycache__ folders: gamma passed, then importing gamma.sub compiled gammadep.py and made
    site-packages/__pycache__, which changes the site folder that gamma's evidence named. The byte code of the
    source it loaded is what it ran: the second run reuses every verdict (it was the third, seen on this machine
    with the bench's 71 wheels: 9.5 s, 3.05 s, 1.7 s)."""
    site = Path(next((lazy_stack.parent.parent / "lib").glob("python*/site-packages")))
    assert not (site / "__pycache__").exists()
    first = _doctor(lazy_stack, tmp_path, "--jobs=1", env=WRITING_BYTECODE)
    assert first["native:gamma"]["verdict"] == "ok"
    assert (site / "__pycache__").is_dir() and list((site / "gamma" / "sub" / "__pycache__").glob("*.pyc"))
    again = _doctor(lazy_stack, tmp_path, "--jobs=1", env=WRITING_BYTECODE)
    assert _executed(again, "native:gamma") == set(), again["native:gamma"]
    assert _reused(again, "native:gamma") == _executed(first, "native:gamma") == {"gamma", "gamma._core",
                                                                                   "gamma.sub._ext"}
    assert "ok (unchanged since " in again["native:gamma"]["evidence"]


_REWRITER = """import importlib.util, os, etadep
pyc = importlib.util.cache_from_source(etadep.__file__)
body = open(pyc, "rb").read()
if os.path.exists(%(order)r):  # once: the same header (the source's mtime and size), code that raises on import
    import marshal
    body = body[:16] + marshal.dumps(compile(open(%(order)r).read(), etadep.__file__, "exec"))
    os.unlink(%(order)r)
with open(pyc + ".new", "wb") as fh:
    fh.write(body)
os.replace(pyc + ".new", pyc)  # as a second process compiling the same source does: a new file at the same path
from ._core import answer
"""


@pytest.mark.parametrize("eta_first", [True, False], ids=["rewritten-after-named", "rewritten-before-named"])
@pytest.mark.parametrize("rewrite_as", [None, "raise ImportError('other byte code was written')\n"],
                         ids=["same-bytes", "other-bytes"])
def test_byte_code_rewritten_during_the_run_is_reused_only_when_it_is_the_same(tmp_path, exts, rewrite_as, eta_first):
    """Parallel probes import the same modules: two that both found no byte code both compile and write it, and the
    second write replaces the file the first one's evidence named. eta's import compiles etadep and writes its byte
    code; zrewriter's, later in the same process, writes that file again as the other process would. The same
    bytes are the code that ran: eta's verdict is reused. Other bytes behind the same header (the source's mtime
    and size, so Python would load them) are not: eta is executed again and fails on them. Batches run heaviest
    first: a heavy eta is imported (and its evidence named) before zrewriter rewrites the file; a light one after
    zrewriter's import compiled etadep and rewrote it, before any record named the file."""
    py = make_venv(tmp_path / "venv")
    order = tmp_path / "rewrite-as.py"
    if rewrite_as:
        order.write_text(rewrite_as)
    install_dist(py, tmp_path / "wheels", "eta", {"eta/__init__.py": "import etadep\nfrom ._core import answer\n"},
                 {f"eta/_core{SUFFIX}": exts["core"], **({"eta/weights.bin": bytes(4 << 20)} if eta_first else {})})
    install_dist(py, tmp_path / "wheels", "etadep", {"etadep.py": "VALUE = 1\n"}, {})
    install_dist(py, tmp_path / "wheels", "zrewriter", {"zrewriter/__init__.py": _REWRITER % {"order": str(order)}},
                 {f"zrewriter/_core{SUFFIX}": exts["core"]})
    first = _doctor(py, tmp_path, "--jobs=1", env=WRITING_BYTECODE)  # eta's imports, then zrewriter's
    assert first["native:eta"]["verdict"] == first["native:zrewriter"]["verdict"] == "ok"
    assert not order.exists()
    again = _doctor(py, tmp_path, "--jobs=1", env=WRITING_BYTECODE)
    if rewrite_as is None:
        assert _executed(again, "native:eta") == set(), again["native:eta"]
        assert _reused(again, "native:eta") == {"eta", "eta._core"}
    else:
        assert again["native:eta"]["verdict"] == "fail", again["native:eta"]
        assert "other byte code was written" in again["native:eta"]["evidence"]
        assert "eta" in _executed(again, "native:eta")


def test_byte_code_several_probes_compile_at_once_is_written_once_and_the_rerun_reuses_everything(tmp_path, exts):
    """A fresh image has no byte code: every batch importing the same modules compiled them at once and wrote its
    own .pyc over the others' (marshal's bytes differ between processes), so the first writer's verdict named bytes
    no longer there and the re-run executed it again (the box: the cuda and jaxlib batches; 63 imports here with 8
    jobs on the bench's venv: pandas, split in parts that each import it). One compile per source at a time."""
    py = make_venv(tmp_path / "venv")
    body = "".join(f"def f{i}(x, y=({i}, 'k{i}', frozenset({{'a{i}', 'b{i}', {i}.5}}))):\n    return [x, y]\n"
                   for i in range(300))
    modules = {f"heavy/part{i}.py": body for i in range(60)}
    modules["heavy/__init__.py"] = "".join(f"from . import part{i}\n" for i in range(60))
    # Forty extension modules and 64 MB: a package the planner splits into parts, each importing heavy first.
    files = {f"heavy/m{i}/_ext{SUFFIX}": exts["ext"] for i in range(40)}
    modules.update({f"heavy/m{i}/__init__.py": "" for i in range(40)})
    files["heavy/weights.bin"] = bytes(64 << 20)
    install_dist(py, tmp_path / "wheels", "heavy", modules, files)
    first = _doctor(py, tmp_path, "--jobs=6", env=WRITING_BYTECODE)
    assert first["native:heavy"]["verdict"] == "ok"
    again = _doctor(py, tmp_path, "--jobs=6", env=WRITING_BYTECODE)
    assert _executed(again, "native:heavy") == set()


def _needed_lib(folder: Path, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "dep.c"
    src.write_text(body)
    _gcc(["-shared", "-fPIC", "-Wl,-soname,libwhdep.so.1", str(src), "-o", str(folder / "libwhdep.so.1")])
    src.unlink()


@pytest.mark.parametrize("how", ["runpath", "ld_library_path"])
def test_a_library_of_the_same_name_appearing_earlier_on_the_search_path_is_a_change(tmp_path, how):
    """omega's extension needs libwhdep.so.1, found in the second folder of its RUNPATH (or of LD_LIBRARY_PATH).
    A library of that name put in the first folder is what the loader maps next: one without the symbol the
    extension needs fails its import. Neither mapped file changed: the searched folders are the evidence."""
    early, late, build = tmp_path / "early", tmp_path / "late", tmp_path / "build"
    early.mkdir()
    build.mkdir()
    _needed_lib(late, "int whgone_value(void) { return 7; }\n")
    extra = [f"-L{late}", "-l:libwhdep.so.1"]
    if how == "runpath":
        extra += [f"-Wl,-rpath,{early}:{late}", "-Wl,--enable-new-dtags"]
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": "from ._core import answer\n"},
                 {f"omega/_core{SUFFIX}": _ext(build, "_core", "WH_NEEDLIB", extra=extra)})
    env = {"LD_LIBRARY_PATH": f"{early}:{late}" if how == "ld_library_path" else None}
    first = _doctor(py, tmp_path, env=env)
    assert first["native:omega"]["verdict"] == "ok", first["native:omega"]
    again = _doctor(py, tmp_path, env=env)
    assert _reused(again, "native:omega") == {"omega", "omega._core"}, again["native:omega"]
    _needed_lib(early, "int other_value(void) { return 1; }\n")  # the same soname, without whgone_value
    after = _doctor(py, tmp_path, env=env)
    assert after["native:omega"]["verdict"] == "fail", after["native:omega"]
    assert "whgone_value" in after["native:omega"]["evidence"]
    assert "omega" in _executed(after, "native:omega")


def test_a_pth_file_rewritten_in_place_is_a_change(tmp_path, exts):
    """An editable install's .pth names the folder omegadep is imported from; re-installed from another checkout,
    the same file names another folder. No file the import loaded changed, nor the names in site-packages."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    (good / "omegadep.py").write_text("VALUE = 1\n")
    (bad / "omegadep.py").write_text("raise ImportError('the other checkout')\n")
    py = make_venv(tmp_path / "venv")
    init = "import omegadep\nfrom ._core import answer\n"
    site = install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": init},
                        {f"omega/_core{SUFFIX}": exts["core"]})
    pth = site / "__editable__.omegadep-1.0.pth"
    pth.write_text(f"{good}\n")
    first = _doctor(py, tmp_path)
    assert first["native:omega"]["verdict"] == "ok", first["native:omega"]
    again = _doctor(py, tmp_path)
    assert _reused(again, "native:omega") == {"omega", "omega._core"}, again["native:omega"]
    with open(pth, "w") as fh:  # in place: the same inode, the same names in site-packages
        fh.write(f"{bad}\n")
    after = _doctor(py, tmp_path)
    assert after["native:omega"]["verdict"] == "fail", after["native:omega"]
    assert "the other checkout" in after["native:omega"]["evidence"]


def test_a_pass_thorough_found_failing_is_not_reused_by_the_next_run(tmp_path, exts):
    """A file a module only stats at import is no evidence (docs/doctor.md: such a change is seen by --thorough).
    Once --thorough has executed the import and seen it fail, the pass stored before is gone: the next run executes
    it again, never turning the red that --thorough showed back into a reused green."""
    conf = tmp_path / "omega.conf"
    conf.write_text("good\n")
    py = make_venv(tmp_path / "venv")
    init = (f"import os\nif os.stat({str(conf)!r}).st_size != 5:\n    raise ImportError('omega.conf is broken')\n"
            "from ._core import answer\n")
    install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": init}, {f"omega/_core{SUFFIX}": exts["core"]})
    assert _doctor(py, tmp_path)["native:omega"]["verdict"] == "ok"
    conf.write_text("broken\n")
    assert _doctor(py, tmp_path, "--thorough")["native:omega"]["verdict"] == "fail"
    after = _doctor(py, tmp_path)
    assert after["native:omega"]["verdict"] == "fail", after["native:omega"]
    assert "omega" in _executed(after, "native:omega")


_FORWARDED = """from ._core import answer
import sys

class _Deprecating:  # as deprecation shims do: a forwarding object takes the module's place in sys.modules
    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        return getattr(self._module, name)

sys.modules[__name__] = _Deprecating(sys.modules[__name__])
"""


def test_a_module_whose_place_a_forwarding_object_took_is_evidence_by_its_file(tmp_path, exts):
    """omega's __init__ puts an object without __file__ in its place in sys.modules: the probe finds no file to
    name there, yet the next import runs omega/__init__.py again. Edited into a failing state, it is executed."""
    py = make_venv(tmp_path / "venv")
    site = install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": _FORWARDED},
                        {f"omega/_core{SUFFIX}": exts["core"]})
    assert _doctor(py, tmp_path)["native:omega"]["verdict"] == "ok"
    with open(site / "omega" / "__init__.py", "a") as fh:
        fh.write("raise ImportError('the shim was edited')\n")
    after = _doctor(py, tmp_path)
    assert after["native:omega"]["verdict"] == "fail", after["native:omega"]
    assert "the shim was edited" in after["native:omega"]["evidence"]


def test_a_run_from_another_working_folder_is_executed_again(tmp_path, exts):
    """A relative PYTHONPATH entry (or LD_LIBRARY_PATH, RUNPATH entry) is resolved against the probes' working
    folder, which is wh's. Run from another folder, with the same environment (PWD is whatever the caller left:
    a process started with another cwd and no shell keeps it), the copy of omega found there is what the engine
    started there imports."""
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": "from ._core import answer\n"},
                 {f"omega/_core{SUFFIX}": exts["core"]})
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    (there / "src" / "omega").mkdir(parents=True)
    (there / "src" / "omega" / "__init__.py").write_text("raise ImportError('the checkout in this folder')\n")
    env = {**os.environ, "WH_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": "src", "PWD": str(here)}

    def doctor(cwd: Path) -> dict:
        proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "native",
                               "--json"], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
        assert proc.returncode in (0, 1), proc.stderr
        return {r["id"]: r for r in json.loads(proc.stdout)["results"]}["native:omega"]

    assert doctor(here)["verdict"] == "ok"
    assert doctor(here)["data"]["reused"], "reused where nothing changed"
    after = doctor(there)
    assert after["verdict"] == "fail", after
    assert "the checkout in this folder" in after["evidence"]
    # With no relative entry the working folder decides nothing: a run from elsewhere reuses what passed.
    env["PYTHONPATH"] = str(here)
    assert doctor(here)["verdict"] == "ok"
    assert doctor(there)["data"]["reused"], "a run from another folder with absolute paths only re-executed"


def test_a_folder_a_pth_file_names_appearing_after_a_pass_is_a_change(tmp_path, exts):
    """site puts a .pth file's folder on sys.path only where it exists. omega imports an optional accelerator
    when there is one; the folder the .pth names, created after the pass with a broken one in it, is searched by
    the next import, while neither the .pth file nor any searched folder changed."""
    plugins = tmp_path / "plugins"
    py = make_venv(tmp_path / "venv")
    init = "try:\n    import omega_accel\nexcept ImportError:\n    pass\nfrom ._core import answer\n"
    site = install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": init},
                        {f"omega/_core{SUFFIX}": exts["core"]})
    (site / "plugins.pth").write_text(f"# optional accelerators\n{plugins}\n")
    assert _doctor(py, tmp_path)["native:omega"]["verdict"] == "ok"
    plugins.mkdir()
    (plugins / "omega_accel.py").write_text("raise RuntimeError('a broken accelerator')\n")
    after = _doctor(py, tmp_path)
    assert after["native:omega"]["verdict"] == "fail", after["native:omega"]
    assert "a broken accelerator" in after["native:omega"]["evidence"]


def test_a_file_rewritten_with_its_size_and_mtime_kept_is_a_change(stack, tmp_path):
    """The same size and a restored mtime (an upgrade whose file differs in a few bytes, a tool preserving
    times): its ctime changed, which no one can set back."""
    _doctor(stack, tmp_path)
    site = Path(next((stack.parent.parent / "lib").glob("python*/site-packages")))
    dep = site / "betadep.py"
    st = dep.stat()
    body = "1 / 0".ljust(st.st_size - 1) + "\n"
    assert len(body) == st.st_size
    with open(dep, "w") as fh:  # in place: the same inode
        fh.write(body)
    os.utime(dep, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = _doctor(stack, tmp_path)
    assert after["native:beta"]["verdict"] == "fail", after["native:beta"]
    assert "beta" in _executed(after, "native:beta")


def test_the_user_site_folder_appearing_after_a_pass_is_a_change(tmp_path, exts):
    """A venv with the system's site packages reads the user site folder too, only where it exists: omega's
    optional accelerator, installed there after the pass (``pip install --user``), is what the next import gets."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    init = "try:\n    import omega_accel\nexcept ImportError:\n    pass\nfrom ._core import answer\n"
    install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": init}, {f"omega/_core{SUFFIX}": exts["core"]})
    env = {"HOME": str(tmp_path / "home"), "PYTHONUSERBASE": None, "PYTHONNOUSERSITE": None}
    assert _doctor(py, tmp_path, "--check", "native:omega", env=env)["native:omega"]["verdict"] == "ok"
    user = subprocess.run([str(py), "-c", "import site; print(site.getusersitepackages())"], capture_output=True,
                          text=True, check=True, env={**os.environ, "HOME": env["HOME"]}).stdout.strip()
    Path(user).mkdir(parents=True)
    Path(user, "omega_accel.py").write_text("raise RuntimeError('installed with --user')\n")
    after = _doctor(py, tmp_path, "--check", "native:omega", env=env)
    assert after["native:omega"]["verdict"] == "fail", after["native:omega"]
    assert "installed with --user" in after["native:omega"]["evidence"]


def test_a_library_link_retargeted_in_its_runpath_folder_is_a_change(tmp_path):
    """libwhdep.so.1 is a link to libwhdep.so.1.0 beside libwhdep.so.1.1 (as ldconfig and conda keep them); the
    link pointed at the other file is what the loader maps next, while no file was added to the folder and the
    mapped one is unchanged."""
    lib, build = tmp_path / "lib", tmp_path / "build"
    build.mkdir()
    _needed_lib(lib, "int whgone_value(void) { return 7; }\n")
    (lib / "libwhdep.so.1").rename(lib / "libwhdep.so.1.0")
    _needed_lib(lib, "int other_value(void) { return 1; }\n")
    (lib / "libwhdep.so.1").rename(lib / "libwhdep.so.1.1")
    (lib / "libwhdep.so.1").symlink_to("libwhdep.so.1.0")
    py = make_venv(tmp_path / "venv")
    extra = [f"-L{lib}", "-l:libwhdep.so.1", f"-Wl,-rpath,{lib}", "-Wl,--enable-new-dtags"]
    install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": "from ._core import answer\n"},
                 {f"omega/_core{SUFFIX}": _ext(build, "_core", "WH_NEEDLIB", extra=extra)})
    assert _doctor(py, tmp_path)["native:omega"]["verdict"] == "ok"
    (lib / "new").symlink_to("libwhdep.so.1.1")
    (lib / "new").rename(lib / "libwhdep.so.1")  # as ln -sfn does: the same names in the folder
    after = _doctor(py, tmp_path)
    assert after["native:omega"]["verdict"] == "fail", after["native:omega"]
    assert "whgone_value" in after["native:omega"]["evidence"]


@pytest.fixture
def shm_folder(tmp_path):
    import shutil
    import tempfile

    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="wh-test-", dir="/dev/shm"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_library_mapped_from_dev_shm_is_evidence(tmp_path, shm_folder):
    """/dev/shm is a folder of real files (a library unpacked to RAM): one mapped from there is no device mapping,
    and replaced by one without the symbol the extension needs, the import is executed again."""
    build = tmp_path / "build"
    build.mkdir()
    _needed_lib(shm_folder, "int whgone_value(void) { return 7; }\n")
    extra = [f"-L{shm_folder}", "-l:libwhdep.so.1", f"-Wl,-rpath,{shm_folder}", "-Wl,--enable-new-dtags"]
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": "from ._core import answer\n"},
                 {f"omega/_core{SUFFIX}": _ext(build, "_core", "WH_NEEDLIB", extra=extra)})
    assert _doctor(py, tmp_path)["native:omega"]["verdict"] == "ok"
    _needed_lib(shm_folder, "int other_value(void) { return 1; }\n")  # a new file over it: the same names
    after = _doctor(py, tmp_path)
    assert after["native:omega"]["verdict"] == "fail", after["native:omega"]
    assert "whgone_value" in after["native:omega"]["evidence"]


@pytest.mark.parametrize("where", ["beside the venv", "in the package, in RECORD"])
def test_a_file_the_import_reads_changed_after_a_pass_is_a_change(tmp_path, exts, where):
    """`json.load(open(config))` at import: the config is what the import depends on as much as its code. Reused
    over a corrupted config, the pass was a false green (an in-package data file only warns in stack:files)."""
    py = make_venv(tmp_path / "venv")
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    config = "os.path.join(sys.prefix, 'cfg.json')" if where == "beside the venv" else \
        "os.path.join(os.path.dirname(__file__), 'cfg.json')"
    files = {f"cfgpkg/_core{SUFFIX}": exts["core"]}
    if where != "beside the venv":
        files["cfgpkg/cfg.json"] = b'{"mode": "fast"}'
    install_dist(py, tmp_path / "wheels", "cfgpkg",
                 {"cfgpkg/__init__.py": f"import json, os, sys\nfrom ._core import answer\nCONF = json.load(open({config}))\n"},
                 files)
    path = (py.parent.parent / "cfg.json") if where == "beside the venv" else site / "cfgpkg" / "cfg.json"
    path.write_text('{"mode": "fast"}')
    first = _doctor(py, tmp_path)
    assert first["native:cfgpkg"]["verdict"] == "ok"
    path.write_text('{"mode": ')
    again = _doctor(py, tmp_path)
    assert again["native:cfgpkg"]["verdict"] == "fail", again["native:cfgpkg"]
    assert "JSONDecodeError" in again["native:cfgpkg"]["evidence"]


def test_a_file_the_import_writes_then_reads_back_does_not_make_every_rerun_a_first_run(tmp_path, exts):
    """A cache the first import writes under a new name every run, and reads back: not evidence (a re-run would
    execute it again every time), and the doctor's own files (its probes, its code cache) are none either."""
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "wheels", "cachepkg",
                 {"cachepkg/__init__.py": "import os, tempfile\nfrom ._core import answer\n"
                                          "fd, p = tempfile.mkstemp()\nos.write(fd, b'1')\nos.close(fd)\n"
                                          "VALUE = open(p).read()\nos.unlink(p)\n"},
                 {f"cachepkg/_core{SUFFIX}": exts["core"]})
    first = _doctor(py, tmp_path, env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert first["native:cachepkg"]["verdict"] == "ok"
    again = _doctor(py, tmp_path, env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert _executed(again, "native:cachepkg") == set(), again["native:cachepkg"]


def test_a_file_an_import_reads_and_its_process_writes_later_does_not_make_every_rerun_a_first_run(tmp_path, exts):
    """Read at import, written back a moment later from a thread (an update check, a usage counter): the process's
    own output, not evidence; every run rewrites it, so as evidence every re-run would execute everything again."""
    py = make_venv(tmp_path / "venv")
    state = tmp_path / "state.json"
    init = (f"import json, threading, time\nPATH = {str(state)!r}\ntry:\n    RUNS = json.load(open(PATH))['runs']\n"
            "except (OSError, ValueError):\n    RUNS = 0\ndef _save():\n    time.sleep(0.3)\n"
            "    json.dump({'runs': RUNS + 1, 't': time.time()}, open(PATH, 'w'))\n"
            "threading.Thread(target=_save).start()\nfrom ._core import answer\n")
    install_dist(py, tmp_path / "wheels", "rw", {"rw/__init__.py": init}, {f"rw/_core{SUFFIX}": exts["core"]})
    # imported after rw in the same worker (--jobs 1): the process lives on past rw's thread
    install_dist(py, tmp_path / "wheels", "slowish", {"slowish/__init__.py": "import time\ntime.sleep(1)\n"
                                                                            "from ._core import answer\n"},
                 {f"slowish/_core{SUFFIX}": exts["core"]})
    state.write_text('{"runs": 0}')
    first = _doctor(py, tmp_path, "--jobs=1", "--check", "native")
    assert first["native:rw"]["verdict"] == "ok"
    again = _doctor(py, tmp_path, "--jobs=1", "--check", "native")
    assert _executed(again, "native:rw") == set(), again["native:rw"]


_PLUGINS = "os.path.join(os.path.dirname(__file__), 'plugins')"
_LISTINGS = {"glob.glob": f"glob.glob(os.path.join({_PLUGINS}, '*.py'))",
             "os.listdir": f"[os.path.join({_PLUGINS}, n) for n in os.listdir({_PLUGINS})]",
             "pathlib.Path.iterdir": f"pathlib.Path({_PLUGINS}).iterdir()"}


@pytest.mark.parametrize("listing", sorted(_LISTINGS))
def test_a_file_added_to_a_folder_the_import_lists_is_a_change(tmp_path, exts, listing):
    """omega's __init__ runs every plugins/*.py it finds (a folder that is no package and on no sys.path, so the
    import system never searches it): a broken plugin put there after the pass is what the next import runs, while
    no file the import loaded and no folder the import system searched changed. Byte code written there is no
    change (the first run writes __pycache__ folders)."""
    py = make_venv(tmp_path / "venv")
    init = (f"import glob, os, pathlib\nfrom ._core import answer\nfor _p in sorted({_LISTINGS[listing]}):\n"
            "    if str(_p).endswith('.py'):\n        exec(compile(open(_p).read(), str(_p), 'exec'))\n")
    site = install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": init},
                        {f"omega/_core{SUFFIX}": exts["core"], "omega/plugins/base.py": b"NAMES = ['base']\n"})
    assert _doctor(py, tmp_path)["native:omega"]["verdict"] == "ok"
    plugins = site / "omega" / "plugins"
    (plugins / "__pycache__").mkdir()
    (plugins / "__pycache__" / "base.cpython-311.pyc").write_bytes(b"")
    again = _doctor(py, tmp_path)
    assert _executed(again, "native:omega") == set(), again["native:omega"]
    (plugins / "zz_local.py").write_text("raise ImportError('a broken local plugin')\n")
    after = _doctor(py, tmp_path)
    assert after["native:omega"]["verdict"] == "fail", after["native:omega"]
    assert "a broken local plugin" in after["native:omega"]["evidence"]


_LOOKS_FOR = {"os.path.exists": "if os.path.exists(CONF):\n    exec(open(CONF).read())\n",
              "os.path.isfile": "if os.path.isfile(CONF):\n    exec(open(CONF).read())\n",
              "open": "try:\n    _fh = open(CONF)\nexcept FileNotFoundError:\n    pass\nelse:\n    exec(_fh.read())\n",
              "pathlib.Path.exists": "import pathlib\nif pathlib.Path(CONF).exists():\n    exec(open(CONF).read())\n",
              "os.path.getsize": "try:\n    os.path.getsize(CONF)\nexcept OSError:\n    pass\nelse:\n"
                                 "    exec(open(CONF).read())\n",
              "os.listdir(fd)": "_fd = os.open(os.path.dirname(os.path.dirname(CONF)), os.O_RDONLY)\n"
                                "if 'etc' in os.listdir(_fd):\n    exec(open(CONF).read())\nos.close(_fd)\n"}


@pytest.mark.parametrize("looked_for", sorted(_LOOKS_FOR))
def test_an_optional_file_appearing_after_a_pass_is_a_change(tmp_path, exts, looked_for):
    """omega reads a site config only where there is one: at the pass there was none, so nothing was opened (an
    existence test) or the open failed. A broken config put there later is what the next import runs."""
    conf = tmp_path / "etc" / "omega.conf.py"
    py = make_venv(tmp_path / "venv")
    init = f"import os\nfrom ._core import answer\nCONF = {str(conf)!r}\n{_LOOKS_FOR[looked_for]}"
    install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": init}, {f"omega/_core{SUFFIX}": exts["core"]})
    assert _doctor(py, tmp_path)["native:omega"]["verdict"] == "ok"
    conf.parent.mkdir()
    conf.write_text("raise ImportError('a broken site config')\n")
    after = _doctor(py, tmp_path)
    assert after["native:omega"]["verdict"] == "fail", after["native:omega"]
    assert "a broken site config" in after["native:omega"]["evidence"]


def test_what_the_import_creates_after_looking_for_it_does_not_make_every_rerun_a_first_run(tmp_path, exts):
    """A cache folder made where none was found (`if not exists(d): os.makedirs(d)`), a temporary folder listed and
    removed: the process's own, not evidence (as absent, every re-run would find them there, or find a new name)."""
    state = tmp_path / "state" / "omega"
    py = make_venv(tmp_path / "venv")
    init = (f"import os, shutil, tempfile\nfrom ._core import answer\nD = {str(state)!r}\n"
            "if not os.path.exists(D):\n    os.makedirs(D)\n"
            "if not os.path.isfile(os.path.join(D, 'seen')):\n    open(os.path.join(D, 'seen'), 'w').close()\n"
            "_t = tempfile.mkdtemp()\nopen(os.path.join(_t, 'x'), 'w').close()\nNAMES = os.listdir(_t)\n"
            "shutil.rmtree(_t)\n")
    install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": init}, {f"omega/_core{SUFFIX}": exts["core"]})
    first = _doctor(py, tmp_path)
    assert first["native:omega"]["verdict"] == "ok" and state.is_dir()
    again = _doctor(py, tmp_path)
    assert _executed(again, "native:omega") == set(), again["native:omega"]


_LISTINGS_OF_A_PROCESS = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
from _probe_channel import Evidence
evidence = Evidence()
evidence.new()
plugins = sys.argv[2]
for folder in ("/proc/self", "/sys", sys.argv[1], plugins, os.path.join(plugins, "__pycache__")):
    os.listdir(folder)
os.path.exists(os.path.join(plugins, "missing.py"))
os.path.exists(os.path.join(sys.argv[1], "missing.py"))
print(json.dumps(evidence.new()))
"""


def test_a_listed_folder_is_named_by_its_entry_names_but_pseudo_files_byte_code_and_the_doctors_own_are_not(tmp_path):
    """A listed folder is evidence as the import system's folders are (its names but __pycache__); /proc, /sys, the
    doctor's probes folder and a __pycache__ folder are not: they differ every run, or the doctor's run writes them."""
    from wheelhouse.doctor import verdicts

    probes = Path(__file__).resolve().parents[2] / "doctor" / "probes"
    plugins = tmp_path / "plugins"
    (plugins / "__pycache__").mkdir(parents=True)
    (plugins / "a.py").write_text("")
    out = subprocess.run([sys.executable, "-c", _LISTINGS_OF_A_PROCESS, str(probes), str(plugins)],
                         capture_output=True, text=True, check=True)
    named = {entry[0]: entry for entry in json.loads(out.stdout)}
    assert named[str(plugins)][6] == "names:" + verdicts._names_now(str(plugins))  # what the cache compares
    assert named[str(plugins / "missing.py")] == [str(plugins / "missing.py")]
    assert not [p for p in named if p.startswith(("/proc", "/sys", str(probes))) or p.endswith("__pycache__")], named


def test_an_import_that_lists_the_temporary_folder_is_reused_over_the_doctors_own_run_folder(tmp_path, exts):
    """The doctor makes its run folder (wh-probe-code-*) in the temporary folder, under a new name each run: an import
    that globs the temporary folder (its own stale lock files) saw a change there every run and never was reused."""
    py = make_venv(tmp_path / "venv")
    init = "import glob, os, tempfile\nfrom ._core import answer\nLOCKS = glob.glob(os.path.join(tempfile.gettempdir(), 'omega-*.lock'))\n"
    install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": init}, {f"omega/_core{SUFFIX}": exts["core"]})
    private = tmp_path / "tmp"
    private.mkdir()
    env = {"TMPDIR": str(private)}
    first = _doctor(py, tmp_path, env=env)
    assert first["native:omega"]["verdict"] == "ok"
    again = _doctor(py, tmp_path, env=env)
    assert _executed(again, "native:omega") == set(), again["native:omega"]
    (private / "omega-1.lock").write_text("")  # what the import globs for: a change
    assert "omega" in _executed(_doctor(py, tmp_path, env=env), "native:omega")


def test_an_existence_test_called_by_keyword_works_in_a_probe(tmp_path, exts):
    """The probe watches os.path.isdir and kin: a wrapper taking one positional path made `isdir(s=...)` a TypeError
    in the probe alone, a failed import that runs everywhere else."""
    py = make_venv(tmp_path / "venv")
    init = "import os\nfrom ._core import answer\nassert os.path.isdir(s='/') and not os.path.exists(path='/nonexistent')\n"
    install_dist(py, tmp_path / "wheels", "kwpkg", {"kwpkg/__init__.py": init}, {f"kwpkg/_core{SUFFIX}": exts["core"]})
    assert _doctor(py, tmp_path)["native:kwpkg"]["verdict"] == "ok"


def _other_pythons() -> list[str]:
    """Interpreters of other versions on this machine (pyenv's), where pathlib's layout differs (3.13: a package)."""
    import glob
    import shutil

    found = {shutil.which(f"python3.{minor}") for minor in range(8, 15)}  # a pyenv shim may name one not there
    found |= set(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")))
    return sorted(p for p in found if p and "/shims/" not in p and os.path.realpath(p) != os.path.realpath(sys.executable))


@pytest.mark.parametrize("python", _other_pythons() or [pytest.param(None, marks=pytest.mark.skip("no other Python"))])
def test_the_pathlib_watch_holds_on_every_python_layout(python):
    """On 3.13 pathlib is a package whose Path inherits exists() from pathlib._abc.PathBase: the watch set where the
    method was defined on Path patched nothing there, and a broken config appearing was reused as ok."""
    probes = Path(__file__).resolve().parents[2] / "doctor" / "probes"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import _probe_channel as c, pathlib\n"
            "pathlib.Path('/no/such/wh-conf').exists(); pathlib.Path('/no/such/wh-dir').is_dir()\n"
            "print(sorted(p for p in c._ABSENT if p.startswith('/no/such/')))")
    proc = subprocess.run([python, "-c", code, str(probes)], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 and ("SyntaxError" in proc.stderr or "ModuleNotFoundError" in proc.stderr):
        pytest.skip(f"{python} cannot run the probe channel (too old)")
    assert proc.stdout.strip() == "['/no/such/wh-conf', '/no/such/wh-dir']", proc.stderr
