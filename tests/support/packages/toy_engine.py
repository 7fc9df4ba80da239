"""A toy engine repository and a fake NVIDIA runtime, for `wh build` tests and the GPU-box script.

The toy engine mimics what makes real engine builds hard: its setup.py builds a
C extension that links ``-lcudart`` against the ``nvidia/*/lib`` folders of the
building interpreter's site-packages (as FreeToken's build hard-codes
``-L<wheel>/lib``), where NVIDIA wheels ship only ``libcudart.so.13``.

History made by ``make_repo``::

    main:      base commit   (kernel.py v1, working extension)
    pull/7:    base + kernel.py v2   (a "PR": refs/heads/pr-7 and refs/pull/7/head)
    broken:    base + a C syntax error in _cuda.c

Run as a script: ``python toy_engine.py make-repo DIR`` prints the shas as JSON;
``python toy_engine.py make-cudart LIBDIR`` builds a fake libcudart.so.13.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["make_repo", "make_cudart", "make_build_venv", "KERNEL_V1", "KERNEL_V2", "recipe_text"]

SETUP_PY = '''\
import glob, os, sysconfig
from setuptools import Extension, setup

# Like FreeToken: link the CUDA runtime from the NVIDIA wheels of the building interpreter.
site = sysconfig.get_paths()["purelib"]
libdirs = sorted(d for d in glob.glob(os.path.join(site, "nvidia", "*", "lib")) if os.path.isdir(d))
print("toyengine: linking -lcudart from", libdirs, flush=True)
setup(
    name="toyengine",
    version="0.1.0",
    packages=["toyengine"],
    ext_modules=[Extension("toyengine._cuda", ["toyengine/_cuda.c"], libraries=["cudart"],
                           library_dirs=libdirs, runtime_library_dirs=libdirs)],
)
'''

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
'''

CUDA_C = r'''
#include <Python.h>

int cudaRuntimeGetVersion(int *version);  /* from libcudart */

static PyObject *runtime_version(PyObject *self, PyObject *args) {
    int v = 0;
    int rc = cudaRuntimeGetVersion(&v);
    if (rc != 0) {
        PyErr_Format(PyExc_RuntimeError, "cudaRuntimeGetVersion returned %d", rc);
        return NULL;
    }
    return PyLong_FromLong(v);
}

static PyMethodDef methods[] = {
    {"runtime_version", runtime_version, METH_NOARGS, "cudaRuntimeGetVersion()"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cuda", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cuda(void) { return PyModule_Create(&module); }
'''

BROKEN_C = CUDA_C.replace("int v = 0;", "int v = 0  /* missing semicolon */")

KERNEL_V1 = 'def rowwise_ok():\n    return True\n'
KERNEL_V2 = 'def rowwise_ok():\n    # PR 7: the side-stream launch hangs on this GPU\n    return False\n'

FAKE_CUDART = "int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }\n"


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _write(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def make_repo(path: str | Path) -> dict[str, str]:
    """Create the toy engine repository at ``path``; return its shas and refs."""
    repo = Path(path)
    repo.mkdir(parents=True, exist_ok=True)
    _git(repo, "init", "--quiet", "-b", "main")
    _write(repo, {"setup.py": SETUP_PY, "pyproject.toml": PYPROJECT, "toyengine/__init__.py": "",
                  "toyengine/_cuda.c": CUDA_C, "toyengine/kernel.py": KERNEL_V1})
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", "toy engine")
    base = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "--quiet", "-b", "pr-7")
    _write(repo, {"toyengine/kernel.py": KERNEL_V2})
    _git(repo, "commit", "--quiet", "-am", "PR 7: rowwise off")
    pr = _git(repo, "rev-parse", "HEAD")
    _git(repo, "update-ref", "refs/pull/7/head", pr)  # what a forge publishes for a PR
    _git(repo, "checkout", "--quiet", "-b", "broken", base)
    _write(repo, {"toyengine/_cuda.c": BROKEN_C})
    _git(repo, "commit", "--quiet", "-am", "break the C source")
    broken = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "--quiet", "main")
    return {"repo": str(repo.resolve()), "base": base, "pr": pr, "pr_ref": "pull/7/head", "broken": broken}


def make_cudart(libdir: str | Path) -> Path:
    """A real ELF ``libcudart.so.13`` (soname libcudart.so.13, no bare libcudart.so), built with gcc."""
    libdir = Path(libdir)
    libdir.mkdir(parents=True, exist_ok=True)
    src = libdir / ".fake_cudart.c"
    src.write_text(FAKE_CUDART)
    out = libdir / "libcudart.so.13"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcudart.so.13", "-o", str(out), str(src)], check=True)
    src.unlink()
    return out


def make_build_venv(path: str | Path, *, with_setuptools: bool = True, cudart: bool = True) -> Path:
    """A pip-less venv (fast) whose site-packages has ``nvidia/cu13/lib/libcudart.so.13`` only.

    ``with_setuptools``: a .pth adds the running interpreter's site-packages (setuptools, the build
    backend) to the venv, so no index is needed. Returns the venv's python.
    """
    import sysconfig

    path = Path(path)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    py = path / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    if with_setuptools:
        (site / "_wh_test_backend.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    if cudart:
        make_cudart(site / "nvidia" / "cu13" / "lib")
    return py


def recipe_text(repo: str, commit: str, *, fetch=(), backports=(), link_sonames=True, name="toyengine",
                env: dict | None = None) -> str:
    """A recipe TOML for the toy repo. ``backports``: (path, ref, sha256 or None, export or None)."""
    lines = ["[engine]", f'name = "{name}"', f"repo = {json.dumps(repo)}", f'commit = "{commit}"',
             f"fetch = {json.dumps(list(fetch))}"]
    for path, ref, sha, export in backports:
        lines += ["", "[[engine.backport]]", f'path = "{path}"', f'ref = "{ref}"']
        if sha:
            lines.append(f'sha256 = "{sha}"')
        if export:
            lines.append(f'export = "{export}"')
    lines += ["", "[engine.build]", 'subdirectory = "."', "no-build-isolation = true",
              f"link-sonames = {'true' if link_sonames else 'false'}"]
    if env:
        lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    cmd, arg = sys.argv[1], sys.argv[2]
    if cmd == "make-repo":
        print(json.dumps(make_repo(arg)))
    elif cmd == "make-cudart":
        print(make_cudart(arg))
    else:
        sys.exit(f"unknown command {cmd}")
