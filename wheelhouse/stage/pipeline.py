"""Stage: resolve a stack for the TARGET, fetch it verified, and write a self-bootstrapping wheelhouse.

``stage(inputs)`` is the whole of ``wh stage`` without the command line; ``inputs`` is one
``StageInputs`` value, made by ``merge_inputs(manifest, flags, out)`` (the one rule for how the
manifest and the command line combine). It resolves (wheelhouse.resolve) against the target
profile, never the host; fetches every pinned wheel through the verified, cached fetch; and
writes the layout of wheelhouse.lock through its one writer.

Nothing is half-done and nothing of the user's is lost: the run holds the output folder's
lock (a second run waits), the new wheelhouse is assembled in a sibling folder and swapped in
at the end, so a failure leaves the previous one exactly as it was; what wh did not write in
``-o`` (NOTES.md, logs/, dataset-metadata.json) is kept. Restaging is incremental: wheels
already in the old wheelhouse are verified and reused; an engine ``wh build`` added is kept
(its wheel, wh.json["engine"], its log and exported files, and its requirements resolved
with the stack), unless the manifest's engine recipe now names another commit (said so).

A delta (``wheelhouse.stage.delta``): when the target profile lists what its image provides, the
resolver treats those distributions as installed; the kept ones are not fetched nor locked, and
wh.json records them in ``assumed_present``. ``inputs.full`` stages the whole closure as before.
bootstrap/ is always complete: wh installs into a venv of its own on the box, which sees none
of the image's packages.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from packaging.utils import canonicalize_name

from wheelhouse import __version__
from wheelhouse.digest import sha256_of
from wheelhouse.errors import UsageError, WhError
from wheelhouse.cachedir import default_cache_dir
from wheelhouse.progress import NullReporter, Reporter
from .inputs import StageInputs
from .delta import ImageDelta, delta_of, offered
from .staged import StagedFile

# Imported where used, not here: the resolver, the index client, the downloads, bootstrap/ and the
# wheelhouse writer. A dry run never loads the last three, and a stage answered from its stored
# resolution (``stored``) loads little more than this module (start-up is most of such a run).
if TYPE_CHECKING:
    from wheelhouse.index.http import HttpClient
    from wheelhouse.manifest import Exclusion
    from wheelhouse.manifest.requirements_file import RequirementLine
    from wheelhouse.target import TargetProfile
    from wheelhouse.resolve.overrides import Rewritten

    from .previous import Previous
    from .release import ReleaseArtifact

__all__ = ["StageResult", "stage"]


@dataclass(frozen=True)
class StageResult:
    out: Path
    target: TargetProfile
    files: tuple[StagedFile, ...]
    dry_run: bool
    bootstrap: tuple[StagedFile, ...] = ()
    bootstrap_command: str | None = None
    removed: tuple[str, ...] = ()  # wheels of the previous wheelhouse that are no longer pinned
    reused: int = 0  # wheels taken from the cache or the previous wheelhouse, not downloaded
    indexes: tuple[str, ...] = ()
    engine: str | None = None  # the built engine wheel kept from the previous wheelhouse
    notes: tuple[str, ...] = ()  # what the run recovered, kept or left out, in a sentence each
    image: ImageDelta | None = None  # what the target's image provides and this stage assumed of it
    rewritten: tuple[Rewritten, ...] = ()  # requirements an override replaced or an exclusion removed
    excludes: tuple[Exclusion, ...] = ()  # the exclusions asked for (with their reasons)
    overrides: tuple[str, ...] = ()  # the overrides asked for
    keep_image: tuple[tuple[str, str], ...] = ()  # (name, the image's version) held as a hard constraint
    # The files this answer was read from, when it came from a stored resolution (``stored.Stored.evidence``)
    evidence: tuple[list, ...] | None = None

    def rewrite_lines(self) -> list[str]:
        """A sentence for each override and exclusion that changed what a requirement asked for."""
        reasons = {canonicalize_name(e.distribution): e.reason for e in self.excludes}
        out = []
        for r in self.rewritten:
            who = ", ".join(dict.fromkeys(p if p != "(requested)" else "the stack" for p, _ in r.requested))
            if r.excluded:
                why = reasons.get(r.name)
                out.append(f"excluded {r.name} (required by {who}){': ' + why if why else ''}")
            else:
                asked = ", ".join(dict.fromkeys(t for _, t in r.requested))
                out.append(f"override {' and '.join(r.by)} replaced {asked} (required by {who})")
        return out

    def parity_lines(self) -> list[str]:
        """One sentence for each rule of wh's that uv does not share, naming the pins it decided (their notes)."""
        by_code: dict[str, list[str]] = {}
        for f in (*self.files, *self.bootstrap):
            for n in f.notes:
                by_code.setdefault(n.code, []).append(f"{f.name}=={f.version}")
        if not by_code:
            return []
        from wheelhouse.resolve.parity import SUMMARIES
        return [f"{', '.join(dict.fromkeys(pins))}: chosen where wh differs from uv on purpose ({code}): "
                f"{SUMMARIES.get(code, code)} (each pin's note is in --json)" for code, pins in by_code.items()]

    @property
    def total_size(self) -> int:
        return sum(f.size or 0 for f in self.files)

    @property
    def closure_count(self) -> int:
        """Staged wheels plus the image's distributions kept in their place."""
        return len(self.files) + (len(self.image.assumed) if self.image else 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "out": str(self.out),
            "target": self.target.describe(),
            "indexes": list(self.indexes),
            "count": len(self.files),
            "total_size": self.total_size,
            "packages": [f.to_json() for f in self.files],
            "bootstrap": {
                "command": self.bootstrap_command,
                "packages": [f.to_json() for f in self.bootstrap],
            } if self.bootstrap_command else None,
            "removed": list(self.removed),
            "reused": self.reused,
            "engine": self.engine,
            "notes": list(self.notes),
            "closure_count": self.closure_count,
            # The image's kept distributions, marked as such (nothing downloaded, not in pylock.toml).
            "provided": [{"name": n, "version": v, "provided": True} for n, v in (self.image.assumed if self.image else ())],
            "changes": [c.to_json() for c in (self.image.changes if self.image else ())],
            "image": self.image.to_json() if self.image else None,
            "overrides": list(self.overrides),
            "excludes": [dataclasses.asdict(e) for e in self.excludes],
            "rewritten": [r.to_json() for r in self.rewritten],
            # --keep-image / keep-image: each a hard constraint name==<the image's version>
            "keep_image": [{"name": n, "version": v, "constraint": f"{n}=={v}"} for n, v in self.keep_image],
        }


class _Background:
    """One call run on a thread of its own while the stage goes on (wh's own wheel built, bootstrap/ resolved
    while the stack downloads); ``result()`` waits for it and re-raises what it raised.

    The thread is a daemon, but nothing walks away from it: ``wait()`` is called on every way out of the
    stage, so a build's temp folder or a cache write is never cut off by the interpreter's exit.
    """

    def __init__(self, fn: Callable[[], Any], name: str):
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:  # handed to whoever asks for the result
            self._error = exc

    def wait(self) -> None:
        while self._thread.is_alive():
            self._thread.join(0.2)  # in short steps: Ctrl-C still reaches the main thread

    def result(self) -> Any:
        self.wait()
        if self._error is not None:
            raise self._error
        return self._value


@dataclass(frozen=True)
class _Plan:
    """The resolved stack, before anything is downloaded; bootstrap/ still resolving (``bootstrap``)."""

    requirements: tuple[str, ...]
    constraints: tuple[str, ...]
    find_links: tuple[str, ...]
    release_prov: tuple[dict, ...]
    indexes: tuple[str, ...]
    files: tuple[StagedFile, ...]
    bootstrap: _Background  # -> (bootstrap files, wh's own wheel or None)
    hash_rules: tuple[RequirementLine, ...]
    image: ImageDelta | None = None
    rewritten: tuple[Rewritten, ...] = ()  # what the overrides replaced and the exclusions removed
    evidence: tuple[list, ...] | None = None  # from a stored resolution: the files it was read from


# --- requirements --------------------------------------------------------------------------------

# A bare PEP 508 name, or one pinned ``==`` to a plain release (``vllm==0.33.0``): valid whatever else, so
# accepted without packaging's parser, which a stage answered from its stored resolution would load for nothing.
_PLAIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:==[0-9]+(?:\.[0-9]+)*)?")


def _parse_requirements(reqs: Sequence[str], what: str) -> list[str]:
    out = []
    for r in reqs:
        r = r.strip()
        if not r:
            continue
        if r.endswith(".whl") or "/" in r.split(";")[0] and "@" not in r:
            out.append(r)  # a wheel file or URL: the resolver's direct reference
            continue
        if _PLAIN.fullmatch(r):
            out.append(r)
            continue
        from packaging.requirements import InvalidRequirement, Requirement

        try:
            Requirement(r)
        except InvalidRequirement as exc:
            # packaging's message is a line and a caret under the bad spot: the line says it, the caret follows.
            first, _, rest = str(exc).partition("\n")
            raise UsageError(f"{what} {r!r} is not a valid requirement: {first}", detail=rest or None,
                             hint="write it like `name==1.0` or `name>=2; python_version < \"3.12\"`") from exc
        out.append(r)
    return out


# --- the main entry point ------------------------------------------------------------------------

def stage(inputs: StageInputs, *, reporter: Reporter | None = None, client: HttpClient | None = None) -> StageResult:
    """Resolve ``inputs`` for its target and write the wheelhouse at ``inputs.out``.

    With ``dry_run`` nothing is downloaded but index pages and metadata, and nothing is
    written; the result lists the stack's pins (bootstrap/ is neither built nor resolved). ``hashed_requirements``: lines whose ``--hash``
    options a pinned file of their project must match (those whose marker holds for the
    target); checked after resolution and again once downloaded, before anything is written.
    """
    from wheelhouse.index.http import HttpClient

    reporter = reporter or NullReporter()
    cache = Path(inputs.cache_dir) if inputs.cache_dir else default_cache_dir()
    client = client or HttpClient(cache_dir=cache, offline=inputs.offline, refresh=inputs.refresh)
    _check_inputs(inputs)
    if inputs.dry_run:  # the stack's pins only: bootstrap/ (wh's own dependencies) is resolved when writing
        return _run(dataclasses.replace(inputs, bootstrap=False), None, cache, client, reporter, ())
    from wheelhouse.lock.output import hold_output, real_output

    from .writer import check_out

    out = real_output(inputs.out)  # -o a symlink: write into its target, keep the link
    compiler = None
    if inputs.bytecode:  # before anything is downloaded: no Python of the target's version is a usage error
        from .bytecode import find_compiler
        compiler = find_compiler(inputs.target.python_version, inputs.target.implementation, inputs.bytecode_python)
    writes = _top_level_writes(inputs)
    check_out(out, writes)
    _check_cache(cache)
    with hold_output(out, timeout=inputs.lock_timeout, on_wait=reporter.note) as recovered:
        for note in recovered:
            reporter.note(note)
        check_out(out, writes)  # again: what the recovery put back, or the run we waited for, wrote
        return _run(inputs, out, cache, client, reporter, tuple(recovered), compiler)


def _check_inputs(inputs: StageInputs) -> None:
    """What can be refused before any network or disk work."""
    manifest = inputs.manifest
    for spec in (manifest.patches if manifest else ()):  # found now, not after the downloads
        if not Path(spec).is_file():
            raise UsageError(f"patch spec {spec} does not exist",
                             hint="fix [[patch]] spec in the stack manifest (it is looked up beside the manifest, "
                                  "then under engine_src/)")
    _parse_requirements(inputs.requirements, "requirement")
    _parse_requirements(inputs.constraints, "constraint")
    _parse_requirements(inputs.overrides, "override")
    if not inputs.requirements and not (manifest and manifest.release_manifests) and inputs.lock_input is None \
            and not inputs.empty_request:
        raise UsageError("nothing to stage: no requirements given",
                         hint="wh stage manifests/demo.toml -o DIR, or wh stage 'name==1.0' -o DIR")


def _top_level_writes(inputs: StageInputs) -> list[str]:
    """The names at the top of -o that this run writes (a user's file there is refused before work)."""
    m = inputs.manifest
    from .bootstrap import BOOTSTRAP_DIR
    from .writer import WHEELS

    names = ["wh.json", "pylock.toml", WHEELS, "simple", "capture_target.py"]
    names += [BOOTSTRAP_DIR] if inputs.bootstrap else []
    names += ["manifest.toml"] if m and m.path else []
    return names


def _check_cache(cache: Path) -> None:
    try:  # before resolving: an unusable cache must not fail the run after the downloads began
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cache folder {cache}: cannot create it ({exc.strerror})",
                         hint="pass --cache-dir DIR (or set WH_CACHE_DIR) to a folder you can write to") from exc


def _run(inputs: StageInputs, out: Path | None, cache: Path, client, reporter: Reporter,
         recovered: tuple[str, ...], compiler=None) -> StageResult:
    from .previous import Previous, read_previous

    previous = read_previous(out, inputs.manifest, inputs.target, reporter) if out is not None else Previous({})
    own: list[_Background] = []  # wh's own wheel, then bootstrap/'s resolution: waited for on every way out
    try:
        with tempfile.TemporaryDirectory(prefix="wh-stage-") as scratch:
            plan = _resolve_stack(inputs, previous, Path(scratch), cache, client, reporter, own)
            if out is None:
                boot_files, wh_wheel = plan.bootstrap.result()
                return StageResult(inputs.out, inputs.target, plan.files, True, bootstrap=boot_files,
                                   bootstrap_command=_command(inputs, wh_wheel, boot_files),
                                   indexes=plan.indexes, image=plan.image, rewritten=plan.rewritten,
                                   excludes=inputs.excludes, overrides=inputs.overrides, keep_image=inputs.keep_image,
                                   evidence=plan.evidence)
            return _write(inputs, out, plan, previous, cache, client, reporter, recovered, compiler)
    finally:
        for job in own:
            job.wait()


# --- resolution ------------------------------------------------------------------------------------

def _resolve_stack(inputs: StageInputs, previous: Previous, scratch: Path, cache: Path, client,
                   reporter: Reporter, own: list[_Background]) -> _Plan:
    """Resolve the stack; bootstrap/ (wh's own wheel built, its dependencies resolved) goes on in the
    background, so that the stack's downloads do not wait for it. ``own`` collects those jobs."""
    from wheelhouse.index import PackageSource
    from wheelhouse.index.metadata import MetadataReader

    manifest, target = inputs.manifest, inputs.target
    if inputs.bootstrap:  # a PEP 517 build from a checkout (~1.5 s): beside the resolution, not after it
        from .bootstrap import self_wheel

        own.append(_Background(lambda: self_wheel(cache), "wh-self-wheel"))
    reqs = _parse_requirements(inputs.requirements, "requirement")
    cons = _parse_requirements(inputs.constraints, "constraint")
    links = list(inputs.find_links)
    artifacts, release_prov = _release_artifacts(manifest, scratch, client, reporter, links, reqs)
    source = PackageSource(list(inputs.index_urls), links, client=client)
    reader = MetadataReader(client, cache_dir=cache)
    if inputs.lock_input is not None:  # a PEP 751 lock, staged as it is: nothing resolved
        from .locked import locked_files, read_lock_input

        files = locked_files(read_lock_input(inputs.lock_input), inputs.lock_input, target, inputs.extras,
                             inputs.groups or None)
        reporter.note(f"{len(files)} of the lock's packages for {target.describe()} (staged as locked)")
        reqs = [f"{f.name}=={f.version}" for f in files]  # wh.json's requirements: what the lock pinned
        plan = (files, (), None, (), None)
    else:
        plan = _resolved(inputs, previous, artifacts, reqs, cons, source, reader, reporter, cache)
    files, hash_rules, delta, rewritten, evidence = plan
    own_wheel = own[0] if own else None
    own.append(_Background(lambda: _resolve_bootstrap(inputs, source, reader, own_wheel, reporter, len(files)),
                           "wh-bootstrap"))
    return _Plan(tuple(reqs), tuple(cons), tuple(links), tuple(release_prov), tuple(source.locations()),
                 tuple(sorted(files, key=lambda f: f.name)), own[-1], hash_rules, delta, rewritten, evidence)


def _resolved(inputs: StageInputs, previous: Previous, artifacts, reqs: list[str], cons: list[str], source, reader,
              reporter: Reporter, cache: Path):
    """The stack resolved for the target: (files to stage, --hash rules, image delta, rewritten requirements,
    the files a stored resolution was read from or None)."""
    manifest, target, engine = inputs.manifest, inputs.target, previous.engine
    # A file the stack names (a release wheel, the built engine, a --hash line) is staged, image or not.
    named = [*(a.project for a in artifacts), *([engine.file.name] if engine else ()),
             *(line.name for line in inputs.hashed_requirements if line.hashes)]
    image, never = offered(target, inputs.full, named)
    if image:
        reporter.note(f"the target's image provides {len(target.provided)} distributions: kept where the stack "
                      "allows (--full stages them all)")
    reporter.note(f"resolving {len(reqs)} requirement(s) for {target.describe()}")
    hash_rules = tuple(line for line in inputs.hashed_requirements if _applies(line, target))
    options = dict(constraints=cons, toolchains=manifest.toolchains if manifest else (), prereleases=inputs.prereleases,
                   provided=image, overrides=inputs.overrides, excludes=[e.distribution for e in inputs.excludes],
                   keep=inputs.keep_image)
    resolution, evidence = _resolution(inputs, [*reqs, *(engine.requirements if engine else ())], source, reader, reporter,
                             options, cache)
    by_url = {a.url: a for a in artifacts}
    files = [_staged(p, by_url) for p in resolution.pins if not p.provided]
    if engine is not None:  # the built engine stands for its project, whatever an index has of it
        files = [f for f in files if f.name != engine.file.name]
    if hash_rules:  # files with a published sha256; the rest once downloaded
        from wheelhouse.manifest.requirements_file import check_hashes

        check_hashes(files, hash_rules)
    return files, hash_rules, delta_of(target, inputs.full, resolution, never), resolution.rewritten, evidence


def _resolution(inputs: StageInputs, requirements: list[str], source, reader, reporter: Reporter,
                options: dict[str, Any], cache: Path):
    """The resolution of ``requirements``, and the files it was read from: the stored one when its inputs and
    every index page it read are unchanged (``wheelhouse.stage.stored``), else resolved now (and stored; no
    files). ``-v`` always resolves: the explanation of each pin is the search's own account."""
    from .stored import load_stored, resolution_key, store_resolution

    key = resolution_key(requirements, inputs.target, source.locations(), options)
    if not inputs.explain:
        stored = load_stored(cache, key, source)
        if stored is not None:
            reporter.note(f"{len(stored.resolution.pins)} packages from the stored resolution (its inputs and every "
                          "index page it read are unchanged)")
            for line in stored.resolution.warnings:
                reporter.note(line)
            return stored.resolution, stored.evidence
    from wheelhouse.resolve import resolve

    resolution = resolve(requirements, inputs.target, source, reporter=reporter, metadata=reader,
                         explain=inputs.explain, **options)
    store_resolution(cache, key, resolution, source.pages_read())
    return resolution, None


def _release_artifacts(manifest, scratch: Path, client, reporter, links: list[str], reqs: list[str]):
    """[[manifest]] release wheels: a find-links page with their sha256, each pinned ==."""
    if not (manifest and manifest.release_manifests):
        return [], []
    from .release import load_releases, release_links_page

    reporter.note(f"reading {len(manifest.release_manifests)} release manifest(s)")
    artifacts, release_prov = load_releases(manifest.release_manifests, client)
    page = scratch / "release-links.html"
    page.write_text(release_links_page(artifacts), encoding="utf-8")
    links.append(str(page))
    reqs += [a.requirement for a in artifacts if a.requirement not in reqs]
    return artifacts, release_prov


def _resolve_bootstrap(inputs: StageInputs, source, reader, own_wheel: _Background | None, reporter: Reporter,
                       stack_count: int):
    """bootstrap/: wh's own wheel and its dependencies for the target (None, () without it)."""
    if not inputs.bootstrap or own_wheel is None:
        return (), None
    from wheelhouse.resolve import ResolveError, resolve

    from .bootstrap import FAST, BootstrapError

    wh_wheel = own_wheel.result()
    boot_reqs = _bootstrap_requirements(wh_wheel.path, inputs.target)
    fast = [r for r in _bootstrap_requirements(wh_wheel.path, inputs.target, FAST) if r not in boot_reqs]
    if not boot_reqs and not fast:
        return (), wh_wheel
    reporter.note(f"resolving wh's own {len(boot_reqs)} dependencies for the target (bootstrap/)")
    if fast:  # the fast extra where the target has its wheels (3-4x faster unpacking on the box); else without
        try:
            boot = resolve([*boot_reqs, *fast], inputs.target, source, constraints=(), toolchains=(),
                           prereleases=False, reporter=reporter, metadata=reader)
            return (tuple(sorted((_staged(p, {}) for p in boot.pins), key=lambda f: f.name)),
                    dataclasses.replace(wh_wheel, extras=(FAST,)))
        except ResolveError:
            reporter.note(f"bootstrap/ without wh[{FAST}] ({', '.join(fast)}): not available for the target; "
                          "the box's `wh install` unpacks with the standard zlib")
    try:
        boot = resolve(boot_reqs, inputs.target, source, constraints=(), toolchains=(), prereleases=False,
                       reporter=reporter, metadata=reader)
    except ResolveError as exc:
        # The stack resolved; only bootstrap/ did not -- say which, or it reads like the stack failed.
        raise BootstrapError(
            f"could not resolve wh's own dependencies for bootstrap/ from "
            f"{', '.join(source.locations())}: {exc.message}",
            hint="pass --no-bootstrap, or add --find-links with wh's dependencies for the target",
            detail="\n".join(filter(None, [
                f"the stack itself resolved ({stack_count} package{'s' if stack_count != 1 else ''}); "
                f"wh's own dependencies: " + ", ".join(boot_reqs),
                exc.detail,
            ])),
        ) from exc
    return tuple(sorted((_staged(p, {}) for p in boot.pins), key=lambda f: f.name)), wh_wheel


def _command(inputs: StageInputs, wh_wheel, boot_files=()) -> str | None:
    """The printed bootstrap line: with the extras bootstrap/ carries, run by the pip it carries."""
    if not inputs.bootstrap:
        return None
    from .bootstrap import bootstrap_command, pip_wheel_of

    return bootstrap_command(extras=wh_wheel.extras if wh_wheel is not None else (), pip_wheel=pip_wheel_of(boot_files))


# --- fetch, assemble, swap ---------------------------------------------------------------------------

def _write(inputs: StageInputs, out: Path, plan: _Plan, previous: Previous, cache: Path, client,
           reporter: Reporter, recovered: tuple[str, ...], compiler=None) -> StageResult:
    from wheelhouse.lock.output import new_tree, swap_in
    from wheelhouse.manifest.requirements_file import check_hashes

    from .bootstrap import BOOTSTRAP_DIR
    from .writer import WHEELS, write_stage_tree

    engine = previous.engine
    reused = _seed_cache_from(out, previous.wheels, plan.files, cache)
    new = new_tree(out)
    # Each wheel's RECORD is checked against its files as soon as it lands, while the others download; not
    # again where the previous wheelhouse recorded that wheel (the same sha256) as checked.
    from wheelhouse.lock.records import RecordChecks

    records = RecordChecks()
    try:
        # The stack downloads while bootstrap/ is still being resolved; then bootstrap/'s few files.
        files = _fetch_into(plan.files, new / WHEELS, new / ".fetch", cache, inputs.jobs, client, reporter,
                            _unless_checked(records, plan.files, previous.checked))
        boot_files, wh_wheel = plan.bootstrap.result()
        reused += _seed_cache_from(out, previous.wheels, boot_files, cache)
        boot_files = _fetch_into(boot_files, new / BOOTSTRAP_DIR, new / ".fetch-boot", cache, inputs.jobs, client,
                                 reporter, _unless_checked(records, boot_files, previous.checked))
        check_hashes(files, plan.hash_rules)
        # Before the wheelhouse gets its name: device code no GPU of the target can run (issue 10).
        from .kernels import check_kernels  # ELF reading (the doctor's): imported only when writing

        kernel_gaps = check_kernels([(new / WHEELS / f.filename, f.sha256) for f in files], inputs.target, new,
                                    allow=inputs.allow_missing_kernels, cache=cache / "kernels", jobs=inputs.jobs,
                                    reporter=reporter)
        if wh_wheel is not None:
            (new / BOOTSTRAP_DIR).mkdir(exist_ok=True)
            shutil.copyfile(wh_wheel.path, new / BOOTSTRAP_DIR / wh_wheel.path.name)
            own = _local_file("wh", __version__, new / BOOTSTRAP_DIR / wh_wheel.path.name,
                              origin=wh_wheel.origin)
            boot_files = tuple(sorted((*boot_files, own), key=lambda f: f.name))
        kept = None
        if engine is not None:
            for rel in engine.paths:
                _link_or_copy(out / rel, new / rel)
            kept = {"record": engine.record, "paths": engine.paths}
        written = tuple(sorted((*files, *([engine.file] if engine else ())), key=lambda f: f.name))
        # Every wheel written is checked, whatever way it came (wh.json lists them all as checked), here or by the
        # stage that wrote the previous wheelhouse (its bytes verified against that sha256 as they were placed).
        records.ensure([*(new / WHEELS / f.filename for f in written if f.sha256 not in previous.checked),
                        *(new / BOOTSTRAP_DIR / f.filename for f in boot_files if f.sha256 not in previous.checked)])
        records.wait()  # a wheel whose RECORD lies is refused before the wheelhouse is written
        write_stage_tree(new, inputs.manifest, inputs.target, written, boot_files, wh_wheel, {
            "requirements": plan.requirements, "constraints": plan.constraints, "indexes": plan.indexes,
            "find_links": plan.find_links, "release_manifests": list(plan.release_prov),
            "overrides": inputs.overrides, "excludes": inputs.excludes, "rewritten": plan.rewritten,
            "source": inputs.source,
        }, kept, plan.image, record_checked=[f.sha256 for f in (*written, *boot_files) if f.sha256])
        if compiler is not None:
            from .bytecode import compile_wheelhouse
            compile_wheelhouse(new, compiler, jobs=os.cpu_count(), reporter=reporter, reuse=out)
        removed = tuple(sorted(set(previous.wheels) - {f.filename for f in written}))
        swap_in(new, out)
    finally:
        records.close()
        if new.exists():
            shutil.rmtree(new, ignore_errors=True)
    return StageResult(
        out, inputs.target, written, False, bootstrap=boot_files,
        bootstrap_command=_command(inputs, wh_wheel, boot_files),
        removed=removed, reused=reused, indexes=plan.indexes,
        engine=engine.file.filename if engine else None,
        notes=(*recovered, *previous.notes, *(g.warning() for g in kernel_gaps)), image=plan.image,
        rewritten=plan.rewritten, excludes=inputs.excludes, overrides=inputs.overrides, keep_image=inputs.keep_image,
    )


def _unless_checked(records, files: Sequence[StagedFile], checked: frozenset[str]) -> Callable[[Path], None]:
    """``records.submit`` for each file as it lands, but those of ``files`` whose sha256 is in ``checked`` (the
    fetch placed them verified against that sha256: the bytes the previous stage checked)."""
    skip = {f.filename for f in files if f.sha256 and f.sha256 in checked}

    def submit(path: Path) -> None:
        if path.name not in skip:
            records.submit(path)

    return submit


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _staged(pin, releases: dict[str, ReleaseArtifact]) -> StagedFile:
    d = pin.distfile
    art = releases.get(d.url)
    return StagedFile(
        name=pin.name,
        version=str(pin.version),
        filename=d.filename,
        url=d.url,
        sha256=d.sha256 or (art.sha256 if art else None),
        size=d.size if d.size is not None else (art.size if art else None),
        requires_python=d.requires_python,
        parents=tuple(getattr(pin, "parents", ()) or ()),
        extras=tuple(sorted(getattr(pin, "extras", ()) or ())),
        origin=art.manifest_url if art else getattr(d, "origin", ""),
        release_key=art.key if art else None,
        yanked=bool(getattr(d, "yanked", False)),
        yanked_reason=getattr(d, "yanked_reason", None),
        notes=tuple(getattr(pin, "notes", ())),
    )


def _applies(line: RequirementLine, target: TargetProfile) -> bool:
    """Whether a requirement line's marker holds for the target (uv's universal output pins a
    project twice, under exclusive markers, each with its own hashes)."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        marker = Requirement(line.text).marker
    except InvalidRequirement:
        return True  # a wheel path or URL: no marker
    return marker is None or target.evaluate(marker, extra=None)


def _local_file(name: str, version: str, path: Path, origin: str) -> StagedFile:
    return StagedFile(name=name, version=version, filename=path.name, url=path.name, sha256=sha256_of(path),
                      size=path.stat().st_size, origin=origin)


def _bootstrap_requirements(wheel: Path, target: TargetProfile, extra: str | None = None) -> list[str]:
    """wh's own Requires-Dist that apply on the target (markers judged for the target, with ``extra`` or none)."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    from wheelhouse.lock.bootstrap import BootstrapError, wheel_requirements

    with_python = SpecifierSet(">=3.10")
    if not target.accepts_python(with_python):
        raise BootstrapError(
            f"wh needs Python {with_python}; the target runs {target.python_version}",
            hint="stage with --no-bootstrap and install wh on the box another way",
        )
    out = []
    for req in wheel_requirements(wheel):
        if req.marker is None or target.evaluate(req.marker, extra=extra):
            out.append(str(Requirement(f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}{req.specifier}")))
    return out


def _seed_cache_from(out: Path, old: dict[str, str], files: Sequence[StagedFile], cache: Path) -> int:
    """Put the previous wheelhouse's still-pinned wheels into the cache (verified); count reuses."""
    from wheelhouse.fetch.cache import add_to_cache, cached_path

    from .bootstrap import BOOTSTRAP_DIR
    from .writer import WHEELS

    reused = 0
    for f in files:
        if f.sha256 and cached_path(cache, f.sha256).exists():
            reused += 1
            continue
        for folder in (WHEELS, BOOTSTRAP_DIR):
            prev = out / folder / f.filename
            if f.sha256 and prev.is_file() and (folder == BOOTSTRAP_DIR or old.get(f.filename) == f.sha256):
                try:
                    add_to_cache(cache, prev, f.sha256)
                    reused += 1
                    break
                except WhError:
                    pass  # the old copy was damaged: download it again
    return reused


def _fetch_into(files: Sequence[StagedFile], dest: Path, scratch: Path, cache: Path, jobs: int, client,
                reporter, on_file: Callable[[Path], None] | None = None) -> tuple[StagedFile, ...]:
    """Fetch ``files`` in one parallel pass, place them in ``dest``, and fill in sha256/size for sources that
    published none (find-links folders). ``on_file(path)``: each file as soon as it is verified (in the
    scratch folder: the same inode as its place in ``dest``, a hardlink or a private copy)."""
    from wheelhouse.fetch import FetchItem, fetch_all
    from wheelhouse.fetch.cache import place

    items = [FetchItem(f.url, f.filename, f.sha256, f.size) for f in files]
    paths = fetch_all(items, scratch, cache, jobs=jobs, client=client, reporter=reporter, task="download",
                      on_file=on_file)
    done = []
    for f, path in zip(files, paths):
        p = place(path, dest / f.filename)
        done.append(dataclasses.replace(f, sha256=f.sha256 or sha256_of(p), size=p.stat().st_size))
    shutil.rmtree(scratch, ignore_errors=True)
    return tuple(done)
