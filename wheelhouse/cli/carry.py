"""`wh pack` and `wh verify`: a wheelhouse as one archive to carry, and checked on arrival."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import click

from ._ui import check_writable, emit_json, plural

__all__ = ["pack", "verify"]


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB"


@click.command()
@click.argument("wheelhouse", type=click.Path(file_okay=False, path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The archive to write (its sidecar is OUTPUT.sha256).")
@click.option("--part-size", metavar="SIZE", help="Split into OUTPUT.part-0001, ... of at most this size (2G, 700M, 64K).")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON on stdout.")
@click.pass_obj
def pack(ui, wheelhouse, out, part_size, as_json) -> None:
    """Write WHEELHOUSE as one deterministic tar archive with a sha256 sidecar, optionally in parts.

    The same wheelhouse always makes the same bytes (sorted members, fixed times, owners and modes,
    no compression: wheels are compressed already). Only what the wheelhouse owns goes in. The
    wheelhouse is checked first and every wheel's sha256 against pylock.toml as it is written; a
    failure (a full disk) leaves no archive under its final name. `wh install` and `wh verify` take
    the archive, or any of its parts, directly.

    \b
    Examples:
      wh pack ./wheelhouse -o wheelhouse.tar
      wh pack ./wheelhouse -o /media/stick/wh.tar --part-size 2G
    """
    from wheelhouse.carry.pack import pack_wheelhouse, parse_size
    from wheelhouse.install import closure

    size = parse_size(part_size) if part_size else None
    check_writable("-o", out)
    reporter = ui.reporter()
    try:
        result = pack_wheelhouse(wheelhouse, out, part_size=size, reporter=reporter, closure=closure)
    finally:
        reporter.close()
    if as_json:
        emit_json(result.to_json())
    for p, sha, n in result.parts:
        ui.info(f"  {p.name}  {_mib(n)}  sha256 {sha[:16]}...")
    where = f"{plural(len(result.parts), 'part')} of {result.archive.name}" if result.parts else str(result.archive)
    ui.info(f"packed {plural(result.files, 'file')} ({_mib(result.size)}) into {where}; "
            f"sha256 {result.sha256[:16]}... in {result.sidecar}")


def _print_summary(ui, s: dict) -> None:
    """What the wheelhouse is for (its target) and what it holds."""
    t = s.get("target")
    if t:
        gpus = ", ".join(f"{g.get('name', '?')} sm {g.get('compute_capability') or '?'}"
                         for g in t.get("gpus") or []) or "none recorded"
        extra = "".join(f", {k.split('_')[0]} {t[k]}" for k in ("driver_version", "cuda_version") if t.get(k))
        ui.data(f"target: {t['describe']}, {t.get('platform') or 'any platform'}; GPUs: {gpus}{extra}"
                + (f"; image provides {t['provided']} distributions" if t.get("provided") else ""))
    else:
        ui.data("target: none recorded")
    engine = s.get("engine")
    ui.data(f"holds: {plural(s.get('wheels', 0), 'wheel')} ({_mib(s.get('size', 0))}), "
            f"bootstrap {plural(s.get('bootstrap', 0), 'wheel')}, {plural(s.get('patches', 0), 'patch file')}"
            + (f", engine {engine.get('name')} at {str(engine.get('commit'))[:12]}" if engine else "")
            + (f", bytecode for {s['bytecode']['cache_tag']} ({plural(s['bytecode']['packs'], 'wheel')})"
               if s.get("bytecode") else ""))


def _print(ui, verdict) -> None:
    s = verdict.summary
    ui.data(f"wheelhouse: {verdict.archive or verdict.wheelhouse}" + (f" ({s['name']})" if s.get("name") else ""))
    if s:  # empty: the archive was refused before there was a wheelhouse to describe
        _print_summary(ui, s)
    for note in verdict.notes:
        ui.info(f"note: {note}")
    for problem in verdict.problems:
        ui.data(f"problem: {problem}")
    hashed = "" if verdict.hashed else " (sizes only, not hashed)"
    ui.data(f"ok: every check passed{hashed}" if verdict.ok else f"failed: {plural(len(verdict.problems), 'problem')}")


@click.command()
@click.argument("source")
@click.option("--no-hashes", is_flag=True, help="Check structure and sizes only; do not hash the wheels.")
@click.option("-j", "--jobs", type=click.IntRange(1, 256), help="Wheels hashed at once (default: 2x cores, at most 8).")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON on stdout.")
@click.pass_obj
def verify(ui, source, no_hashes, jobs, as_json) -> None:
    """Check a wheelhouse folder or its archive (the file, a part, or the sidecar) offline.

    An archive is checked against its sidecar first (every part there, in order, each part's and the
    whole's sha256), then unpacked into a private folder that is removed afterwards. Then: every wheel's
    sha256 and size against pylock.toml, the lock against wh.json, simple/ against the lock, bootstrap/
    complete for the target, the patches and their payload hashes; the target is summarised. Each
    problem is one line. Exit 0 when clean, 1 with problems, 2 when SOURCE is not a wheelhouse.

    \b
    Examples:
      wh verify ./wheelhouse
      wh verify /media/stick/wh.tar.part-0001 --json
    """
    from dataclasses import replace

    from wheelhouse.carry import ArchiveError, UnsafeArchive, is_archive, unpack_into
    from wheelhouse.carry.verify import Verdict, verify_wheelhouse
    from wheelhouse.install import closure
    from wheelhouse.errors import UsageError

    archive = is_archive(source)
    if archive is None and not Path(source).is_dir():
        what = "is a file, neither a wheelhouse folder nor an archive `wh pack` wrote" if Path(source).exists() \
            else "does not exist"
        raise UsageError(f"{source} {what}", hint="pass a wheelhouse folder (holding wh.json) or a `wh pack` archive")
    reporter = ui.reporter()
    with ExitStack() as held:
        try:
            folder = unpack_into(archive, held, reporter) if archive else Path(source)
            verdict = verify_wheelhouse(folder, hashes=not no_hashes, jobs=jobs, reporter=reporter, closure=closure)
            if archive:  # named by the archive: the private folder it was unpacked into is gone once this returns
                inside = f"{archive.whole}:{folder.name}"
                verdict = replace(verdict, archive=str(archive.whole), wheelhouse=inside,
                                  problems=tuple(p.replace(str(folder), inside) for p in verdict.problems),
                                  notes=tuple(n.replace(str(folder), inside) for n in verdict.notes))
        except (ArchiveError, UnsafeArchive) as exc:
            lines = (exc.detail or exc.message).splitlines()
            verdict = Verdict(Path(source), tuple(lines), archive=str(archive.whole) if archive else None)
        finally:
            reporter.close()
    if as_json:
        emit_json(verdict.to_json())
    else:
        _print(ui, verdict)
    if not verdict.ok:
        raise click.exceptions.Exit(1)
