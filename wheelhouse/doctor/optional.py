"""Which failures of a lazily loaded module are an optional dependency, as data (``doctor/optional.toml``).

The native check fails every module the stack loads. A module nothing in the stack reaches is only a warning
when its failure is one that the data names as optional, with the reason shown as evidence:

- ``[[optional]]``: a distribution's module (globs over dotted names) whose failure names a missing library
  (``libraries``, globs over the names in "cannot open shared object file") or reads like ``errors`` (globs
  over ``"ImportError: initialization failed"``). At least one of the two: the data says which failure.
- ``[[variant]]``: a module under a folder built for another CUDA major (``cu12/`` where the stack's CUDA is
  13) beside the folder for the stack's (``cu13/``): the package loads the folder for the CUDA it finds.
- ``[[cpu-variant]]``: the CPU feature names a module's name may carry (``_swigfaiss_avx512``): a module that
  dies of SIGILL, named for a feature this CPU's flags lack, is a build the package picks only where the CPU has it,
  when the package ships another build it can pick instead (``_swigfaiss``, ``_swigfaiss_avx2``).

``doctor/sharedlibs.toml``'s ``[[optional]]`` entries (a RECORD path glob and the missing libraries it may
lack) say the same about a missing library, and count here too (:meth:`OptionalData.with_objects`): one
fact, written once.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from packaging.utils import canonicalize_name

from wheelhouse.datafile import check_keys, get_value, load_toml
from wheelhouse.errors import WhError
from wheelhouse.resources import doctor_dir

__all__ = ["OptionalModule", "CudaVariant", "CpuVariant", "OptionalData", "OptionalDataError", "load_optional_modules",
           "missing_libraries"]


class OptionalDataError(WhError):
    code = "optional-data"


@dataclass(frozen=True)
class OptionalModule:
    """One ``[[optional]]`` entry: a module whose named kind of failure its distribution does without."""

    distribution: str  # glob over canonical names ("cupy-cuda*")
    modules: tuple[str, ...] = ()  # globs over dotted module names
    objects: tuple[str, ...] = ()  # or globs over the module file's RECORD path (sharedlibs.toml's entries)
    libraries: tuple[str, ...] = ()  # the failure names a missing library matching one of these
    errors: tuple[str, ...] = ()  # or its "ErrorType: message" matches one of these
    reason: str = ""
    source: str = "doctor/optional.toml"

    def covers(self, dist_key: str, module: str, relpath: str | None, failure: str) -> bool:
        if not fnmatch.fnmatchcase(dist_key, canonicalize_name(self.distribution)):
            return False
        if not (any(fnmatch.fnmatchcase(module, g) for g in self.modules)
                or (relpath is not None and any(fnmatch.fnmatchcase(relpath, g) for g in self.objects))):
            return False
        libs = missing_libraries(failure)
        return (any(fnmatch.fnmatchcase(lib, g) for lib in libs for g in self.libraries)
                or any(fnmatch.fnmatchcase(failure, g) for g in self.errors))


@dataclass(frozen=True)
class CudaVariant:
    """One ``[[variant]]`` entry: folder names that carry a build for one CUDA major (``cu{major}``)."""

    folders: tuple[str, ...]
    reason: str

    def major_of(self, relpath: str) -> tuple[str, int] | None:
        """(folder, CUDA major) of the first folder of ``relpath`` that is such a variant folder."""
        for part in relpath.split("/")[:-1]:
            for pattern in self.folders:
                m = re.fullmatch(re.escape(pattern).replace(re.escape("{major}"), r"(\d{2})"), part)
                if m:
                    return part, int(m.group(1))
        return None


@dataclass(frozen=True)
class CpuVariant:
    """One ``[[cpu-variant]]`` entry: CPU feature names (globs over /proc/cpuinfo flags) a build is named for."""

    features: tuple[str, ...]
    reason: str

    def feature_named(self, module: str, flags: frozenset[str]) -> tuple[str, bool] | None:
        """The feature ``module``'s last name part names (``_swigfaiss_avx512``: ``avx512``) and whether ``flags``
        has it (a flag that starts with it, ``_`` aside: ``sse42`` is /proc/cpuinfo's ``sse4_2``), or None."""
        plain = [f.replace("_", "") for f in flags]
        for part in module.rsplit(".", 1)[-1].lower().split("_"):
            if part and any(fnmatch.fnmatchcase(part, g) for g in self.features):
                return part, any(f.startswith(part) for f in plain)
        return None


@dataclass(frozen=True)
class OptionalData:
    modules: tuple[OptionalModule, ...] = ()
    variants: tuple[CudaVariant, ...] = ()
    cpu_variants: tuple[CpuVariant, ...] = ()

    def with_objects(self, entries: Iterable[Any], source: str) -> "OptionalData":
        """These rules plus entries that name a RECORD path glob (``objects``) and missing ``libraries``."""
        extra = tuple(OptionalModule(e.distribution, objects=(e.objects,), libraries=tuple(e.libraries),
                                     reason=e.reason, source=source) for e in entries)
        return OptionalData(self.modules + extra, self.variants, self.cpu_variants)

    def cpu_feature_named(self, module: str, flags: frozenset[str]) -> tuple[CpuVariant, str, bool] | None:
        """The entry, the CPU feature ``module`` is named for, and whether ``flags`` (this CPU's) have it; or None."""
        for v in self.cpu_variants:
            named = v.feature_named(module, flags)
            if named:
                return v, *named
        return None

    def cpu_build_stem(self, module: str) -> str:
        """What ``module``'s builds share: its last name part up to its first CPU feature word, less words that say
        "no particular feature" (``_dot_avx512``, ``_dot_avx2``, ``_dot``, ``_dot_generic``: ``_dot``)."""
        parts = module.rsplit(".", 1)[-1].lower().split("_")
        cut = next((i for i, p in enumerate(parts) if p and any(fnmatch.fnmatchcase(p, g) for v in self.cpu_variants
                                                                for g in v.features)), len(parts))
        parts = parts[:cut]
        while len(parts) > 1 and parts[-1] in _GENERIC_BUILD:
            parts.pop()
        return "_".join(parts)

    def cpu_fallback(self, module: str, siblings: Iterable[str], flags: frozenset[str]) -> str | None:
        """A sibling build of ``module`` its package can pick instead on a CPU with ``flags`` (one named for no
        feature, or for one these flags have), or None: without one, a build for features this CPU lacks is the only
        one the package has, and its code imports it here (a SIGILL, not a variant it passes over)."""
        stem = self.cpu_build_stem(module)
        for other in siblings:
            if other == module or self.cpu_build_stem(other) != stem:
                continue
            named = self.cpu_feature_named(other, flags)
            if named is None or named[2]:
                return other
        return None

    def rule_for(self, dist_key: str, module: str, relpath: str | None, failure: str) -> OptionalModule | None:
        return next((r for r in self.modules if r.covers(dist_key, module, relpath, failure)), None)

    def variant_of(self, relpath: str) -> tuple[CudaVariant, str, int] | None:
        for v in self.variants:
            hit = v.major_of(relpath)
            if hit:
                return v, hit[0], hit[1]
        return None


# Name parts of a build that needs no particular CPU feature (faiss's _swigfaiss, a `_generic` beside `_avx512`).
_GENERIC_BUILD = frozenset({"generic", "default", "base", "baseline", "fallback", "ref", "reference", "portable",
                            "scalar", "plain", "cpu", "py", "pure", "noarch"})

_MISSING_LIB = re.compile(r"([\w.+-]+\.so(?:\.[\w]+)*): cannot open shared object file")


def missing_libraries(failure: str) -> list[str]:
    """The library names a loader error says it could not open (``libtbb.so.12``)."""
    return [m.rsplit("/", 1)[-1] for m in _MISSING_LIB.findall(failure)]


def _strs(t: dict, key: str, where: str) -> tuple[str, ...]:
    value = get_value(t, key, (list, str), where, error=OptionalDataError, default=())
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def load_optional_modules(path: Path | None = None) -> OptionalData:
    """The entries of ``doctor/optional.toml`` (or ``path``)."""
    path = path or doctor_dir() / "optional.toml"
    data = load_toml(path, what="optional-modules data file", error=OptionalDataError)
    check_keys(data, ["optional", "variant", "cpu-variant"], str(path), error=OptionalDataError)
    modules, variants = [], []
    for i, t in enumerate(data.get("optional") or ()):
        where = f"{path} [[optional]] #{i + 1}"
        check_keys(t, ["distribution", "modules", "libraries", "errors", "reason"], where, error=OptionalDataError)
        rule = OptionalModule(str(get_value(t, "distribution", (str,), where, error=OptionalDataError)),
                              modules=_strs(t, "modules", where), libraries=_strs(t, "libraries", where),
                              errors=_strs(t, "errors", where),
                              reason=str(get_value(t, "reason", (str,), where, error=OptionalDataError)))
        if not rule.modules or not (rule.libraries or rule.errors):
            raise OptionalDataError(f"{where}: needs modules and libraries or errors (which failure is optional)",
                                    hint="name the modules and the missing libraries or error messages")
        modules.append(rule)
    for i, t in enumerate(data.get("variant") or ()):
        where = f"{path} [[variant]] #{i + 1}"
        check_keys(t, ["folders", "reason"], where, error=OptionalDataError)
        variants.append(CudaVariant(_strs(t, "folders", where),
                                    str(get_value(t, "reason", (str,), where, error=OptionalDataError))))
    cpu_variants = []
    for i, t in enumerate(data.get("cpu-variant") or ()):
        where = f"{path} [[cpu-variant]] #{i + 1}"
        check_keys(t, ["features", "reason"], where, error=OptionalDataError)
        cpu_variants.append(CpuVariant(_strs(t, "features", where),
                                       str(get_value(t, "reason", (str,), where, error=OptionalDataError))))
    return OptionalData(tuple(modules), tuple(variants), tuple(cpu_variants))
