"""`wh cache info|prune|clean`: what the download cache holds, and giving the disk back."""

from __future__ import annotations

from pathlib import Path

import click

from ._ui import emit_json, human_size as _human

__all__ = ["cache"]

_KIND_NAMES = ("wheels", "partials", "pages", "metadata", "link-cache", "builds", "other")


def _cache_option(fn):
    return click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), envvar="WH_CACHE_DIR",
                        help="The cache (default: $XDG_CACHE_HOME/wh, else ~/.cache/wh).")(fn)


def _root(cache_dir: Path | None) -> Path:
    from wheelhouse.cachedir import default_cache_dir

    return Path(cache_dir) if cache_dir else default_cache_dir()


@click.group()
def cache() -> None:
    """Show the cache's size by kind (info), remove what nothing needs (prune), or empty it (clean)."""


@cache.command()
@_cache_option
@click.option("--json", "as_json", is_flag=True, help="Print the sizes as JSON on stdout.")
@click.pass_obj
def info(ui, cache_dir, as_json) -> None:
    """Disk used by each kind: wheels, partial downloads, index pages, metadata, the link cache, builds.

    A wheel whose file a wheelhouse on this filesystem also links is counted as shared: removing the
    cache's name for it frees nothing.
    """
    from wheelhouse.fetch.usage import cache_usage

    root = _root(cache_dir)
    usage = cache_usage(root)
    total = sum(u.bytes for u in usage)
    if as_json:
        emit_json({"cache": str(root), "kinds": [u.to_json() for u in usage], "total_bytes": total})
        return
    ui.data(f"cache: {root}")
    for u in usage:
        shared = f"  ({_human(u.shared)} shared with wheelhouses)" if u.shared else ""
        ui.data(f"{u.kind:<11} {_human(u.bytes):>9}  {u.files:>6} files  {', '.join(f + '/' for f in u.folders)}{shared}")
    ui.data(f"{'total':<11} {_human(total):>9}")


def _report(ui, root: Path, done, as_json: bool, verb: str) -> None:
    if as_json:
        emit_json({"cache": str(root), **done.to_json()})
        return
    for kind in sorted(done.files):
        ui.info(f"{verb} {done.files[kind]} {kind} file(s): {_human(done.freed[kind])} freed")
    for kind, n in sorted(done.busy.items()):
        ui.info(f"kept {n} {kind} entr{'y' if n == 1 else 'ies'} a running wh holds")
    ui.info(f"freed {_human(done.total)} in {root}")


@cache.command()
@_cache_option
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON on stdout.")
@click.pass_obj
def prune(ui, cache_dir, as_json) -> None:
    """Remove what no wheelhouse, venv or running wh needs.

    \b
    wheels      no wheelhouse links the file (its inode has one link), and no
                wh stage/build is fetching (all are kept while one runs)
    partials    no running `wh stage` holds the download's lock
    link-cache  no venv links any of the entry's files
    temp files  older than an hour (a killed writer's)
    Index pages and metadata are kept (what --offline runs on): `wh cache clean --kind pages`.
    """
    from wheelhouse.fetch.usage import prune_cache

    root = _root(cache_dir)
    _report(ui, root, prune_cache(root), as_json, "removed")


@cache.command()
@_cache_option
@click.option("--kind", "kinds", multiple=True, type=click.Choice(_KIND_NAMES),
              help="Remove only this kind (repeatable; default: every kind).")
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON on stdout.")
@click.pass_obj
def clean(ui, cache_dir, kinds, as_json) -> None:
    """Remove every entry (or every entry of --kind). Wheelhouses keep their files (they are links or
    copies); a download a running wh holds is kept."""
    from wheelhouse.fetch.usage import clean_cache

    root = _root(cache_dir)
    _report(ui, root, clean_cache(root, kinds), as_json, "removed")
