"""Build a wheel through the project's PEP 517 backend, with the compiler's own words kept.

``pip wheel`` reports a failed C/CUDA build as "failed building wheel" and hides
the ``ld`` or ``nvcc`` line that says why. Here the backend's hooks run through ``build.ProjectBuilder`` in a
subprocess of the TARGET interpreter, with an injected runner: every line it prints is
streamed to a sink (the terminal) and to a log file as it comes, and on failure
the lines that look like compiler errors are pulled out for the error message.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from wheelhouse.errors import UsageError, WhError
from wheelhouse.target import TargetProfile
from wheelhouse.target.installed import installed_distributions

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "BuildResult",
    "BuildFailed",
    "BuildDepsMissing",
    "StreamingRunner",
    "build_wheel",
    "extract_compiler_errors",
    "missing_build_requirements",
]

Sink = Callable[[str], None]

_DEFAULT_BACKEND = "setuptools.build_meta:__legacy__"  # PEP 517: no [build-system] means setuptools
# What a compiler, linker or nvcc says when it fails.
_ERROR_LINE = re.compile(
    r"(\berror\b\s*:|\bError\b:|fatal error|undefined reference|cannot find -l|ld returned \d+ exit status"
    r"|\bptxas\b.*(error|fatal)|No such file or directory|error: command .* failed)",
)
_TAIL_LINES = 4000


class BuildFailed(WhError):
    code = "build-failed"

    def __init__(self, message: str, *, log_path: Path, error_lines: Sequence[str], hint: str | None = None):
        detail = "\n".join(error_lines) + f"\nfull log: {log_path}"
        super().__init__(message, hint=hint or f"read the full log: less {log_path}", detail=detail)
        self.log_path = log_path
        self.error_lines = tuple(error_lines)


class BuildDepsMissing(UsageError):
    code = "build-deps-missing"


@dataclass(frozen=True)
class BuildResult:
    wheel: Path
    log_path: Path
    seconds: float
    backend: str


def extract_compiler_errors(lines: Sequence[str], context: int = 2, limit: int = 40) -> list[str]:
    """The last error lines a compiler/linker printed, each with a little context.

    Falls back to the tail of the output (a Python traceback) when nothing looks
    like a compiler error.
    """
    hits = [i for i, line in enumerate(lines) if _ERROR_LINE.search(line)]
    if not hits:
        return [line for line in lines[-15:]]
    keep: list[int] = []
    for i in hits:
        for j in range(max(0, i - context), min(len(lines), i + context + 1)):
            if j not in keep:
                keep.append(j)
    keep.sort()
    out: list[str] = []
    prev = None
    for j in keep[-limit:]:
        if prev is not None and j != prev + 1:
            out.append("...")
        out.append(lines[j])
        prev = j
    return out


class StreamingRunner:
    """A pyproject_hooks subprocess runner that tees every output line to a sink and a log."""

    def __init__(self, env: Mapping[str, str], log, sink: Sink | None):
        self.env = dict(env)
        self.log = log
        self.sink = sink
        self.tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)

    def __call__(self, cmd: Sequence[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None) -> None:
        env = {**self.env, **(extra_environ or {}), "PYTHONUNBUFFERED": "1"}
        self.log.write(f"$ {' '.join(cmd)}  (cwd {cwd})\n")
        with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                self.tail.append(line)
                self.log.write(line + "\n")
                self.log.flush()
                if self.sink:
                    self.sink(line)
            rc = proc.wait()
        if rc != 0:
            raise subprocess.CalledProcessError(rc, list(cmd))


def _builder(source_dir: Path, python: str, runner: StreamingRunner):
    """``build.ProjectBuilder`` for ``source_dir``, its hooks run by ``python`` through ``runner``."""
    from build import BuildException, ProjectBuilder

    try:
        return ProjectBuilder(source_dir, python_executable=python, runner=runner)
    except BuildException as exc:
        if not (source_dir / "pyproject.toml").exists() and not (source_dir / "setup.py").exists():
            raise UsageError(f"{source_dir} has neither pyproject.toml nor setup.py",
                             hint="set [engine.build] subdirectory to the folder that has them") from exc
        raise UsageError(f"{source_dir}: {exc}", hint="fix the project's pyproject.toml [build-system]") from exc


def _backend_name(source_dir: Path) -> str:
    """The backend's name, for messages and provenance (ProjectBuilder has validated the table)."""
    try:
        data = tomllib.loads((source_dir / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return _DEFAULT_BACKEND
    return (data.get("build-system") or {}).get("build-backend", _DEFAULT_BACKEND)


def _installed(python: str, env: Mapping[str, str]) -> dict[str, str]:
    """Versions ``python`` imports (first on its sys.path wins: a parent venv's setuptools before the base's)."""
    return {k: d.version for k, d in installed_distributions(python, env=env).items()}


def missing_build_requirements(requires: Iterable[str], installed: Mapping[str, str],
                               target: TargetProfile | None = None) -> list[str]:
    """Requirements the interpreter does not satisfy (markers judged for ``target``; excluded ones skipped)."""
    missing = []
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            missing.append(text)
            continue
        if target is not None and not target.evaluate(req.marker):
            continue
        have = installed.get(canonicalize_name(req.name))
        if have is None or (req.specifier and not req.specifier.contains(have, prereleases=True)):
            missing.append(f"{text} (installed: {have or 'none'})")
    return missing


def _isolated_python(python: str, requires: list[str], env: Mapping[str, str], runner: StreamingRunner, where: Path) -> str:
    """A throwaway venv from ``python`` with the build requirements pip-installed (needs an index)."""
    venv = where / "isolated-env"
    runner([python, "-m", "venv", str(venv)])
    vpy = str(venv / "bin" / "python")
    runner([vpy, "-m", "pip", "install", "--disable-pip-version-check", *requires])
    return vpy


def _check_build_deps(builder, py: str, env: Mapping[str, str], config_settings, target: TargetProfile | None) -> None:
    """Refuse before building when ``py`` lacks what the build needs (offline there is no pip to fetch it)."""
    installed = _installed(py, env)
    missing = missing_build_requirements(sorted(builder.build_system_requires), installed, target)
    if not missing:  # the backend's dynamic ones need the backend itself, so only now
        missing = missing_build_requirements(sorted(builder.get_requires_for_build("wheel", config_settings)),
                                             installed, target)
    if missing:
        raise BuildDepsMissing(
            f"{py} lacks build requirements: {'; '.join(missing)}",
            hint=f"install them into that interpreter (`{py} -m pip install ...` from a wheelhouse), then re-run",
        )


def build_wheel(
    source_dir: Path,
    out_dir: Path,
    *,
    python: str,
    env: Mapping[str, str],
    log_path: Path,
    sink: Sink | None = None,
    isolation: bool = False,
    config_settings: Mapping[str, str] | None = None,
    label: str | None = None,
    target: TargetProfile | None = None,
) -> BuildResult:
    """Build ``source_dir`` into one wheel in ``out_dir`` with the backend run by ``python``.

    The frontend is ``build.ProjectBuilder``; its hooks run through a ``StreamingRunner``, so
    every line the backend prints goes to ``sink`` and ``log_path`` as it comes, and a failed
    hook raises BuildFailed with the compiler's own lines. ``isolation=False`` (the default,
    and the only choice offline) uses the build requirements already installed in ``python``;
    missing ones are a BuildDepsMissing naming them (markers judged for ``target``, the
    interpreter's profile, so no host fact leaks in).
    """
    from build import BuildBackendException
    from pyproject_hooks import BackendUnavailable

    source_dir = Path(source_dir).resolve()
    _builder(source_dir, python, lambda *a, **k: None)  # a bad project is refused before anything is created
    backend = _backend_name(source_dir)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log, tempfile.TemporaryDirectory(prefix="wh-build-") as td:
        runner = StreamingRunner(env, log, sink)
        py = python
        if isolation:
            builder = _builder(source_dir, python, runner)
            try:
                py = _isolated_python(python, sorted(builder.build_system_requires), env, runner, Path(td))
            except subprocess.CalledProcessError as exc:
                raise BuildFailed(
                    "could not install the build requirements into an isolated env",
                    log_path=log_path,
                    error_lines=extract_compiler_errors(list(runner.tail)),
                    hint="offline there is no index: set no-build-isolation = true and install the build deps into --python",
                ) from exc
        builder = _builder(source_dir, py, runner)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if not isolation:
                    _check_build_deps(builder, py, env, config_settings, target)
                built = Path(builder.build("wheel", Path(td) / "dist", config_settings))
            for w in caught:
                runner.log.write(f"warning: {w.message}\n")
        except BuildBackendException as exc:
            if isinstance(exc.exception, BackendUnavailable):
                lines = (exc.exception.traceback or "").strip().splitlines()
                why = getattr(exc.exception, "message", None) or (lines[-1] if lines else "")
                raise BuildDepsMissing(
                    f"{py} cannot import the build backend {backend}: {why}",
                    hint=f"install it into that interpreter, e.g. `{py} -m pip install setuptools`",
                ) from exc
            rc = getattr(exc.exception, "returncode", "?")
            raise BuildFailed(
                f"building {label or source_dir.name} failed (the backend {backend} exited {rc})",
                log_path=log_path,
                error_lines=extract_compiler_errors(list(runner.tail)) or [str(exc)],
            ) from exc
        final = out_dir / built.name
        tmp = out_dir / f".{built.name}.tmp"
        shutil.copyfile(built, tmp)
        os.replace(tmp, final)
    return BuildResult(wheel=final, log_path=log_path, seconds=time.monotonic() - started, backend=backend)
