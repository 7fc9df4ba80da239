"""Facts about the interpreter that will receive a wheelhouse, asked of that interpreter.

The receiving interpreter may not be the one running wh (``--python`` points at
the box's CPython 3.12 while wh runs elsewhere), so everything -- its ordered
wheel tags, its install paths, its libc -- comes from running it in a
subprocess with wh's stdlib-only capture script. What it says about tags, ABI,
libc and markers is a ``TargetProfile`` (the same value ``wh target capture``
writes), so an installer asks it the same questions a resolver asks a target.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from wheelhouse.errors import TargetError, UsageError
from wheelhouse.resources import capture_script
from wheelhouse.script_answer import PRINT_ANSWER, read_answer
from .profile import TargetProfile, target_from_json

__all__ = ["Interpreter", "InterpreterError", "inspect_interpreter", "capture_in", "create_venv", "venv_python",
           "visible_site_dirs", "distinct_dirs"]

# Runs inside the target interpreter: stdlib only, and nothing that reaches the network.
_PROBE = r"""
import json, sys, sysconfig, importlib.util
spec = importlib.util.spec_from_file_location("_wh_capture", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
data = mod.capture(include_gpus=False, include_distributions=False)  # install asks target.installed
paths = sysconfig.get_paths()
data["paths"] = {k: paths.get(k) for k in ("purelib", "platlib", "scripts", "data", "include")}
data["executable"] = sys.executable
data["prefix"] = sys.prefix
data["base_prefix"] = getattr(sys, "base_prefix", sys.prefix)
data["full_version"] = ".".join(map(str, sys.version_info[:3]))
data["sys_path"] = [p for p in sys.path if p]
data["has_pip"] = importlib.util.find_spec("pip") is not None  # found, not imported (~0.1 s on every probe)
data["bytecode"] = {"magic": importlib.util.MAGIC_NUMBER.hex(), "cache_tag": sys.implementation.cache_tag}
answer = data
""" + PRINT_ANSWER


class InterpreterError(UsageError):
    code = "bad-interpreter"


@dataclass(frozen=True)
class Interpreter:
    """One Python interpreter, as it describes itself: its target profile and its install paths."""

    executable: str
    target: TargetProfile  # implementation, version, ABI, ordered tags, libc, markers
    version: str  # "3.12.3"
    purelib: str
    platlib: str
    scripts: str
    data: str
    include: str | None
    prefix: str
    base_prefix: str
    has_pip: bool = False
    sys_path: tuple[str, ...] = ()
    magic: str = ""  # hex of its importlib.util.MAGIC_NUMBER: which .pyc files it reads
    cache_tag: str = ""  # sys.implementation.cache_tag, e.g. cpython-312 (None there: it writes no .pyc)

    # The profile's facts, under the names install and env code reads.
    @property
    def implementation(self) -> str:
        return self.target.implementation

    @property
    def python_version(self) -> str:
        return self.target.python_version

    @property
    def abi(self) -> str:
        return self.target.abi

    @property
    def tags(self) -> tuple[str, ...]:
        return self.target.tags

    @property
    def libc(self) -> tuple[str, str] | None:
        return self.target.libc

    @property
    def markers(self) -> Mapping[str, str]:
        return self.target.markers

    @property
    def visible_site_dirs(self) -> tuple[str, ...]:
        """Every site folder this interpreter imports from: its own, then e.g. the base's with
        ``--system-site-packages``."""
        return visible_site_dirs(self.site_dirs, self.sys_path)

    @property
    def site_dirs(self) -> tuple[str, ...]:
        """purelib and platlib (once when they are the same folder, under one name or two)."""
        return tuple(distinct_dirs([self.purelib, self.platlib]))

    @property
    def is_venv(self) -> bool:
        return os.path.realpath(self.prefix) != os.path.realpath(self.base_prefix)

    @property
    def glibc(self) -> tuple[int, int] | None:
        return self.target.glibc

    def describe(self) -> str:
        libc = f" {self.libc[0]} {self.libc[1]}" if self.libc else ""
        return f"{self.executable} ({self.implementation}{self.python_version.replace('.', '')}, {self.abi}{libc})"

    def scheme(self) -> dict[str, str]:
        """Install destinations, in the names a wheel's ``.data/`` folder uses."""
        headers = self.include or os.path.join(self.data, "include")
        if self.is_venv:  # the base's include folder is not the venv's to write (pip's venv scheme too)
            headers = os.path.join(self.data, "include", "site", "python" + ".".join(self.version.split(".")[:2]))
        return {"purelib": self.purelib, "platlib": self.platlib, "scripts": self.scripts, "data": self.data,
                "headers": headers}


def distinct_dirs(dirs: Sequence[str | os.PathLike]) -> list[str]:
    """``dirs`` once per folder, in order: two names of one folder count once. Where ``lib64`` is a
    link to ``lib`` (a venv on Fedora, RHEL, SUSE) purelib and platlib are two names of one folder:
    listed twice, one installed copy was found twice, and an upgrade moved it aside under one name,
    then failed to move it under the other."""
    out, seen = [], set()
    for d in dirs:
        real = os.path.realpath(d)
        if real not in seen:
            seen.add(real)
            out.append(str(d))
    return out


def inspect_interpreter(python: str | os.PathLike | None = None, timeout: float = 60) -> Interpreter:
    """Ask ``python`` (default: the running interpreter) for its facts."""
    exe = str(python or sys.executable)
    try:
        proc = subprocess.run(
            [exe, "-I", "-c", _PROBE, str(capture_script())],
            capture_output=True, text=True, timeout=timeout,
        )
    except FileNotFoundError as exc:
        # A bare name is looked up on PATH, not in the current folder.
        where = "does not exist" if os.sep in exe else "is not on PATH"
        raise InterpreterError(f"interpreter {exe} {where}", hint="pass an existing one: --python /path/to/python3") from exc
    except PermissionError as exc:
        raise InterpreterError(f"interpreter {exe} is not executable", hint="pass a python executable to --python") from exc
    except subprocess.TimeoutExpired as exc:
        raise InterpreterError(f"interpreter {exe} did not answer within {timeout:.0f}s", hint="check that it starts: "
                               f"{exe} -c 'print(1)'") from exc
    if proc.returncode != 0:
        raise InterpreterError(f"interpreter {exe} could not describe itself (exit {proc.returncode})",
                               hint=f"check that it runs: {exe} -c 'import sysconfig'", detail=proc.stderr[-2000:])
    try:
        d = read_answer(proc.stdout)
    except ValueError as exc:
        raise InterpreterError(f"interpreter {exe} printed something that is not JSON", hint="is it a Python >= 3.8?",
                               detail=proc.stdout[-2000:]) from exc
    try:
        return _interpreter_from(d, exe)
    except (KeyError, TypeError, AttributeError, TargetError) as exc:  # JSON, but not the probe's
        raise InterpreterError(f"interpreter {exe} printed JSON that is not wh's probe answer ({exc!r})",
                               hint="is it a Python >= 3.8?", detail=proc.stdout[-2000:]) from exc


def capture_in(python: str | os.PathLike, *, include_gpus: bool = True, include_distributions: bool = True,
               timeout: float = 120) -> dict:
    """``python``'s own target profile (``wh target capture --python``): the capture script run by it, as on the box.

    The script runs from a folder of its own (a copy, as ``python capture_target.py`` runs from a wheelhouse),
    started as that interpreter normally starts (its user site and ``PYTHONPATH`` count: they are what it
    imports), so the distributions are the ones it imports, never wh's own environment's.
    """
    import json
    import tempfile

    exe = str(python)
    flags = [*([] if include_gpus else ["--no-gpus"]), *([] if include_distributions else ["--no-distributions"])]
    with tempfile.TemporaryDirectory(prefix="wh-capture-") as folder:
        script = Path(folder) / "capture_target.py"
        shutil.copyfile(capture_script(), script)
        try:
            proc = subprocess.run([exe, str(script), *flags], capture_output=True, text=True, timeout=timeout,
                                  cwd=folder)
        except (FileNotFoundError, PermissionError) as exc:
            where = "is not executable" if isinstance(exc, PermissionError) else (
                "does not exist" if os.sep in exe else "is not on PATH")
            raise InterpreterError(f"interpreter {exe} {where}",
                                   hint="pass the interpreter to capture: --python /path/to/python3") from exc
        except subprocess.TimeoutExpired as exc:
            raise InterpreterError(f"interpreter {exe} did not answer within {timeout:.0f}s",
                                   hint=f"check that it starts: {exe} -c 'print(1)'") from exc
    if proc.returncode != 0:
        raise InterpreterError(f"interpreter {exe} could not run the capture script (exit {proc.returncode})",
                               hint=f"check that it runs: {exe} -c 'import sysconfig'", detail=proc.stderr[-2000:])
    try:
        data = json.loads(proc.stdout)
        target_from_json(data, source="captured", where=f"interpreter {exe}")  # a profile, or refused here
    except (ValueError, TypeError, KeyError, TargetError) as exc:
        raise InterpreterError(f"interpreter {exe} printed something that is not a target profile",
                               hint="is it a Python >= 3.8?", detail=proc.stdout[-2000:]) from exc
    return data


def _interpreter_from(d: Mapping, exe: str) -> Interpreter:
    paths = dict(d["paths"])
    # One folder, one name: where ``lib64`` links to ``lib`` (a venv on Fedora, RHEL, SUSE), platlib is
    # purelib under another name. Two names for one file made an upgrade move the old copy aside under
    # one of them, then fail to move it under the other (tests/install/test_split_sites.py).
    if paths["platlib"] != paths["purelib"] and len(distinct_dirs([paths["platlib"], paths["purelib"]])) == 1:
        paths["platlib"] = paths["purelib"]
    return Interpreter(
        executable=d.get("executable") or exe,
        target=target_from_json(d, source="captured", where=f"interpreter {exe}"),
        version=d.get("full_version") or d["marker_environment"]["python_full_version"],
        purelib=paths["purelib"],
        platlib=paths["platlib"],
        scripts=paths["scripts"],
        data=paths["data"],
        include=paths.get("include"),
        prefix=d["prefix"],
        base_prefix=d["base_prefix"],
        has_pip=bool(d.get("has_pip")),
        sys_path=tuple(d.get("sys_path") or ()),
        magic=str((d.get("bytecode") or {}).get("magic") or ""),
        cache_tag=str((d.get("bytecode") or {}).get("cache_tag") or ""),
    )


def venv_python(path: str | os.PathLike) -> Path:
    return Path(path) / "bin" / "python"


def visible_site_dirs(own: Sequence[str], sys_path: Sequence[str]) -> tuple[str, ...]:
    """``own`` site folders first, then every other site folder on ``sys_path``, in import order.

    The NVIDIA libraries an engine loads can live in a parent venv (images ship torch in
    /opt/torch/.venv) or the system's dist-packages (Kaggle); links, env and the doctor must see them.
    """
    extra = [p for p in sys_path if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages")]
    return tuple(distinct_dirs([*own, *extra]))  # (lib64 -> lib on sys.path too: one folder, scanned once)


def create_venv(path: str | os.PathLike, python: str | os.PathLike | None = None,
                system_site_packages: bool = False, *, base: Interpreter | None = None) -> Interpreter:
    """Create a venv at ``path`` with ``python`` (no pip inside: wh installs into it) and describe it.

    An existing venv is reused as it is. ``base``: ``python``'s facts when the caller has them already.
    """
    path = Path(path)
    if venv_python(path).exists():
        return inspect_interpreter(venv_python(path))
    if path.exists() and any(path.iterdir()):
        raise InterpreterError(f"{path} exists and is not a venv", hint="pass a new or empty folder to --venv")
    cmd = [str(python or sys.executable), "-m", "venv", "--without-pip"]
    if system_site_packages:
        cmd.append("--system-site-packages")
    existed = path.exists()
    try:
        proc = subprocess.run(cmd + [str(path)], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise InterpreterError(f"could not create a venv at {path} with {cmd[0]}",
                                   hint=f"check that {path.parent} is writable and `{cmd[0]} -m venv -h` works",
                                   detail=proc.stderr[-2000:])
        created = inspect_interpreter(venv_python(path))
        if system_site_packages and _inherit_parent_venv(created, base or inspect_interpreter(python or sys.executable)):
            created = inspect_interpreter(venv_python(path))  # its sys.path now holds the parent's folders
    except BaseException:
        # No half-created venv: the next run would take it for a finished one.
        if existed:  # it was an empty folder: leave it empty
            for child in path.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
        raise
    return created


def _inherit_parent_venv(created: Interpreter, parent: Interpreter) -> bool:
    """Make ``--system-site-packages`` see a parent VENV's packages, not only its base install.

    ``python -m venv`` run by a venv's interpreter points the new venv at the *base* Python, so
    ``--system-site-packages`` would hide the parent venv's torch (images such as /opt/torch/.venv).
    A ``.pth`` file in the new venv appends the parent's site folders after the venv's own.
    """
    if not parent.is_venv:
        return False
    dirs = [d for d in parent.site_dirs if os.path.isdir(d)]
    if dirs:
        pth = Path(created.purelib) / "_wh_parent_venv.pth"
        pth.write_text("".join(d + "\n" for d in dirs), encoding="utf-8")
    return bool(dirs)
