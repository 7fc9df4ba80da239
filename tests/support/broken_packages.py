"""Packages that are findable but broken, built for real with gcc, as wheels; and venvs to install them in.

Each package ships a compiled extension module (so the doctor's native check
probes it) and fails in its own real way:

- ``undefsym``    the .so references a symbol nothing defines ("undefined symbol")
- ``missinglib``  the .so needs libwhgone.so, which was deleted after linking
- ``raiser``      healthy .so, but ``__init__`` raises
- ``hanger``      healthy .so, but ``__init__`` never returns
- ``segv``        the .so's PyInit dereferences NULL (SIGSEGV)
- ``fakejit``     imports fine; its JIT (gcc on a kernel source) fails to compile
- ``healthy``     a working extension; must stay installed and pass
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
import zipfile
from pathlib import Path

from wheelmaker import make_wheel

__all__ = ["have_toolchain", "ext_needing_a_gone_library", "build_broken_wheels", "make_venv", "install_wheel", "site_packages", "BROKEN",
           "write_fakejit_registry"]

BROKEN = ("undefsym", "missinglib", "raiser", "hanger", "segv", "fakejit")

_EXT_C = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define STR2(x) #x
#define STR(x) STR2(x)
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#ifdef WH_UNDEF
extern int wh_missing_symbol(void);
#endif
#ifdef WH_NEEDLIB
extern int whgone_value(void);
#endif
static PyObject *answer(PyObject *self, PyObject *args) {
#if defined(WH_UNDEF)
    return PyLong_FromLong(wh_missing_symbol());
#elif defined(WH_NEEDLIB)
    return PyLong_FromLong(whgone_value());
#else
    return PyLong_FromLong(42);
#endif
}
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, "42"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, STR(MODNAME), NULL, -1, methods};
PyMODINIT_FUNC CAT(PyInit_, MODNAME)(void) {
#ifdef WH_SEGV
    *(volatile int *)0 = 1;
#endif
#ifdef WH_ONCE
    static int initialised = 0;  /* as OpenCV's or a pybind11 module's types: registered once per process */
    if (initialised++) {
        PyErr_SetString(PyExc_ImportError, "initialised twice (already loaded under another name)");
        return NULL;
    }
#endif
#ifdef WH_IMPORT
    PyObject *dep = PyImport_ImportModule(STR(WH_IMPORT));  /* as matplotlib's _tkagg needs tkinter */
    if (dep == NULL)
        return NULL;
    Py_DECREF(dep);
#endif
    return PyModule_Create(&mod);
}
"""

_FAKEJIT_INIT = r'''
import os, subprocess, tempfile
from . import _core

KERNEL = "int kernel(int x) { return x + undeclared_thing; }\n"

def compile_kernel():
    """Compile the 'kernel' with gcc, as a JIT library would at first use."""
    d = tempfile.mkdtemp(prefix="fakejit-")
    src = os.path.join(d, "k.c")
    with open(src, "w") as fh:
        fh.write(KERNEL)
    proc = subprocess.run(["gcc", "-c", src, "-o", os.path.join(d, "k.o")], capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr
'''

_FAKEJIT_PROBE = r'''
import json, sys
import fakejit
rc, out = fakejit.compile_kernel()
rec = {"ok": rc == 0, "error": None if rc == 0 else "gcc exited %d compiling the fakejit kernel" % rc,
       "compiler_output": out}
sys.stdout.write("\n@@WH-PROBE@@ " + json.dumps(rec) + "\n")
'''


def have_toolchain() -> bool:
    inc = sysconfig.get_paths()["include"]
    return shutil.which("gcc") is not None and os.path.exists(os.path.join(inc, "Python.h"))


def _gcc(args: list[str]) -> None:
    proc = subprocess.run(["gcc", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"gcc {' '.join(args)} failed:\n{proc.stderr}")


_BUILT: dict[tuple[str, ...], bytes] = {}  # (modname, *defines) -> the .so gcc made from them, once per process


def _ext(build: Path, modname: str, *defines: str, extra: list[str] = ()) -> bytes:
    src = build / f"{modname}-{'-'.join(defines) or 'ok'}.c"
    src.write_text(_EXT_C)
    out = build / f"{src.stem}.so"
    if not extra and (modname, *defines) in _BUILT:  # the same source and flags: one build serves them all
        out.write_bytes(_BUILT[(modname, *defines)])
        return _BUILT[(modname, *defines)]
    args = ["-shared", "-fPIC", "-O0", f"-I{sysconfig.get_paths()['include']}", f"-DMODNAME={modname}"]
    args += [f"-D{d}" for d in defines] + [str(src), "-o", str(out), *extra]
    _gcc(args)
    if not extra:
        _BUILT[(modname, *defines)] = out.read_bytes()
    return out.read_bytes()



def ext_needing_a_gone_library(build: Path, modname: str, soname: str) -> bytes:
    """An extension module linked against ``soname``, which is then deleted: 'cannot open shared object file'."""
    lib = build / soname
    src = build / f"{modname}-{soname}-dep.c"
    src.write_text("int whgone_value(void) { return 7; }\n")
    _gcc(["-shared", "-fPIC", f"-Wl,-soname,{soname}", str(src), "-o", str(lib)])
    out = _ext(build, modname, "WH_NEEDLIB", extra=[f"-L{build}", f"-l:{soname}"])
    lib.unlink()
    return out

def _tags() -> str:
    v = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    return f"{v}-{v}-linux_x86_64"


def build_broken_wheels(folder: Path) -> dict[str, Path]:
    """Build every package as a wheel into ``folder``; returns name -> wheel path."""
    folder = Path(folder)
    build = folder / "build"
    build.mkdir(parents=True, exist_ok=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    ok_core = _ext(build, "_core")
    wheels: dict[str, Path] = {}

    def pkg(name: str, init: str, core: bytes, extra_modules: dict[str, str] | None = None) -> None:
        wheels[name] = make_wheel(folder, name, "1.0", tags=_tags(),
                                  modules={f"{name}/__init__.py": init, **(extra_modules or {})},
                                  files={f"{name}/_core{suffix}": core})

    pkg("healthy", "from ._core import answer\n", ok_core)
    pkg("undefsym", "from ._core import answer\n", _ext(build, "_core", "WH_UNDEF"))
    # Link against a real library, then delete it: the loader cannot find it at import.
    gone = build / "libwhgone.so"
    (build / "whgone.c").write_text("int whgone_value(void) { return 7; }\n")
    _gcc(["-shared", "-fPIC", str(build / "whgone.c"), "-o", str(gone)])
    core = _ext(build, "_core", "WH_NEEDLIB", extra=[f"-L{build}", "-lwhgone"])
    gone.unlink()
    pkg("missinglib", "from ._core import answer\n", core)
    pkg("raiser", "from ._core import answer\nraise RuntimeError('raiser refuses to import: broken on purpose')\n", ok_core)
    pkg("hanger", "from ._core import answer\nimport time\nwhile True:\n    time.sleep(1)\n", ok_core)
    pkg("segv", "from ._core import answer\n", _ext(build, "_core", "WH_SEGV"))
    pkg("fakejit", _FAKEJIT_INIT, ok_core)
    return wheels


def write_fakejit_registry(folder: Path) -> Path:
    """A JIT registry file (for WH_DOCTOR_JIT_PROBES) registering fakejit's compile probe."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probe_fakejit.py").write_text(_FAKEJIT_PROBE)
    reg = folder / "jit.toml"
    reg.write_text('[[jit]]\nid = "fakejit"\ndistribution = "fakejit"\nscript = "probe_fakejit.py"\n'
                   'needs_gpu = false\ntitle = "fakejit compiles its kernel"\n')
    return reg


_PIP_TREE: list[Path] = []  # the bundled pip unpacked and byte-compiled, once per process


def _compiled_pip() -> Path | None:
    """The pip wheel this Python's ensurepip would install, unpacked and byte-compiled in a folder of this
    process's own (under its TMPDIR), or None (a Python without ensurepip)."""
    if not _PIP_TREE:
        found = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("ensurepip/_bundled/pip-*-py3-none-any.whl"))
        if not found:
            return None
        tree = Path(tempfile.mkdtemp(prefix="pip-tree-"))
        with zipfile.ZipFile(found[-1]) as zf:
            zf.extractall(tree)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True, capture_output=True)
        _PIP_TREE.append(tree)
    return _PIP_TREE[0]


def make_venv(path: Path, with_pip: bool = False) -> Path:
    """A fresh venv; returns its python. ``with_pip``: the pip ensurepip bundles, in its site-packages with its
    byte code (a real pip, `python -m pip` runs it). Made once per process and copied (files and times, so the
    .pyc files stay valid): ensurepip runs pip to install pip, and a first pip run in a fresh venv compiles
    every module it imports, ~5-10 s each on a loaded 2-core machine."""
    tree = _compiled_pip() if with_pip else None
    if with_pip and tree is None:  # no bundled pip to copy: ensurepip's own run
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, capture_output=True)
    else:  # what `python -m venv --without-pip` makes, without starting an interpreter to make it
        venv.EnvBuilder(symlinks=True, with_pip=False).create(path)
    python = path / "bin" / "python"
    if tree is not None:
        site = path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
        shutil.copytree(tree, site, dirs_exist_ok=True, copy_function=shutil.copy2)
    return python


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


def install_wheel(python: Path, wheel: Path) -> None:
    """Unpack a (pure-layout) wheel into the venv's site-packages; its RECORD comes along."""
    site = site_packages(python)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)


def install_dist(python: Path, folder: Path, name: str, modules: dict[str, str], files: dict[str, bytes],
                 **kw) -> Path:
    """Write ``name`` 1.0 as a wheel for this interpreter into ``folder``, unpack it into the venv; its site folder."""
    install_wheel(python, make_wheel(folder, name, "1.0", tags=_tags(), modules=modules, files=files, **kw))
    return site_packages(python)
