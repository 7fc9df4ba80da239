"""What every doctor check is given: the installed distributions and the shared facts.

``DoctorContext`` carries the facts every check shares (gathered once, by
probes in the target interpreter) and the services they need (probe runner
settings, the reporter). Checks never raise for a finding: they return
verdicts; an unexpected exception in one check becomes an ``error`` verdict.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.utils import canonicalize_name

from wheelhouse.elf import is_shared_object
from wheelhouse.install.digests import FileDigests
from wheelhouse.doctor.verdicts import VerdictCache
from wheelhouse.install.state import read_install_state
from wheelhouse.target.gpu import GpuFacts
from wheelhouse.manifest import StackManifest
from wheelhouse.progress import NullReporter, Reporter
from wheelhouse.recordfile import InstalledRecord, read_installed_record
from wheelhouse.target import TargetProfile

__all__ = ["DoctorContext", "Distribution", "selected", "installed_by_wh", "reinstall_command"]


@dataclass(frozen=True)
class Distribution:
    """An installed distribution as the facts probe saw it."""

    name: str
    version: str
    location: str | None
    dist_info: str | None
    top_level: tuple[str, ...]
    extension_modules: int
    extension_top_level: tuple[str, ...]
    extension_sample: tuple[str, ...] = ()
    extensions: tuple[tuple[str, str], ...] = ()  # (path relative to location, dotted module name)
    requires: tuple[str, ...] = ()  # Requires-Dist, as written
    library_candidates: tuple[tuple[str, str], ...] = ()  # (path, dotted name) of each lib*.so: a module if PyInit_
    foreign_extensions: tuple[tuple[str, str], ...] = ()  # (path, its tag) of extension files for another target

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)

    @functools.cached_property
    def record(self) -> InstalledRecord:
        """Its RECORD, read and parsed once per run (every check, the inventory and the report share it)."""
        return read_installed_record(self.dist_info)

    @functools.cached_property
    def shared_object_paths(self) -> tuple[str, ...]:
        """The RECORD paths of the shared objects it ships (``.so``, ``.so.N``), in RECORD's order, once each."""
        return tuple(dict.fromkeys(rel for rel, _, _ in self.record.rows if ".so" in rel and is_shared_object(rel)))

    @property
    def import_names(self) -> tuple[str, ...]:
        """Every top-level name it provides (a pure-Python one beside its extensions too: issue 10.2)."""
        names = dict.fromkeys([*self.top_level, *self.extension_top_level])
        return tuple(n for n in names if n and n.isidentifier())

    @property
    def extension_module_names(self) -> tuple[str, ...]:
        """Every extension module it ships, by the dotted name it is imported by (``pkg.sub._ext``)."""
        return tuple(dict.fromkeys(m for _, m in self.extensions if m and all(p.isidentifier() for p in m.split("."))))


@dataclass(frozen=True)
class DoctorContext:
    python: str
    facts: Mapping[str, Any]  # the facts probe's record (after overrides)
    gpu: GpuFacts
    distributions: Mapping[str, Distribution]  # canonical name -> distribution
    site_dirs: tuple[Path, ...]
    environ: Mapping[str, str]  # the environment probes run with
    engine_env: Mapping[str, str]  # the engine's: environ, `wh env`'s PATH/CUDA_HOME/LD_LIBRARY_PATH over it, [serve] env over that
    engine_flags: tuple[str, ...] = ()  # the interpreter options its [serve] command gives (-OO, -I): the imports' too
    manifest: StackManifest | None = None
    target: TargetProfile | None = None
    target_source: str | None = None
    jobs: int = 1
    timeout: float = 60.0
    patterns: tuple[str, ...] = ()
    model: Path | None = None
    tp: int | None = None
    reporter: Reporter = field(default_factory=NullReporter)
    extra: Mapping[str, Any] = field(default_factory=dict)  # e.g. extra JIT probes
    digests: FileDigests = field(default_factory=FileDigests)  # installed files' sha256, cached by identity
    verdicts: VerdictCache | None = None  # passing probe verdicts, reused while their evidence is unchanged

    def dist(self, name: str) -> Distribution | None:
        return self.distributions.get(canonicalize_name(name))

    def wants(self, check_id: str) -> bool:
        return selected(check_id, self.patterns)


def selected(check_id: str, patterns: Sequence[str]) -> bool:
    """Prefix match: ``native`` selects ``native:numpy``; no patterns selects everything."""
    if not patterns:
        return True
    return any(check_id == p or check_id.startswith(p) or p.startswith(check_id + ":") for p in patterns)


def installed_by_wh(ctx: DoctorContext) -> frozenset[str]:
    """Canonical names wh's install state records in any site folder the interpreter imports from.

    The stack wh vouches for. Empty when wh installed nothing here: then every distribution counts
    as vouched for (a plain environment is judged whole).
    """
    sites = dict.fromkeys([*(p for p in (ctx.facts.get("platlib"), ctx.facts.get("purelib")) if p),
                           *map(str, ctx.site_dirs)])
    return frozenset(canonicalize_name(k) for site in sites for k in read_install_state(site).get("packages", {}))


def reinstall_command(ctx: DoctorContext, *names: str) -> str:
    """The command that installs ``names`` again from the wheelhouse (the repair of a damaged install).

    A name wh installed here is reinstalled from the wheelhouse its record names; another one needs it named.
    """
    keys = [canonicalize_name(n) for n in names]
    recorded = installed_by_wh(ctx)
    house = "" if keys and all(k in recorded for k in keys) else "WHEELHOUSE "
    return f"wh install {house}--reinstall {','.join(keys)} --python {ctx.python}"


