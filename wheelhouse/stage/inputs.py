"""What one ``wh stage`` run is asked to do: the manifest and the command line merged by ONE rule.

The rule (``merge_inputs``), also stated in ``wh stage --help``:

- lists ADD to the manifest's: requirements, constraints (and their ``--hash`` lines),
  overrides (``--override FILE``), exclusions (``--exclude NAME``), ``--extra-index-url``,
  ``--find-links``; the manifest's come first, repeats are dropped;
- single values REPLACE the manifest's: ``--index-url`` (or ``WH_INDEX_URL``) replaces the
  manifest's ``index-url`` (its ``extra-index-urls`` stay); target flags (``--target``,
  ``--python-version``/``--platform``) replace the manifest's ``[target]``; ``--pre`` turns
  pre-releases on;
- pip's configured extra-index-url and find-links (PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, pip.conf) are
  added after the manifest's and the command line's, as pip adds a command line's to them;
- no index-url given: pip's configured one (PIP_INDEX_URL, pip.conf); when none is configured
  either, the extra indexes and find-links alone (an error names the missing index only when
  nothing else was given); no target given: this interpreter.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from wheelhouse.errors import UsageError
from wheelhouse.target import TargetProfile

if TYPE_CHECKING:
    from wheelhouse.manifest import Exclusion, StackManifest
    from wheelhouse.manifest.requirements_file import RequirementLine

__all__ = ["StageFlags", "StageInputs", "merge_inputs"]


@dataclass(frozen=True)
class StageFlags:
    """What the command line (and its ``WH_*`` variables) gave; None/empty: not given."""

    requirements: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    hashed_requirements: tuple[RequirementLine, ...] = ()
    overrides: tuple[str, ...] = ()
    excludes: tuple[Exclusion, ...] = ()
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    target: TargetProfile | None = None
    prereleases: bool = False
    keep_image: tuple[str, ...] = ()  # --keep-image NAME...
    target_name: str | None = None  # the profile file the flags named (for messages)


@dataclass(frozen=True)
class StageInputs:
    """Everything ``stage()`` needs, merged and checked; ``index_urls[0]`` is the main index."""

    target: TargetProfile
    out: Path
    requirements: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    manifest: StackManifest | None = None
    hashed_requirements: tuple[RequirementLine, ...] = ()
    overrides: tuple[str, ...] = ()  # replace every requirement on their project (wheelhouse.resolve.overrides)
    excludes: tuple[Exclusion, ...] = ()  # left out of the closure wherever required
    prereleases: bool = False
    jobs: int = 8
    dry_run: bool = False
    cache_dir: Path | None = None
    bootstrap: bool = True
    lock_timeout: float = 600.0
    allow_missing_kernels: bool = False  # device code no target GPU runs: warn instead of refusing
    full: bool = False  # stage the whole closure, ignoring what the target profile says its image provides
    offline: bool = False  # index pages and metadata from the cache alone; a miss is an error
    refresh: bool = False  # revalidate every cached index page, however fresh
    bytecode: bool = False  # compile every wheel's modules for the target's Python (wheelhouse.stage.bytecode)
    bytecode_python: str | None = None  # the interpreter that compiles them (default: found by version)
    lock_input: Path | None = None  # a PEP 751 lock staged as it is, nothing resolved (wheelhouse.stage.locked)
    extras: tuple[str, ...] = ()  # of the lock (or pyproject.toml) to stage
    groups: tuple[str, ...] = ()  # dependency groups of the lock (or pyproject.toml); none: the lock's defaults
    source: Mapping[str, Any] | None = None  # the file staged from when not a manifest (wh.json inputs.source)
    empty_request: bool = False  # requirements files were given and list none: stage nothing (noted), no error
    explain: bool = False  # say why each pin was chosen and what was backtracked (wh stage -v)
    # (name, the image's version): held at the target image's version, a hard constraint (--keep-image, keep-image)
    keep_image: tuple[tuple[str, str], ...] = ()


def _joined(*lists: Iterable) -> tuple:
    return tuple(dict.fromkeys(x for items in lists for x in items))


def _excluded(*lists: Iterable[Exclusion]) -> tuple[Exclusion, ...]:
    """One exclusion per project (the first, which carries the manifest's reason)."""
    from packaging.utils import canonicalize_name

    out: dict[str, Exclusion] = {}
    for e in (e for items in lists for e in items):
        out.setdefault(canonicalize_name(e.distribution), e)
    return tuple(out.values())


def _check_index_urls(urls: Sequence[str]) -> None:
    for u in urls:  # a typo here would only surface as a connection error, mid-resolve
        if urllib.parse.urlsplit(u).scheme.lower() not in ("http", "https", "file"):
            raise UsageError(f"index URL {u!r} is not an http(s):// or file:// URL",
                             hint="write it like https://HOST/simple or file:///path/to/simple (--index-url, "
                                  "--extra-index-url, or the manifest's index-url)")


def _manifest_target(manifest: StackManifest | None) -> TargetProfile | None:
    from wheelhouse.target import load_target, target_from_flags

    if manifest is None:
        return None
    if manifest.target_file:
        return load_target(manifest.target_file)
    if manifest.target_flags:
        tf = manifest.target_flags
        return target_from_flags(str(tf.get("python-version", "")), list(tf.get("platforms", [])),
                                 tf.get("implementation", "cp"), tf.get("abi"))
    return None


def merge_inputs(manifest: StackManifest | None, flags: StageFlags, out: Path, **run) -> StageInputs:
    """The one merge of a manifest and the command line (rule in the module docstring).

    ``run``: how to run rather than what to stage (jobs, dry_run, cache_dir, bootstrap,
    lock_timeout, allow_missing_kernels), passed through to StageInputs.
    """
    from wheelhouse.index import default_index_url, read_pip_index_config
    from wheelhouse.target import host_target

    m = manifest
    pip = read_pip_index_config()
    main = flags.index_url or (m.index_url if m else None) or (None if pip.no_index else pip.index_url)
    # pip's configured lists come after the manifest's and the flags' (pip adds a command line's to them)
    extras = _joined(m.extra_index_urls if m else (), flags.extra_index_urls, () if pip.no_index else pip.extra_index_urls)
    find_links = _joined(m.find_links if m else (), flags.find_links, pip.find_links)
    given = (m.extra_index_urls if m else ()) or flags.extra_index_urls or (m.find_links if m else ()) or flags.find_links
    if main is None and not given:
        # Nothing names a source: the default pip states (or UNCONFIGURED, which says so when asked).
        # With other sources named, those alone are used (as pip --no-index -f).
        main = default_index_url()
    index_urls = _joined([main] if main else [], extras)
    _check_index_urls(index_urls)
    target = flags.target or _manifest_target(m) or host_target()
    profile = flags.target_name if flags.target else (str(m.target_file) if m and m.target_file else None)
    keep = _kept_from_image(_joined(m.keep_image if m else (), flags.keep_image), target, profile)
    return StageInputs(
        target=target,
        out=Path(out),
        requirements=_joined(m.requirements if m else (), flags.requirements),
        constraints=_joined(m.constraints if m else (), flags.constraints),
        index_urls=index_urls,
        find_links=find_links,
        manifest=m,
        hashed_requirements=_joined(m.hashed_requirements if m else (), flags.hashed_requirements),
        overrides=_joined(m.overrides if m else (), flags.overrides),
        excludes=_excluded(m.excludes if m else (), flags.excludes),
        prereleases=flags.prereleases or bool(m and m.prereleases),
        keep_image=keep,
        **run,
    )


def _kept_from_image(names: Sequence[str], target: TargetProfile, profile: str | None) -> tuple[tuple[str, str], ...]:
    """(name, the image's version) of each distribution to keep; a name the image does not provide is refused."""
    from packaging.utils import canonicalize_name

    image = {canonicalize_name(d.name): d.version for d in target.provided}
    where = f"the target profile {profile}" if profile else f"the target ({target.describe()})"
    out = []
    for name in names:
        key = canonicalize_name(name)
        if key not in image:
            listed = f"it lists {len(image)} distributions" if image else "it lists no distributions"
            raise UsageError(f"--keep-image {name}: {where} provides no distribution named {key} ({listed})",
                             hint="name one the image has (the profile's `distributions`), or capture the box's "
                                  "profile with `wh target capture` where it has it")
        out.append((key, image[key]))
    return tuple(dict.fromkeys(out))
